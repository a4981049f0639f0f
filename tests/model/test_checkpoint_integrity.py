"""Checkpoints are verified by their bytes before use, and caches are keyed by the verified hash.

The regression: a milestone copy with flipped bytes in model.safetensors was evaluated silently, and the
eval cache (keyed by the sha256 *written in* the manifest) then served its result for the intact copy.
"""

import json
import random
import shutil

import pytest
import torch

from archpool.cli import main
from archpool.errors import CheckpointError, ConfigError
from archpool.io import sha256_file, sha256_json
from archpool.model import Decoder, ModelConfig
from archpool.model.checkpoint import load_checkpoint, save_checkpoint, save_state_dict, verify_checkpoint
from archpool.train import checkpoint as ckpt


@pytest.fixture(scope="module")
def tok():
    from archpool.tasks.haystack import NOISE, pseudo_sentences
    from archpool.tokenizer import train_tokenizer

    return train_tokenizer([" ".join(pseudo_sentences(random.Random(i), 40)) for i in range(12)] + [" ".join(NOISE)] * 3, 300)


def tiny(vocab: int = 64, **kw) -> Decoder:
    return Decoder(ModelConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64, **kw), seed=1)


def milestone(path, model: Decoder):
    """A checkpoint as training writes it (config, weights, MANIFEST.json)."""
    return ckpt.write_checkpoint(path, model.state_dict(), model.cfg, train_state=None)


def flip_bytes(path, n: int = 400) -> None:
    """Flip bytes inside the tensor data: same size, a readable safetensors header, different weights."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 10 - 7 * n, len(data) - 10, 7):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def eval_gold_logprob(target, out, cache) -> float:
    args = [
        str(target),
        "--suite",
        "tiny",
        "--n",
        "2",
        "--lengths",
        "64",
        "--mode",
        "ll",
        "--out",
        str(out),
        "--cache",
        str(cache),
        "--no-progress",
    ]
    assert main(["eval", *args]) == 0
    return json.loads((out / "tasks" / "kv_recall" / "64_ll.json").read_text())


def test_eval_refuses_corrupt_copy_and_intact_copy_gets_its_true_value(tok, tmp_path, capsys):
    model = tiny(tok.vocab_size)
    for name in ("corrupt", "intact"):
        milestone(tmp_path / name, model)
        tok.save(tmp_path / name)
    flip_bytes(tmp_path / "corrupt" / "model.safetensors")
    cache = tmp_path / "cache"
    assert (
        main(
            [
                "eval",
                str(tmp_path / "corrupt"),
                "--suite",
                "tiny",
                "--n",
                "2",
                "--lengths",
                "64",
                "--mode",
                "ll",
                "--out",
                str(tmp_path / "out_c"),
                "--cache",
                str(cache),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"{tmp_path / 'corrupt' / 'model.safetensors'}: corrupt (sha256 does not match the manifest)" in err
    assert not (tmp_path / "out_c").exists()
    intact = eval_gold_logprob(tmp_path / "intact", tmp_path / "out_i", cache)
    assert not intact.get("cached")  # nothing from the corrupt copy was cached
    assert intact["model_hash"] == sha256_json(
        {n: sha256_file(tmp_path / "intact" / n) for n in ("config.json", "model.safetensors", "tokenizer.json")}
    )
    fresh = eval_gold_logprob(tmp_path / "intact", tmp_path / "out_f", tmp_path / "fresh_cache")
    assert intact["gold_logprob_mean"] == fresh["gold_logprob_mean"]  # its true value


def test_cache_key_is_the_bytes_not_the_manifests_word(tok, tmp_path):
    """A manifest rewritten to match corrupt bytes still cannot reuse the intact model's cache entries."""
    model = tiny(tok.vocab_size)
    for name in ("a", "b"):
        milestone(tmp_path / name, model)
        tok.save(tmp_path / name)
    first = eval_gold_logprob(tmp_path / "a", tmp_path / "out_a", tmp_path / "cache")
    flip_bytes(tmp_path / "b" / "model.safetensors")
    manifest = json.loads((tmp_path / "b" / "MANIFEST.json").read_text())
    manifest["files"]["model.safetensors"]["sha256"] = sha256_file(tmp_path / "b" / "model.safetensors")
    (tmp_path / "b" / "MANIFEST.json").write_text(json.dumps(manifest))
    second = eval_gold_logprob(tmp_path / "b", tmp_path / "out_b", tmp_path / "cache")
    assert second["model_hash"] != first["model_hash"] and not second.get("cached")


def test_plain_checkpoint_without_manifest_is_keyed_by_its_files_sha256(tok, tmp_path):
    save_checkpoint(tiny(tok.vocab_size), tmp_path / "plain")
    tok.save(tmp_path / "plain")
    res = eval_gold_logprob(tmp_path / "plain", tmp_path / "out", tmp_path / "cache")
    hashes = verify_checkpoint(tmp_path / "plain")
    assert hashes["model.safetensors"] == sha256_file(tmp_path / "plain" / "model.safetensors")
    assert res["model_hash"] == sha256_json({**hashes, "tokenizer.json": sha256_file(tmp_path / "plain" / "tokenizer.json")})


