"""The Olmo 3 layer-order summary reads a pool directory's plan and results table, per arm and seed."""

import json
from pathlib import Path

import pandas as pd
import pytest

BENCH_SCRIPT = "studies.bench_olmo3_order_steps"


def test_summary_means_each_arms_seeds(bench, tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"pool": {"train": {"max_steps": 680}}, "nodes": []}))
    rows = [
        {"arch": arch, "seed": seed, **{c: value + seed / 10 for c in bench.COLUMNS.values()}}
        for arch, value in (("base", 0.5), ("swa_olmo3", 0.1))
        for seed in (0, 1)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    out = bench.summarise(tmp_path)
    assert list(out) == ["base", "swa_olmo3"] and out["base"]["steps"] == 680 and out["base"]["seeds"] == [0, 1]
    assert out["swa_olmo3"]["mastery_beyond_window"] == {"mean": pytest.approx(0.15), "per_seed": [0.1, 0.2]}


@pytest.mark.parametrize("name", ["olmo3_order_680", "olmo3_order_1360", "olmo3_order_8layers"])
def test_the_olmo3_order_pools_load_with_a_baseline_and_the_arm(name):
    from archpool.pool.spec import load_pool

    pool = load_pool(Path(__file__).resolve().parents[2] / "bench" / "pools" / f"{name}.yaml")
    assert {r.arch for r in pool.runs} == {"base", "swa_olmo3"}
    swa = next(r.model for r in pool.runs if r.arch == "swa_olmo3")
    assert swa.layer_types[-1] == "full_attention" and swa.layer_types[0] == "sliding_attention"
