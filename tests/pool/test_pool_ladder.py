"""Extension ladders and per-architecture recipes in a pool: one eval node per rung, columns that
carry the rung, their mean over the ladder, and a remedy recipe limited to one architecture."""

from __future__ import annotations

import csv

import pytest

from archpool.errors import ConfigError
from archpool.pool.plan import build_plan, result_columns
from archpool.pool.spec import load_pool
from tests.helpers.pool import run_cli, toy_pool

LADDER = [
    dict(name="ntk", steps=2, budgets=[0, 1, 3]),
    dict(name="remedy", steps=2, budgets=[0, 3], archs=["lqk_full"]),
]


def test_plan_has_one_eval_node_per_rung_and_limits_the_remedy(tmp_path):
    pool = load_pool(toy_pool(tmp_path, milestones=[], extension=LADDER))
    nodes = build_plan(pool)
    ids = {n.id for n in nodes}
    assert {"eval:lqk_full_s0:ntk#ext0", "eval:lqk_full_s0:ntk#ext1", "eval:lqk_full_s0:ntk#ext3"} <= ids
    assert {"eval:lqk_full_s0:remedy#ext0", "eval:lqk_full_s0:remedy#ext3", "extend:lqk_full_s0:remedy"} <= ids
    assert not any(i.startswith(("extend:noqk_full_s0:remedy", "eval:noqk_full_s0:remedy")) for i in ids)
    rung = next(n for n in nodes if n.id == "eval:lqk_full_s0:ntk#ext1")
    assert rung.rung == rung.config.rung == 1 and rung.deps["model"] == "extend:lqk_full_s0:ntk"
    assert result_columns(rung, "ntk") == ("", "#ext1")
    assert result_columns(next(n for n in nodes if n.id == "eval:lqk_full_s0:remedy#ext3"), "ntk") == ("remedy_", "#ext3")
    # every rung reads the same extension run: the rungs share one extend node
    assert len([n for n in nodes if n.id.startswith("extend:lqk_full_s0:")]) == 2


def test_results_carry_every_rung_the_ladder_mean_and_its_area(tmp_path):
    out = tmp_path / "out"
    spec = toy_pool(tmp_path, milestones=[], extension=LADDER, report={"target": "long_score#ladder_mean"})
    r = run_cli("run", str(spec), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "results.csv") as f:
        rows = {row["run"]: row for row in csv.DictReader(f)}
    row = rows["lqk_full_s0"]
    rungs = [float(row[f"long_score#ext{b}"]) for b in (0, 1, 3)]
    assert rungs[1] == pytest.approx(rungs[0] + 0.1) and rungs[2] == pytest.approx(rungs[0] + 0.3)  # the toy adds 0.1/step
    assert float(row["long_score#ladder_mean"]) == pytest.approx(sum(rungs) / 3, abs=1e-6)
    remedy = [float(row[f"remedy_long_score#ext{b}"]) for b in (0, 3)]
    assert float(row["remedy_long_score#ladder_mean"]) == pytest.approx(sum(remedy) / 2, abs=1e-6)
    assert rows["noqk_full_s0"]["remedy_long_score#ladder_mean"] == ""  # the remedy extends only lqk_full
    # the area under the curve over extension steps: trapezoids over budgets 0, 1, 3, divided by 3
    auc = ((rungs[0] + rungs[1]) / 2 * 1 + (rungs[1] + rungs[2]) / 2 * 2) / 3
    assert float(row["long_score#ladder_auc"]) == pytest.approx(auc, abs=1e-6)
    assert float(row["remedy_long_score#ladder_auc"]) == pytest.approx(sum(remedy) / 2, abs=1e-6)
    assert "long_score" not in row  # a ladder's columns all carry their rung


def test_recipe_archs_are_validated(tmp_path):
    with pytest.raises(ConfigError, match=r"extension\[1\].archs"):
        load_pool(toy_pool(tmp_path, extension=[dict(name="ntk"), dict(name="remedy", archs=["nope"])]))
    with pytest.raises(ConfigError, match=r"extension\[0\].archs"):
        load_pool(toy_pool(tmp_path, extension=[dict(name="ntk", archs=["lqk_full"])]))


def test_ladder_auc_weighs_every_extension_step_the_same():
    from archpool.pool.results import ladder_auc

    rungs = [(0, {"a": 0.0, "b": 1.0}), (10, {"a": 1.0, "b": 1.0}), (150, {"a": 1.0})]
    # a: 0 → 1 over the first 10 of 150 steps, then 1: (10 · 0.5 + 140 · 1) / 150
    assert ladder_auc(rungs) == {"a": pytest.approx((10 * 0.5 + 140) / 150)}  # b lacks the last rung
    assert ladder_auc(list(reversed(rungs)))["a"] == pytest.approx((10 * 0.5 + 140) / 150)  # order of the nodes
    assert ladder_auc([(0, {"a": 1.0}), (5, None)]) == {} and ladder_auc([(3, {"a": 1.0})]) == {}
