"""The headroom rule on constructed results, the calibration's choice, and the compounding statistic
against a hand computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from archpool.analysis import headroom
from archpool.analysis.compound import compounding
from archpool.analysis.table import validate
from tests.helpers.answers import ARMS

TARGET = "mqar_rebind_acc@1024[d>128]#ext12"
DESIGN = {
    **ARMS,
    "swa": dict(swa=1, qk_norm="none", norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=128),
    "gqa_swa": dict(swa=1, qk_norm="none", norm="pre", n_kv_heads=1, n_heads=4, pretrain_ctx=128),
}


def _table(values: dict[str, list[float]], own: float = 0.97, low_bucket: float = 0.95) -> pd.DataFrame:
    """A results table: per arm one run per seed with the target and its mastery columns at 128."""
    rows = []
    for arm, per_seed in values.items():
        for s, v in enumerate(per_seed):
            rows.append(
                {
                    "run": f"{arm}_s{s}",
                    "arch": arm,
                    "seed": s,
                    **DESIGN[arm],
                    "short_ctx": 64,
                    TARGET: v,
                    "base_mqar_rebind_acc@128": own,
                    "base_mqar_rebind_acc@128[d<=64]": own,
                    "base_mqar_rebind_acc@128[64<d<=128]": low_bucket,
                }
            )
    return validate(pd.DataFrame(rows).astype(str))


def test_the_rule_accepts_a_baseline_in_the_window_on_a_task_every_arm_masters():
    h = headroom.check(_table({"base": [0.70, 0.72, 0.68], "gqa": [0.60, 0.61, 0.59]}), TARGET)
    assert h["ok"] and h["in_window"] and h["all_mastered"]
    assert h["baseline_mean"] == pytest.approx(0.70) and h["baseline_n"] == 3
    assert h["mastery_metric"] == "mqar_rebind_acc"


@pytest.mark.parametrize(
    ("base", "low_bucket", "says"),
    [
        ([0.99, 1.0, 0.98], 0.95, "too near the ceiling"),
        ([0.20, 0.25, 0.30], 0.95, "too near chance"),
        ([0.70, 0.72, 0.68], 0.80, "did not master the task at their own length"),
    ],
)
def test_the_rule_refuses_the_ceiling_chance_and_an_unlearned_task(base, low_bucket, says):
    h = headroom.check(_table({"base": base, "gqa": [0.6, 0.6, 0.6]}, low_bucket=low_bucket), TARGET)
    assert not h["ok"] and says in h["words"]


def test_the_calibration_picks_the_passing_point_closest_to_the_windows_centre():
    points = [
        {"value": 4, **headroom.rule([0.95, 0.96], {"a": True})},
        {"value": 8, **headroom.rule([0.85, 0.86], {"a": True})},
        {"value": 16, **headroom.rule([0.70, 0.72], {"a": True})},
        {"value": 24, **headroom.rule([0.64, 0.66], {"a": False})},  # nearer the centre, but an arm did not learn it
        {"value": 32, **headroom.rule([0.30, 0.31], {"a": True})},
    ]
    assert [p["ok"] for p in points] == [False, True, True, False, False]
    assert headroom.choose(points)["value"] == 16
    assert headroom.choose(points[:1]) is None


def test_compounding_is_the_pair_minus_its_parts_per_seed():
    values = {
        "base": [0.80, 0.82, 0.78],
        "gqa": [0.78, 0.79, 0.77],
        "swa": [0.77, 0.80, 0.75],
        "gqa_swa": [0.60, 0.66, 0.58],
    }
    (c,) = compounding(_table(values), TARGET, 64)
    assert c["features"] == ["gqa", "swa"]
    hand = [values["gqa_swa"][s] - values["gqa"][s] - values["swa"][s] + values["base"][s] for s in range(3)]
    assert list(c["interaction"]["per_seed"].values()) == pytest.approx(hand)
    assert c["interaction"]["mean"] == pytest.approx(np.mean(hand))
    t = sps.ttest_1samp(hand, 0)
    assert c["interaction"]["p"] == pytest.approx(t.pvalue)
    assert c["pair"]["mean"] == pytest.approx(np.mean(np.subtract(values["gqa_swa"], values["base"])))
    parts = np.subtract(values["gqa"], values["base"]) + np.subtract(values["swa"], values["base"])
    assert c["parts"]["mean"] == pytest.approx(parts.mean())
    assert c["verdict"] == "super-additive"  # −0.16 against −0.03 and −0.03: more than the sum


def test_compounding_leaves_out_seeds_of_runs_that_did_not_master():
    t = _table({"base": [0.8, 0.8, 0.8], "gqa": [0.7, 0.7, 0.7], "swa": [0.7, 0.7, 0.7], "gqa_swa": [0.6, 0.6, 0.5]})
    t.loc[t.run == "swa_s2", "base_mqar_rebind_acc@128[64<d<=128]"] = 0.5
    (c,) = compounding(t, TARGET, 64)
    assert c["dropped_seeds"] == [2] and set(c["interaction"]["per_seed"]) == {0, 1}
    assert c["interaction"]["mean"] == pytest.approx(0.0)


def test_the_window_is_a_rule_on_accuracies_only():
    from archpool.columns import is_accuracy

    assert is_accuracy("mqar_rebind_acc@1024[d>128]#ext12") and is_accuracy("mqar_chain_chain@512")
    assert not is_accuracy("mqar_rebind_lp@1024[d>128]#ext12") and not is_accuracy("val_ppl_short")
    table = pd.DataFrame(
        {
            "run": ["b_s0", "b_s1"],
            "qk_norm": ["none"] * 2,
            "norm": ["pre"] * 2,
            "n_kv_heads": [4] * 2,
            "n_heads": [4] * 2,
            "swa": [0] * 2,
            "pretrain_ctx": [128] * 2,
            "mqar_lp@1024": [-1.2, -1.3],
        }
    )
    assert headroom.check(table, "mqar_lp@1024") is None


@pytest.mark.parametrize("setting", [{"headroom": [0.3, 0.8]}, {"calibrate": {"knob": "pair_every", "values": [4, 8]}}])
def test_a_pool_refuses_the_rule_on_a_target_that_is_no_accuracy(setting):
    from archpool.errors import ConfigError
    from archpool.pool.sections import ReportSettings

    ReportSettings.from_dict({"target": "mqar_acc@512", **setting})  # an accuracy: fine
    with pytest.raises(ConfigError, match=rf"report\.{next(iter(setting))}: the headroom rule is a window on an accuracy"):
        ReportSettings.from_dict({"target": "mqar_lp@512", **setting})


def test_min_effect_has_one_bound_on_the_command_line_and_in_a_pool(capsys):
    from archpool.cli import main
    from archpool.errors import ConfigError
    from archpool.pool.sections import ReportSettings

    with pytest.raises(ConfigError, match=r"report\.min_effect: .*\(0, 10\]"):
        ReportSettings.from_dict({"min_effect": 1000})
    with pytest.raises(SystemExit) as e:
        main(["analyze", "results.csv", "--min-effect", "1000"])
    assert e.value.code == 2 and "(0, 10]" in capsys.readouterr().err
