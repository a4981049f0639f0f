"""Checkpoint pools extend the models they name (``extend:`` on a checkpoint run): the checkpoint is the model
before extension (``base_`` columns), each of the pool's recipes extends it (the RoPE change alone, or steps of
training on the run's text) and the extended model is measured (plain columns), as a trained run's. The plan,
its keys and its checks; (slow) a pool of a tiny Hugging Face Llama run end to end with both kinds."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import yaml

from archpool.errors import ConfigError
from archpool.pool.plan import build_plan
from archpool.pool.spec import load_pool
from tests.helpers.pool import run_cli

CTX = 64  # the model's context (max_position_embeddings)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random Llama written by transformers, with its tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from archpool.model.hf import export_tokenizer
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    tok = pseudo_bpe(pseudo_texts())
    path = tmp_path_factory.mktemp("ckext") / "llama"
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CTX, bos_token_id=tok.bos_id,
                      eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(path)
    export_tokenizer(tok, path, CTX)
    return path


def _pool(tmp_path, runs, **over):
    spec = {
        "name": "ckext",
        "long_ctx": CTX,
        "extension": [
            {"name": "ntk", "recipe": "ntk", "length_ratio": 2, "lr": 1e-3},
            {"name": "pi", "recipe": "pi", "length_ratio": 2},
        ],
        "eval": {"tasks": ["kv_recall"], "n_samples": 2, "length_ratios": [2], "base_length_ratios": [1]},
        "attention": {"enabled": False},
        "runs": runs,
        **over,
    }
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_plan_extends_the_checkpoint_with_each_recipe(model, tmp_path):
    pool = load_pool(
        _pool(tmp_path, [{"name": "m", "checkpoint": str(model), "pretrain_ctx": CTX, "extend": True}], attention={})
    )
    nodes = {n.id: n for n in build_plan(pool)}
    assert sorted(nodes) == [
        "attention:m:base", "attention:m:ntk", "eval:m:base", "eval:m:ntk", "eval:m:pi", "extend:m:ntk", "extend:m:pi",
    ]  # fmt: skip
    assert nodes["eval:m:ntk"].deps == {"model": "extend:m:ntk"} and nodes["eval:m:base"].phase == "base"
    ext = nodes["extend:m:ntk"].config
    assert (ext.steps, ext.pretrain_ctx, ext.recipe.target_length(CTX), ext.data) == (0, CTX, 2 * CTX, None)
    assert pool.run("m").pretrain_ctx_from == "pretrain_ctx"
    again = {
        n.id: n.key
        for n in build_plan(load_pool(_pool(tmp_path, [{"name": "m", "checkpoint": str(model), "extend": True}], attention={})))
    }
    assert again == {i: n.key for i, n in nodes.items()}  # the context read from the config is the one given
    only = load_pool(_pool(tmp_path, [{"name": "m", "checkpoint": str(model), "extend": {"recipes": ["pi"]}}]))
    assert sorted(n.id for n in build_plan(only)) == ["eval:m:base", "eval:m:pi", "extend:m:pi"]


def test_training_data_is_keyed_by_its_content(model, tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("some text " * 50)
    run = {"name": "m", "checkpoint": str(model), "extend": {"recipes": ["ntk"], "steps": 2, "text": ["train.txt"]}}
    first = {n.id: n.key for n in build_plan(load_pool(_pool(tmp_path, [run])))}
    text.write_text("other text " * 50)
    second = {n.id: n.key for n in build_plan(load_pool(_pool(tmp_path, [run])))}
    assert first["eval:m:base"] == second["eval:m:base"] and first["extend:m:ntk"] != second["extend:m:ntk"]
    assert first["eval:m:ntk"] != second["eval:m:ntk"]


@pytest.mark.parametrize(
    "extend, field",
    [
        ({"recipes": ["yarn"]}, "runs[m].extend.recipes"),
        ({"steps": 2}, "runs[m].extend.data"),
        ({"text": ["train.txt"]}, "runs[m].extend.steps"),
        ({"steps": -1}, "runs[m].extend.steps"),
        ({"recipes": ["pi"], "steps": 2, "text": ["train.txt"]}, "extension[pi].lr"),
        ({"colour": 1}, "runs[m].extend.colour"),
    ],
)
def test_extension_settings_are_checked_before_any_work(model, tmp_path, extend, field):
    (tmp_path / "train.txt").write_text("text " * 50)
    with pytest.raises(ConfigError) as e:
        build_plan(load_pool(_pool(tmp_path, [{"name": "m", "checkpoint": str(model), "extend": extend}])))
    assert e.value.field == field


def test_a_twin_and_an_extension_are_refused_together(model, tmp_path):
    with pytest.raises(ConfigError) as e:
        load_pool(_pool(tmp_path, [{"name": "m", "checkpoint": str(model), "pretrained": str(model), "extend": True}]))
    assert e.value.field == "runs[m].extend"


@pytest.mark.slow
def test_a_checkpoint_pool_extends_and_measures_before_and_after(model, tmp_path):
    from tests.helpers.tokenizers import pseudo_texts

    (tmp_path / "train.txt").write_text("\n\n".join(pseudo_texts()[:12]))
    runs = [
        {"name": "zero", "checkpoint": str(model), "extend": {"recipes": ["ntk"]}},
        {"name": "trained", "checkpoint": str(model), "extend": {"recipes": ["ntk"], "steps": 2, "text": ["train.txt"]}},
    ]
    out = tmp_path / "out"
    r = run_cli(
        "run",
        str(_pool(tmp_path, runs)),
        "--out",
        str(out),
        "--no-progress",
        env={"ARCHPOOL_CACHE": str(tmp_path / "cache")},
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").read_text().splitlines())}
    assert all(row["state"] == "done" for row in rows.values())
    for name in ("zero", "trained"):
        row = rows[name]
        assert row[f"base_kv_recall_lp@{CTX}"] and row[f"kv_recall_lp@{2 * CTX}"], row  # before and after
        assert row["pretrain_ctx"] == str(CTX)
    assert rows["trained"]["extension_loss"] and not rows["zero"].get("extension_loss")
    made = {}  # run -> the directory its extension wrote
    for node in (out / "stages" / "extend").glob("*/node.json"):
        made[json.loads(node.read_text())["run"]] = node.parent / "model"
    zero = json.loads((made["zero"] / "config.json").read_text())
    assert zero["rope_parameters"]["rope_theta"] == 160_000.0 and zero["max_position_embeddings"] == 2 * CTX
    assert json.loads((made["trained"] / "extension.json").read_text())["steps"] == 2
