"""Every evaluation cache is keyed by the whole model, not by its weights alone: the same weights under another
RoPE in config.json (YaRN ×2 at twice the context, what a zero-step extension writes) are another model.
archpool's own suites (on a Hugging Face directory and on an archpool checkpoint), lm-eval's RULER, HELMET's
data and the attention analysis each score the rescaled copy afresh, and its scores differ from the
original's, while a second run of the original is served from the cache. A change of generation_config.json
or of a tokenizer file is another model too, and so is it for a checkpoint pool's stage keys."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

LENGTH = 512  # archpool's suites and lm-eval's RULER
HELMET_LENGTH = 1024  # the HELMET files of tests/eval/test_helmet_data.py


def _llama(path, tok):
    """A random Llama (2 layers, d 32, GQA 4/2, context 1024) written by transformers, with the tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from archpool.model.hf import export_tokenizer

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=HELMET_LENGTH,
        initializer_range=0.3,  # sharp enough attention for RoPE to move the scores
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        pad_token_id=tok.pad_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    export_tokenizer(tok, path, HELMET_LENGTH)
    return path


def _rescaled(src, dst):
    """A copy of the HF directory ``src`` whose config.json alone differs: YaRN ×2, twice the context."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["rope_parameters"] = {
        "rope_type": "yarn",
        "rope_theta": 10_000.0,
        "factor": 2.0,
        "original_max_position_embeddings": HELMET_LENGTH,
    }
    cfg["max_position_embeddings"] = 2 * HELMET_LENGTH
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def tok():
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    return pseudo_bpe(pseudo_texts())


@pytest.fixture(scope="module")
def hf(tmp_path_factory, tok):
    """(the original HF directory, its copy with another RoPE in config.json)."""
    root = tmp_path_factory.mktemp("whole_model")
    original = _llama(root / "original", tok)
    return original, _rescaled(original, root / "yarn")


def _weights_equal(a, b) -> bool:
    return (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def _suite_eval(target, cache):
    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.target import load_target

    request = EvalRequest(suites=(), tasks=["kv_recall"], lengths=[LENGTH], modes=["ll"], n_samples=2, cache_dir=cache)
    (res,) = evaluate(load_target(target), request, progress=False)["tasks"]
    return res


def test_archpool_suites_on_an_hf_directory_score_a_config_change_afresh(hf, tmp_path):
    original, yarn = hf
    assert _weights_equal(original, yarn)
    cache = tmp_path / "cache"
    first = _suite_eval(original, cache)
    assert not first.get("cached")
    assert _suite_eval(original, cache).get("cached")  # the cache serves the same model
    other = _suite_eval(yarn, cache)
    assert not other.get("cached") and other["model_hash"] != first["model_hash"]
    assert abs(other["gold_logprob_mean"] - first["gold_logprob_mean"]) > 1e-4  # another model, other scores


def test_archpool_suites_on_an_archpool_checkpoint_score_a_config_change_afresh(tok, tmp_path):
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    cfg = ModelConfig(
        vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=LENGTH, init_std=0.3
    )
    torch.manual_seed(0)
    save_checkpoint(Decoder(cfg, seed=3), tmp_path / "ck")
    tok.save(tmp_path / "ck")
    shutil.copytree(tmp_path / "ck", tmp_path / "ck_theta")
    config = json.loads((tmp_path / "ck_theta" / "config.json").read_text())
    config["model"]["rope"]["theta"] = 500.0  # RoPE only: the weights' bytes stay the same
    (tmp_path / "ck_theta" / "config.json").write_text(json.dumps(config))
    assert _weights_equal(tmp_path / "ck", tmp_path / "ck_theta")
    cache = tmp_path / "cache"
    first = _suite_eval(tmp_path / "ck", cache)
    assert _suite_eval(tmp_path / "ck", cache).get("cached")
    other = _suite_eval(tmp_path / "ck_theta", cache)
    assert not other.get("cached") and other["model_hash"] != first["model_hash"]
    assert abs(other["gold_logprob_mean"] - first["gold_logprob_mean"]) > 1e-4


def test_lm_eval_ruler_scores_a_config_change_afresh(hf, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from archpool.eval import harness as H

    original, yarn = hf
    calls: list[str] = []
    real = H.run_lm_eval

    def counted(lm, task, length, *a, **k):
        calls.append(str(lm.model.config.rope_parameters.get("rope_type")))
        return real(lm, task, length, *a, **k)

    monkeypatch.setattr(H, "run_lm_eval", counted)

    def run(model_dir):
        request = H.HarnessRequest(tasks=["niah_single_1"], lengths=[LENGTH], limit=1, cache_dir=tmp_path / "cache")
        return H.run_ruler(model_dir, request)

    first = run(original)
    again = run(original)
    assert calls == ["default"] and again["cells"][0].get("cached")
    other = run(yarn)
    assert calls == ["default", "yarn"], "the rescaled model was served the original's cell"
    assert not other["cells"][0].get("cached") and other["model_hash"] != first["model_hash"]


def test_helmet_data_scores_a_config_change_afresh(hf, tmp_path, monkeypatch):
    from archpool.eval import helmet_data as H
    from tests.eval.test_helmet_data import make_data

    original, yarn = hf
    data = make_data(tmp_path, length=HELMET_LENGTH)
    generated: list[str] = []
    real = H._Model.generate

    def counted(self, ids, gen, stops):
        generated.append(str(self.lm.config.rope_parameters.get("rope_type")))
        return real(self, ids, gen, stops)

    monkeypatch.setattr(H._Model, "generate", counted)

    def run(model_dir):
        request = H.HelmetDataRequest(
            data_dir=data, categories=["recall"], lengths=[HELMET_LENGTH], limit=1, shots=1, cache_dir=tmp_path / "cache"
        )
        return H.run_helmet_data(model_dir, request)

    first = run(original)
    n = len(generated)
    assert n > 0 and set(generated) == {"default"}
    assert all(c.get("cached") for c in run(original)["cells"]) and len(generated) == n
    other = run(yarn)
    assert generated[n:] == ["yarn"] * n, "the rescaled model was served the original's cells"
    assert not any(c.get("cached") for c in other["cells"]) and other["model_hash"] != first["model_hash"]


def test_attention_analysis_of_a_config_change_is_not_the_cached_one(hf, tmp_path, monkeypatch):
    from archpool.attention.settings import Settings
    from archpool.attention.stage import analyze_target
    from tests.helpers.tokenizers import pseudo_texts

    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    original, yarn = hf
    text = tmp_path / "heldout.txt"
    text.write_text(" ".join(pseudo_texts()[:4]))
    settings = Settings(seq_len=64, sink_samples=2, long_samples=1, queries=8, retrieval=False)
    logs: list[str] = []

    def run(model_dir):
        return analyze_target(model_dir, settings, texts=[text], log=lambda *a: logs.append(" ".join(map(str, a))))

    first = run(original)
    run(original)
    assert sum("cached result" in line for line in logs) == 1
    other = run(yarn)
    assert sum("cached result" in line for line in logs) == 1 and other["cache_key"] != first["cache_key"]
    assert other["metrics"] != first["metrics"]


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "tokenizer_config.json"])
def test_the_model_hash_covers_config_generation_settings_and_tokenizer_files(hf, tmp_path, name):
    from archpool.eval.hfdir import model_sha256
    from archpool.pool.checkpoints import ModelRef, content_key

    original, _ = hf
    copy = shutil.copytree(original, tmp_path / "copy")
    assert model_sha256(copy) == model_sha256(original)
    assert content_key(ModelRef(text="copy", path=str(copy))) == content_key(ModelRef(text="o", path=str(original)))
    data = json.loads((copy / name).read_text())
    data["archpool_test_field"] = 1  # one more key: a changed file
    (copy / name).write_text(json.dumps(data))
    assert model_sha256(copy) != model_sha256(original)
    assert content_key(ModelRef(text="copy", path=str(copy))) != content_key(ModelRef(text="o", path=str(original)))
