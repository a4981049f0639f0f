"""The scoring interface: chunked prefill == full forward, HF parity, and the `archpool eval` command."""

import json

import pytest
import torch

from archpool.eval.lm import lm_from_decoder, lm_from_hf
from archpool.eval.runner import run_task
from archpool.model import Decoder, ModelConfig
from archpool.tasks import task_config


def tiny(vocab, **kw):
    torch.manual_seed(0)
    return Decoder(ModelConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=128, **kw), seed=1)


@pytest.mark.parametrize("kw", [{}, {"window": 8, "swa_pattern": "all"}], ids=["full", "swa"])
def test_chunked_prefill_matches_full_forward(kw):
    m = tiny(97, **kw).eval()
    lm = lm_from_decoder(m, prefill_chunk=7, max_batch=2)
    ids = torch.randint(0, 97, (3, 41))
    with torch.no_grad():
        full = torch.nn.functional.cross_entropy(m(ids)[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        assert torch.allclose(lm.token_nll(ids), full, atol=1e-5)
        prompt, conts = ids[0, :30].tolist(), [ids[1, :3].tolist(), ids[2, :1].tolist(), ids[0, 30:36].tolist()]
        got = lm.continuation_logprobs(prompt, conts)
        for c, g in zip(conts, got):
            lp = torch.log_softmax(m(torch.tensor([prompt + c]))[0], -1)
            assert g == pytest.approx(sum(float(lp[len(prompt) - 1 + j, c[j]]) for j in range(len(c))), abs=1e-4)
        seq = list(prompt)
        for _ in range(5):
            seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
    assert lm.greedy_generate(prompt, 5) == seq[len(prompt) :]
    assert lm.greedy_generate(prompt, 5, stop_ids={seq[len(prompt)]}) == seq[len(prompt) : len(prompt) + 1]


@pytest.mark.parametrize("kw", [{}, {"window": 16, "swa_pattern": "all"}], ids=["llama", "mistral_swa"])
def test_generation_scores_on_exported_hf_model_equal_archpool(kw, bpe, tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from archpool.model.hf import export_hf

    m = tiny(bpe.vocab_size, **kw).eval()
    bpe.save(tmp_path / "tok")
    export_hf(m, tmp_path / "hf", tokenizer=tmp_path / "tok" / "tokenizer.json")
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32)
    ours, theirs = lm_from_decoder(m, prefill_chunk=64), lm_from_hf(hf, prefill_chunk=64)
    for task, L in [("kv_recall", 160), ("niah_single_1", 256), ("icl", 256)]:
        config = task_config(task, {"max_new_tokens": 12})
        a = run_task(ours, bpe, task, L, ["gen", "ll"], n=2, seed=3, config=config)
        b = run_task(theirs, bpe, task, L, ["gen", "ll"], n=2, seed=3, config=config)
        assert a["gen"]["score"] == b["gen"]["score"]
        assert [r["gen_ids"] for r in a["gen"]["samples"]] == [r["gen_ids"] for r in b["gen"]["samples"]]
        for ra, rb in zip(a["ll"]["samples"], b["ll"]["samples"]):
            assert ra["gold_logprob"] == pytest.approx(rb["gold_logprob"], abs=1e-3)
            assert ra["rank"] == rb["rank"]


def test_run_task_records_modes_chance_and_budget(bpe):
    lm = lm_from_decoder(tiny(bpe.vocab_size).eval())
    res = run_task(lm, bpe, "kv_recall", 128, ["gen", "ll"], n=3, seed=0)
    assert res["gen"]["mode"] == "gen" and res["ll"]["metric"] == "ll_accuracy"
    assert res["ll"]["chance"] == pytest.approx(10.0) and res["ll"]["n"] == 3
    for r in res["gen"]["samples"]:
        assert r["prompt_tokens"] + len(r["gen_ids"]) <= 128
    skipped = run_task(lm, bpe, "rerank", 64, ["ll"], n=1, seed=0)
    assert "too short" in skipped["ll"]["skipped"]


def test_eval_command_writes_results_and_uses_cache(bpe, tmp_path, capsys):
    from archpool.cli import main
    from archpool.model.checkpoint import save_checkpoint

    ckpt = tmp_path / "ckpt"
    save_checkpoint(tiny(bpe.vocab_size), ckpt)
    bpe.save(ckpt)
    args = [
        str(ckpt),
        "--suite",
        "tiny",
        "--suite",
        "longppl",
        "--n",
        "2",
        "--lengths",
        "128",
        "160",
        "--out",
        str(tmp_path / "out"),
        "--cache",
        str(tmp_path / "cache"),
        "--no-progress",
    ]
    texts = tmp_path / "held_out.txt"
    texts.write_text("\n\n\n".join(["The grass is green and the river runs deep into the valley below. " * 40] * 3))
    assert main(["eval", *args, "--texts", str(texts)]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["pretrain_len"] == 128 and res["lengths"] == [128, 160]
    tasks = {(r["task"], r["length"], r["mode"]) for r in res["tasks"]}
    assert ("kv_recall", 160, "ll") in tasks and ("kv_recall", 128, "gen") in tasks
    assert all(r.get("cached") is None for r in res["tasks"])
    ll = [r for r in res["tasks"] if r["mode"] == "ll" and "score" in r]
    assert all("chance" in r for r in ll)
    assert (tmp_path / "out" / "tasks" / "kv_recall" / "160_ll.json").is_file()
    lp = {r["length"]: r for r in res["longppl"]}
    assert lp[160]["n_docs"] == 3 and lp[160]["ppl"] > 1 and "n_key_token" in lp[160]
    assert main(["eval", *args, "--texts", str(texts)]) == 0
    res2 = json.loads((tmp_path / "out" / "results.json").read_text())
    assert all(r.get("cached") for r in res2["tasks"] if "score" in r)
    assert [r["score"] for r in res2["tasks"] if "score" in r] == [r["score"] for r in res["tasks"] if "score" in r]
    assert "kv_recall" in capsys.readouterr().out


def test_eval_command_rejects_bad_target(tmp_path, capsys):
    from archpool.cli import main

    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "no such run" in capsys.readouterr().err
