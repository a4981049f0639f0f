"""The pool is parsed once into typed sections; plan nodes carry them, plan.json parses straight back
into them, and node keys hash their ``to_dict()``."""

from __future__ import annotations

import json

import pytest

from archpool.attention.settings import Settings as AttentionSettings
from archpool.data.section import DataSection
from archpool.errors import StateError
from archpool.model.config import ModelConfig
from archpool.pool.graph import assign_keys
from archpool.pool.plan import build_plan, read_plan, write_plan
from archpool.pool.sections import EvalSettings, PoolRecipe, ReportSettings
from archpool.pool.spec import load_pool
from archpool.rundir import pool_plan_path
from archpool.train.config import ExtensionConfig, TrainConfig

TYPES = {
    "model": ModelConfig,
    "train": TrainConfig,
    "recipe": ExtensionConfig,
    "eval": EvalSettings,
    "attention": AttentionSettings,
    "data": DataSection,
}


@pytest.mark.parametrize("name", ["demo", "study", "geometry", "smoke"])
def test_plan_json_parses_back_into_the_typed_sections(tmp_path, name):
    pool = load_pool(name)
    assert isinstance(pool.data, DataSection) and isinstance(pool.eval, EvalSettings)
    assert isinstance(pool.attention, AttentionSettings) and isinstance(pool.report, ReportSettings)
    assert all(isinstance(r, PoolRecipe) and isinstance(r.config, ExtensionConfig) for r in pool.extension)
    nodes = build_plan(pool)
    write_plan(tmp_path, pool, nodes)
    back, read = read_plan(tmp_path)
    assert back.to_dict() == pool.to_dict()
    assert [n.to_dict() for n in read] == [n.to_dict() for n in nodes]
    typed = 0
    for n in read:
        for key, value in vars(n.config).items():
            if key in TYPES:
                assert isinstance(value, TYPES[key]), (n.id, key)
                typed += 1
    assert typed >= len(nodes)  # every node carries at least one typed section
    keys = [n.key for n in read]
    assign_keys(read)  # the keys hash the sections' to_dict(): re-deriving them from the parsed plan agrees
    assert [n.key for n in read] == keys


def test_a_pretrain_node_holds_the_runs_own_train_config():
    pool = load_pool("demo")
    by_id = {n.id: n for n in build_plan(pool)}
    for run in pool.runs:
        train = by_id[f"pretrain:{run.name}"].config.train
        assert (train.seq_len, train.seed, train.progress) == (run.pretrain_ctx, run.seed, False)
        assert train == pool.pretrain_config(run.pretrain_ctx, run.seed)
    ext = next(n for n in by_id.values() if n.stage == "extend").config.recipe
    assert ext.length == pool.extension[0].length(pool.long_ctx) and ext.source == "final"


def test_node_keys_hash_the_parsed_sections():
    """Writing a default out changes no key; changing a value changes them."""
    raw = _yaml("smoke")
    pool = load_pool(raw)
    keys = [n.key for n in build_plan(pool)]
    same = load_pool({**raw, "eval": {**(raw.get("eval") or {}), "seed": pool.eval.seed}})
    assert [n.key for n in build_plan(same)] == keys
    changed = load_pool({**raw, "eval": {**(raw.get("eval") or {}), "seed": pool.eval.seed + 1}})
    assert [n.key for n in build_plan(changed)] != keys


def test_a_plan_of_another_schema_is_a_named_error(tmp_path):
    pool = load_pool("smoke")
    write_plan(tmp_path, pool, build_plan(pool))
    path = pool_plan_path(tmp_path)
    data = json.loads(path.read_text())
    data.pop("schema")
    path.write_text(json.dumps(data))
    with pytest.raises(StateError, match=r"plan schema 'None', not 3 .*re-run `archpool run`"):
        read_plan(tmp_path)


def _yaml(name: str) -> dict:
    from archpool.io import read_config_file
    from archpool.pool.spec import resolve_pool_path

    return read_config_file(resolve_pool_path(name))


def test_plan_json_holds_each_setting_once(tmp_path):
    """Nodes refer to the pool (run, recipe, milestone, rung, phase) and carry no config; recipes are
    recorded resolved, once."""
    pool = load_pool("demo")
    write_plan(tmp_path, pool, build_plan(pool))
    data = json.loads(pool_plan_path(tmp_path).read_text())
    assert all("config" not in n for n in data["nodes"])
    assert '"window"' not in json.dumps(data["nodes"]) and '"theta"' not in json.dumps(data["nodes"])
    assert json.dumps(data).count('"window"') == len(pool.runs)  # each run's model, once
    recipes = data["pool"]["extension"]
    assert [r["length"] for r in recipes] == [r.length(pool.long_ctx) for r in pool.extension]
    rung = next(n for n in data["nodes"] if "#ext" in n["id"])
    assert {"run", "recipe", "milestone", "rung", "phase"} <= set(rung)


def test_a_plan_whose_nodes_no_longer_match_the_pool_is_refused(tmp_path):
    pool = load_pool("smoke")
    write_plan(tmp_path, pool, build_plan(pool))
    path = pool_plan_path(tmp_path)
    data = json.loads(path.read_text())
    data["nodes"][-1]["key"] = "0" * 20
    path.write_text(json.dumps(data))
    with pytest.raises(StateError, match=r"nodes differ from what this archpool plans"):
        read_plan(tmp_path)
