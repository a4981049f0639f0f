"""Exports that real Hugging Face clients can use: ``archpool export-hf`` on a trained run directory (its
tokenizer lives in the data store), then ``AutoTokenizer`` + ``AutoModelForCausalLM`` + ``generate``, and
lm-evaluation-harness (``lm_eval --model hf``) on a local loglikelihood task and a local generate_until task,
whose per-example log-likelihoods must equal archpool's own."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from archpool.cli import main  # noqa: E402
from archpool.eval.lm import lm_from_decoder  # noqa: E402
from archpool.model.checkpoint import load_checkpoint  # noqa: E402
from archpool.pool.plan import build_plan, write_plan  # noqa: E402
from archpool.pool.spec import load_pool  # noqa: E402
from tests.helpers.corpus import SENTENCES  # noqa: E402
from tests.helpers.export import train_run  # noqa: E402
from tests.helpers.pool import toy_pool  # noqa: E402

LL_TOL = 1e-3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield train_run(tmp_path_factory.mktemp("trained"))
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def export(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "hf"
    assert main(["export-hf", str(run), str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def store_tokenizer(run):
    from archpool.data.store import Store

    (store,) = (run.parent / "cache" / "data").iterdir()
    return Store(store).tokenizer


def test_export_of_a_run_dir_picks_the_extended_model_and_declares_the_special_tokens(run, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export-hf", str(run), str(out)]) == 0
    said = capsys.readouterr().out
    assert "extended model [ntk to 64 tokens]" in said and str(run / "extend" / "ntk" / "milestones" / "final") in said
    assert "bos <|bos|>=0, eos <|eos|>=1, pad <|pad|>=2" in said and "Olmo3ForCausalLM" in said
    config = json.loads((out / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (0, 1, 2)
    assert config["max_position_embeddings"] == 64  # the extended length, not the pretraining 32
    ext = load_checkpoint(run / "extend" / "ntk" / "milestones" / "final").cfg
    assert config["rope_parameters"]["full_attention"]["rope_theta"] == pytest.approx(ext.rope.theta)
    gen = json.loads((out / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (0, 1, 2)
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert (tok_cfg["bos_token"], tok_cfg["eos_token"], tok_cfg["pad_token"]) == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert tok_cfg["model_max_length"] == 64
    assert (out / "tokenizer.json").is_file()


def test_export_pretrained_milestone_and_checkpoint_paths(run, tmp_path, capsys):
    assert main(["export-hf", str(run), str(tmp_path / "pre"), "--pretrained"]) == 0
    assert "final pretraining milestone" in capsys.readouterr().out
    assert json.loads((tmp_path / "pre" / "config.json").read_text())["max_position_embeddings"] == 32
    # a milestone directory: the tokenizer is found through the run record above it
    assert main(["export-hf", str(run / "milestones" / "final"), str(tmp_path / "ms")]) == 0
    assert "checkpoint final of run" in capsys.readouterr().out
    assert (tmp_path / "ms" / "tokenizer.json").read_text() == (tmp_path / "pre" / "tokenizer.json").read_text()
    # the extension's own run directory
    assert main(["export-hf", str(run / "extend" / "ntk"), str(tmp_path / "ext")]) == 0
    assert json.loads((tmp_path / "ext" / "config.json").read_text())["max_position_embeddings"] == 64


def test_export_of_a_pool_run_directory(run, store_tokenizer, tmp_path, capsys):
    """A pool's runs/<run>/: the plan's extend node for the run, its data store named in the record."""
    pool = tmp_path / "pool"
    spec = load_pool(toy_pool(tmp_path, seeds=[0], milestones=[], extension=[dict(name="ntk", steps=2)]))
    nodes = build_plan(spec)
    name = spec.runs[0].name
    pre_node, ext_node = (next(n for n in nodes if n.id == i) for i in (f"pretrain:{name}", f"extend:{name}:ntk"))
    pre, ext = pool / "stages" / "pretrain" / pre_node.key, pool / "stages" / "extend" / ext_node.key
    shutil.copytree(run, pre, ignore=shutil.ignore_patterns("extend"))
    shutil.copytree(run / "extend" / "ntk", ext)
    (store,) = (run.parent / "cache" / "data").iterdir()
    for d, stage, key in ((pre, "pretrain", pre_node.key), (ext, "extend", ext_node.key)):
        rec = json.loads((d / "run_config.json").read_text())
        rec["data"] = {**rec["data"], "store": str(store), "sources": [{"kind": "files", "path": "/nonexistent"}]}
        (d / "run_config.json").write_text(json.dumps(rec))
        (d / "DONE").write_text(json.dumps({"stage": stage, "key": key, "result": {}}))
    write_plan(pool, spec, nodes)
    (pool / "runs" / name).mkdir(parents=True)
    assert main(["export-hf", str(pool / "runs" / name), str(tmp_path / "hf")]) == 0
    said = capsys.readouterr().out
    assert f"pool run {name!r}, extended model (node extend:{name}:ntk)" in said and f"data store {store}" in said
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["max_position_embeddings"] == 64
    assert main(["export-hf", str(pool / "runs" / name), str(tmp_path / "hf2"), "--pretrained"]) == 0
    assert f"final pretraining milestone (node pretrain:{name})" in capsys.readouterr().out


def test_export_without_a_findable_tokenizer_is_a_named_error(tmp_path, capsys):
    from archpool.model import Decoder, ModelConfig
    from archpool.model.checkpoint import save_checkpoint

    run = tmp_path / "synthetic_run"
    save_checkpoint(
        Decoder(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)), run / "milestones" / "final"
    )
    (run / "run_config.json").write_text(json.dumps({"kind": "pretrain", "data": {"synthetic": {}}}))
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "cannot find the tokenizer" in err and "synthetic token stream" in err and "--tokenizer" in err
    assert not (tmp_path / "hf" / "model.safetensors").exists()
    assert main(["export-hf", str(run), str(tmp_path / "hf"), "--no-tokenizer"]) == 0  # explicit: weights only
    assert "tokenizer: none" in capsys.readouterr().out
    # the Python API refuses a bare checkpoint path too (never a silent drop)
    from archpool.model.hf import TokenizerNotFoundError, export_hf

    with pytest.raises(TokenizerNotFoundError, match="no tokenizer.json"):
        export_hf(run / "milestones" / "final", tmp_path / "hf3")


def test_auto_classes_and_generate_on_the_export(export, run, store_tokenizer):
    tok = transformers.AutoTokenizer.from_pretrained(str(export))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32).eval()
    assert type(model).__name__ == "Olmo3ForCausalLM"
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    text = "the cat sat on the"
    ids = tok(text)["input_ids"]
    assert ids == store_tokenizer.encode(text)  # no BOS added, same ids as archpool's tokenizer
    assert tok.decode(ids) == text

    ours = lm_from_decoder(load_checkpoint(run / "extend" / "ntk" / "milestones" / "final").eval())
    want = ours.greedy_generate(ids, 10, stop_ids={tok.eos_token_id})
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), max_new_tokens=10, do_sample=False
        )
    got = out[0, len(ids) :].tolist()
    assert got[: len(want)] == want
    assert len(tok.decode(got, skip_special_tokens=True)) > 0
    # a padded batch: the declared pad token makes batched generation work without configuration
    tok.padding_side = "left"
    batch = tok(["the cat sat on the", "a river runs by the stone"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, batch["input_ids"].shape[1] + 4)


def _lm_eval_tasks(root: Path) -> list[dict]:
    rng = random.Random(3)
    words = " ".join(SENTENCES).replace(".", "").split()
    docs = []
    for _ in range(12):
        ctx = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 2)))
        ctx = ctx + " " + " ".join(rng.choice(SENTENCES).rstrip(".").split()[: rng.randint(1, 4)])
        cont = " " + " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
        docs.append({"context": ctx, "continuation": cont})
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    common = (
        f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {root / 'docs.jsonl'}\ntest_split: test\n"
        'doc_to_text: "{{context}}"\ndoc_to_target: "{{continuation}}"\ntarget_delimiter: ""\n'
    )
    (root / "ll.yaml").write_text(
        "task: archpool_ll\noutput_type: loglikelihood\n"
        + common
        + "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    (root / "gen.yaml").write_text(
        "task: archpool_gen\noutput_type: generate_until\n"
        + common
        + 'generation_kwargs:\n  until: ["."]\n  max_gen_toks: 8\n  do_sample: false\n'
        + "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return docs


@pytest.mark.slow
def test_lm_eval_harness_on_the_export_agrees_with_archpool(export, run, store_tokenizer, tmp_path, capsys):
    """``lm_eval --model hf --model_args pretrained=EXPORT`` on local tasks: it runs, and its per-example
    log-likelihoods equal archpool's own (LM.continuation_logprobs on the archpool checkpoint) within 1e-3."""
    exe = shutil.which("lm_eval", path=str(Path(sys.executable).parent)) or shutil.which("lm_eval")
    if exe is None:
        pytest.skip("lm-evaluation-harness is not installed (pip install -e '.[test]')")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    docs = _lm_eval_tasks(tasks)
    cmd = [
        exe,
        "--model",
        "hf",
        "--model_args",
        f"pretrained={export},dtype=float32",
        "--tasks",
        "archpool_ll,archpool_gen",
        "--include_path",
        str(tasks),
        "--device",
        "cpu",
        "--batch_size",
        "1",
        "--log_samples",
        "--output_path",
        str(tmp_path / "results"),
    ]
    env = dict(
        os.environ,
        HF_HOME=str(tmp_path / "hf_home"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    def samples(task):
        (f,) = (tmp_path / "results").rglob(f"samples_{task}_*.jsonl")
        return sorted((json.loads(line) for line in f.read_text().splitlines()), key=lambda s: s["doc_id"])

    ours = lm_from_decoder(load_checkpoint(run / "extend" / "ntk" / "milestones" / "final").eval())
    diffs = []
    for s in samples("archpool_ll"):
        doc = docs[s["doc_id"]]
        ctx = store_tokenizer.encode(doc["context"])  # lm-eval's split: whole[len(context):]
        cont = store_tokenizer.encode(doc["context"] + doc["continuation"])[len(ctx) :]
        assert len(ctx) + len(cont) <= 64  # within the exported length: lm-eval truncates nothing
        want = ours.continuation_logprobs(ctx, [cont])[0]
        diffs.append(abs(float(s["filtered_resps"][0][0]) - want))
    assert len(diffs) == len(docs)
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    with capsys.disabled():  # shown in CI's log even under -q
        print("\n$ lm_eval " + " ".join(cmd[1:]) + "\n" + "\n".join(table))
        print(
            f"lm-eval vs archpool per-example log-likelihood (archpool_ll, loglikelihood): "
            f"{sum(d <= LL_TOL for d in diffs)}/{len(docs)} within {LL_TOL}, max |diff| {max(diffs):.2e}"
        )
    assert max(diffs) <= LL_TOL

    gens = samples("archpool_gen")
    assert len(gens) == len(docs)
    for s in gens:
        ids = store_tokenizer.encode(docs[s["doc_id"]]["context"])
        greedy = ours.greedy_generate(ids, 8, stop_ids={store_tokenizer.eos_id})
        want = store_tokenizer.decode([t for t in greedy if t != store_tokenizer.eos_id]).split(".")[0]
        assert s["filtered_resps"][0] == want
    with capsys.disabled():
        print(f"lm-eval generate_until (archpool_gen): {len(gens)}/{len(docs)} generations equal archpool's greedy decode")
