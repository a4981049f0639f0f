"""The pretraining context as an input where a config cannot tell it: a model extended after pretraining by a
theta raise (SmolLM2-135M: trained at 2K, extended to 8K) states only its extended ``max_position_embeddings``.
``features`` says which field its context came from and notes an inferred one; ``--pretrain-ctx`` (and a
checkpoint run's ``pretrain_ctx:``) gives the real one, which sets the short-context flag."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from archpool.cli import main
from archpool.model.features import features

# SmolLM2-135M's config.json (its architecture fields; no RoPE scaling: the 8K context is a raised theta)
SMOLLM2 = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rope_theta": 100000,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}


@pytest.fixture()
def smollm2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMOLLM2))
    return path


def test_a_context_read_from_max_position_embeddings_is_named_and_noted(smollm2):
    f = features(str(smollm2))
    assert (f["pretrain_ctx"], f["pretrain_ctx_from"], f["short_ctx"]) == (8192, "max_position_embeddings", False)
    assert any("inferred from max_position_embeddings" in n and "--pretrain-ctx" in n for n in f["notes"])


def test_the_given_context_sets_the_short_context_flag(smollm2):
    f = features(str(smollm2), pretrain_ctx=2048)
    assert (f["pretrain_ctx"], f["pretrain_ctx_from"], f["short_ctx"]) == (2048, "given", True)
    assert f["count"] == features(str(smollm2))["count"] + 1
    assert not any("inferred" in n for n in f["notes"])


def test_a_rope_scalings_original_context_is_no_inference(smollm2):
    scaled = {**SMOLLM2, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}
    smollm2.write_text(json.dumps(scaled))
    f = features(str(smollm2))
    assert (f["pretrain_ctx"], f["pretrain_ctx_from"]) == (2048, "rope_parameters.original_max_position_embeddings")
    assert not any("inferred" in n for n in f["notes"])


def test_cli_flag_and_output(smollm2, capsys):
    assert main(["features", str(smollm2), "--pretrain-ctx", "2048"]) == 0
    out = capsys.readouterr().out
    assert "2048 <= 4096" in out and "pretraining context from given" in out
    assert main(["features", str(smollm2), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pretrain_ctx_from"] == "max_position_embeddings"


def test_a_checkpoint_run_takes_the_context_from_the_pool_and_warns_when_inferred(tmp_path):
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    from archpool.pool.spec import load_pool

    model = tmp_path / "m"
    model.mkdir()
    LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=64, max_position_embeddings=512).save_pretrained(model)  # fmt: skip
    save_file({}, str(model / "model.safetensors"))

    def pool(**entry):
        path = tmp_path / "pool.yaml"
        path.write_text(yaml.safe_dump({"name": "p", "long_ctx": 128, "runs": [{"name": "m", "checkpoint": "m", **entry}]}))
        return load_pool(path).run("m")

    with pytest.warns(UserWarning, match=r"runs\[m\]\.checkpoint: pretraining context 512 inferred from max_position_embeddings"):
        inferred = pool()
    assert (inferred.pretrain_ctx, inferred.pretrain_ctx_from) == (512, "max_position_embeddings")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a given context: no warning
        given = pool(pretrain_ctx=128)
    assert (given.pretrain_ctx, given.pretrain_ctx_from, given.row()["pretrain_ctx"]) == (128, "pretrain_ctx", 128)
    from archpool.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        pool(pretrain_ctx=128, design={"pretrain_ctx": 256})
    assert e.value.field == "runs[m].pretrain_ctx"