def test_load_checkpoint_verifies_size_and_hash(tmp_path):
    model = tiny()
    milestone(tmp_path / "ok", model)
    assert set(verify_checkpoint(tmp_path / "ok")) == {"config.json", "model.safetensors"}
    shutil.copytree(tmp_path / "ok", tmp_path / "flipped")
    flip_bytes(tmp_path / "flipped" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"flipped/model.safetensors: corrupt \(sha256"):
        load_checkpoint(tmp_path / "flipped")
    shutil.copytree(tmp_path / "ok", tmp_path / "short")
    w = tmp_path / "short" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"short/model.safetensors: truncated or altered"):
        load_checkpoint(tmp_path / "short")
    shutil.copytree(tmp_path / "ok", tmp_path / "badmanifest")
    (tmp_path / "badmanifest" / "MANIFEST.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"badmanifest/MANIFEST.json: unreadable manifest"):
        load_checkpoint(tmp_path / "badmanifest")
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        assert torch.equal(load_checkpoint(tmp_path / "ok").eval()(ids), model.eval()(ids))


def test_wrong_tensor_shape_and_invalid_config_are_named(tmp_path):
    small, big = tiny(), tiny(d_ff=200)
    save_state_dict(small.state_dict(), big.cfg, tmp_path / "shape")  # config says d_ff=200, weights have another width
    with pytest.raises(
        CheckpointError,
        match=r"shape/model.safetensors: tensor 'layers.0.mlp.down_proj.weight' has shape \(32, 96\), the config needs \(32, 200\)",
    ):
        load_checkpoint(tmp_path / "shape")
    save_checkpoint(small, tmp_path / "cfg")
    data = json.loads((tmp_path / "cfg" / "config.json").read_text())
    data["model"]["n_kv_heads"] = 3
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"cfg/config.json: invalid model config: n_kv_heads"):
        load_checkpoint(tmp_path / "cfg")


def test_attention_and_export_refuse_a_corrupt_checkpoint(tmp_path, capsys):
    from archpool.attention.stage import weights_digest

    milestone(tmp_path / "ok", tiny())
    shutil.copytree(tmp_path / "ok", tmp_path / "bad")
    flip_bytes(tmp_path / "bad" / "model.safetensors")
    assert weights_digest(tmp_path / "ok") == weights_digest(tmp_path / "ok")
    with pytest.raises(CheckpointError, match="bad/model.safetensors: corrupt"):
        weights_digest(tmp_path / "bad")
    assert main(["attention", str(tmp_path / "bad"), "--text", str(tmp_path / "x.txt"), "--no-cache"]) == 2
    assert "bad/model.safetensors: corrupt" in capsys.readouterr().err
    assert main(["export-hf", str(tmp_path / "bad"), str(tmp_path / "hf"), "--no-tokenizer"]) == 2
    assert "bad/model.safetensors: corrupt" in capsys.readouterr().err
    assert not (tmp_path / "hf" / "model.safetensors").exists()


def test_eval_refuses_a_tokenizer_larger_than_the_vocabulary(tok, tmp_path, capsys):
    save_checkpoint(tiny(64), tmp_path / "small")
    tok.save(tmp_path / "small")
    assert (
        main(
            [
                "eval",
                str(tmp_path / "small"),
                "--suite",
                "tiny",
                "--n",
                "1",
                "--lengths",
                "64",
                "--no-progress",
                "--cache",
                str(tmp_path / "cache"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archpool eval: error: tokenizer: {tmp_path / 'small'}: the tokenizer has {tok.vocab_size} tokens but the "
        "model's vocabulary is 64; pass the tokenizer the model was trained with (--tokenizer)"
    )


def test_eval_rejects_non_positive_numbers(capsys):
    for args in (["--lengths", "0"], ["--lengths", "128", "-4"], ["--n", "0"], ["--longppl-k", "-1"]):
        with pytest.raises(SystemExit) as e:
            main(["eval", "target", *args])
        assert e.value.code == 2
        assert "must be a positive integer (>= 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["features", "olmo3", "--short-ctx", "-1"])
    assert "argument --short-ctx: must be a positive integer (>= 1), got -1" in capsys.readouterr().err
    for args in (["--lengths", "0"], ["--seq-len", "-2"], ["--mask-k", "-1"]):
        with pytest.raises(SystemExit):
            main(["attention", "target", *args])
        assert "must be a" in capsys.readouterr().err


def test_evaluate_api_rejects_non_positive_lengths():
    from archpool.eval.api import check_counts

    check_counts([64, 128], 2)
    with pytest.raises(ConfigError, match="lengths: must be positive integers, got 0"):
        check_counts([0, 64], 2)
    with pytest.raises(ConfigError, match="n_samples"):
        check_counts([64], -1)
