"""The report's parts: metric names in words, per-architecture means, column families, the verdict rules,
table precision and the pool context (compute time, loss curves, chance)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from archpool.analysis import archs
from archpool.analysis.extension import summarise
from archpool.analysis.verdict import axis_verdicts, target_multiple
from archpool.report import verdict as vd
from archpool.report.tables import cell_text
from tests.helpers.pool import PlainConfig

TARGET = "mqar_acc@1024[d>128]#ladder_mean"


def test_describe_metric_in_words():
    words = vd.describe_metric(TARGET, 128)
    assert words == (
        "MQAR retrieval accuracy at 1,024 tokens (8× the pretraining context) for key–query distances > 128 "
        "averaged over the extension budgets"
    )
    assert vd.describe_metric("mqar_acc@512#ext5") == "MQAR retrieval accuracy at 512 tokens after 5 extension steps"
    assert target_multiple(TARGET, 128) == 8 and target_multiple(TARGET, 96) is None


def test_per_arch_mean_matches_scipy_t_interval():
    df = pd.DataFrame({"run": [f"a_s{i}" for i in range(4)] + ["b_s0"], "x": [0.1, 0.4, 0.2, 0.5, 0.9]})
    got = archs.per_arch(df, "x")
    lo, hi = sps.t.interval(0.95, 3, loc=np.mean([0.1, 0.4, 0.2, 0.5]), scale=sps.sem([0.1, 0.4, 0.2, 0.5]))
    assert list(got) == ["a", "b"]
    assert got["a"].lo == pytest.approx(lo) and got["a"].hi == pytest.approx(hi) and got["a"].n == 4
    assert got["b"] == archs.Mean(0.9, 0.9, 0.9, 1)


def test_column_families_of_a_target():
    cols = [
        "run",
        "mqar_acc@512[d>128]#ladder_mean",
        "mqar_acc@2048[d>128]#ladder_mean",
        TARGET,
        "mqar_acc@1024[d>128]#ext5",
        "mqar_acc@1024[d>128]#ext0",
        "mqar_acc@1024[64<d<=128]#ladder_mean",
        "mqar_acc@1024[d<=64]#ladder_mean",
        "mqar_acc@1024[128<d<=512]#ladder_mean",
        "mqar_acc@1024[d>512]#ladder_mean",
        "mqar_acc@1024[d>64]#ladder_mean",
        "base_mqar_acc@128[d>128]",
        "remedy_mqar_acc@1024[d>128]#ladder_mean",
    ]
    df = pd.DataFrame(columns=cols)
    assert list(archs.length_columns(df, TARGET)) == [512, 1024, 2048]
    assert archs.base_length_columns(df, TARGET) == {128: "base_mqar_acc@128[d>128]"}
    assert list(archs.distance_columns(df, TARGET)) == ["d<=64", "64<d<=128", "128<d<=512", "d>512"]
    assert archs.rung_columns(df, TARGET) == {0: "mqar_acc@1024[d>128]#ext0", 5: "mqar_acc@1024[d>128]#ext5"}


def _analysis(pre, post):
    """An analysis result with one QK-norm axis: ``pre``/``post`` are per-seed differences."""
    did = [a - b for a, b in zip(post, pre)]
    effect = {"rung": "ext50", "length": 1024, "column": TARGET, "is_target": True}
    effect |= {"post": summarise(dict(enumerate(post))), "did": summarise(dict(enumerate(did))), "did_from": "mastery_acc"}
    axis = {"axis": "qk_norm", "feature": "qk_norm", "from": "none", "to": "layerwise", "pre": summarise(dict(enumerate(pre)))}
    axis |= {"effects": [effect], "dropped_seeds": []}
    return {
        "target": TARGET,
        "spread": {"seed_sd": 0.02},
        "runs": [{"run": "a", "pretrain_ctx": 128}],
        "extension_effects": {"axes": [axis]},
        "remedy": [],
    }


QUIET = [0.0, 0.01, -0.01, 0.0]
STRONG = [-0.05, -0.06, -0.04, -0.05]


@pytest.mark.parametrize(
    ("pre", "post", "claim", "present", "says"),
    [
        (QUIET, STRONG, "effect", False, "only extension reveals"),
        (STRONG, [-0.06, -0.07, -0.05, -0.06], "effect", True, "pretraining effect"),
        (QUIET, [-0.01, 0.03, -0.05, 0.0], "unresolved", False, "Not resolved: after correcting for 1 axes"),
        (QUIET, [0.05, 0.06, 0.04, 0.05], "effect", False, "against the paper's 7B direction"),
        (QUIET, [-0.004, -0.005, -0.003, -0.004], "below interest", False, "smaller than the smallest effect of interest"),
        (QUIET, [0.001, -0.001, 0.0005, -0.0005], "equivalent", False, "No effect larger than ±0.01: the equivalence test"),
        ([0.05, -0.06, 0.04, -0.03], STRONG, "effect", False, "whether extension is what reveals it is not resolved"),
    ],
)
def test_verdict_rules(pre, post, claim, present, says):
    (v,) = axis_verdicts(_analysis(pre, post), None)
    assert v.claim == claim and v.before_present is present
    assert says in v.meaning
    assert v.paper_points == -6.0 and v.paper_multiple == 8  # the paper's layerwise QK-norm at 8×
    assert v.p == pytest.approx(sps.ttest_1samp(post, 0).pvalue) and v.p_holm == pytest.approx(v.p)  # one axis
    assert v.mde is not None and v.mde > 0
    lines = vd.headline([v], "the score")
    assert lines[0] == "Question: how much does QK-norm change the score?"
    assert ("Beyond noise and at least ±0.01 (Holm-corrected over the axes): QK-norm" in lines[1]) is (claim == "effect")
    revealed = v.claim == "effect" and v.did_claim == "effect" and not v.before_present
    assert any("revealed by extension" in line for line in lines) is revealed


def test_identical_seeds_without_answers_are_not_tested():
    (v,) = axis_verdicts(_analysis(QUIET, [-0.002] * 4), None)
    assert v.claim == "untested" and not v.beyond_noise and v.meaning.startswith("Not tested")
    assert "Not tested (no spread to test against): QK-norm." in vd.headline([v], "the score")


def test_cell_precision_is_consistent():
    assert cell_text("r2", 0.0001022) == "0.00"
    assert cell_text("p", 0.0004) == "<0.001" and cell_text("p", 0.0123) == "0.012"
    assert cell_text("effect", 0.000747) == "0.001" and cell_text("effect", -0.00174) == "-0.002"
    assert cell_text("n", 4.0) == "4" and cell_text("mastered", True) == "yes" and cell_text("x", None) == "—"


def test_pool_context_reads_compute_time_curves_and_chance(tmp_path):
    from archpool.pool.graph import Node, node_dir
    from archpool.pool.provenance import chance_levels, loss_curves, stage_seconds

    pre = Node(id="pretrain:a_s0", stage="pretrain", config=PlainConfig(), run="a_s0", key="k1")
    ev = Node(id="eval:a_s0", stage="eval", config=PlainConfig(), run="a_s0", key="k2")
    events = [
        {"kind": "done", "key": "k1", "seconds": 5.0},
        {"kind": "done", "key": "k1", "seconds": 7.0},  # the latest completion counts
        {"kind": "done", "key": "k2", "seconds": 2.5},
        {"kind": "done", "key": "other", "seconds": 100.0},  # not in this plan
    ]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert stage_seconds(tmp_path, [pre, ev]) == {"pretrain": 7.0, "eval": 2.5}
    d = node_dir(tmp_path, pre)
    d.mkdir(parents=True)
    rows = [{"step": 10, "loss": 5.0, "loss_avg": 6.0}, {"step": 20, "loss": 4.0}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\x00garbage\n")
    assert loss_curves(tmp_path, [pre, ev]) == {"a_s0": {"pretrain": [(10, 6.0), (20, 4.0)]}}
    t = node_dir(tmp_path, ev) / "eval" / "tasks" / "mqar"
    t.mkdir(parents=True)
    (t / "512_dense.json").write_text(json.dumps({"chance": 12.5}))
    assert chance_levels(tmp_path, [pre, ev]) == {"mqar": 0.125}


def test_markdown_report_shows_hostile_text_literally(tmp_path):
    from archpool.report.pool import PoolReport, md_escape, write_pool_report

    assert md_escape("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert\\(1\\)&gt;"
    assert md_escape("a|b\n# c [l](http://x) `c` *e*") == "a\\|b \\# c \\[l\\]\\(http://x\\) \\`c\\` \\*e\\*"
    rows = [{"run": "r_s0", "state": "failed", "error": "<script>x</script> | boom"}]
    desc = "<b>bold</b> [link](http://evil)"
    page = write_pool_report(tmp_path, PoolReport(name="p", size="tiny", description=desc), rows).read_text()
    assert "<b>" not in page and "<script>" not in page and "](http" not in page
    assert "&lt;script&gt;x&lt;/script&gt; \\| boom" in page


def test_large_pools_get_bounded_figures():
    from archpool.report import figures as figs

    runs = [{"run": f"a{i}_s0", "target": float(i), "feature_count": 0} for i in range(10_000)]
    fig = figs.scores_by_run({"runs": runs, "target": "t", "n": len(runs)})
    w, h = fig.get_size_inches() * fig.dpi
    assert h <= 100 * (0.9 + 0.28 * figs.MAX_FIGURE_ROWS) + 1 and w <= 800
    assert "60 of 10000 runs" in fig.axes[0].get_title()


def test_degenerate_attention_panels_are_left_out():
    from archpool.report import figures as figs

    df = pd.DataFrame({"run": ["a_s0", "a_s1", "b_s0"], "sink": [5.6228] * 3, "ent": [1.0, 1.1, 2.0]})
    fig = figs.attention_by_arch(df, "sink", "ent")
    assert len(fig.axes) == 1 and "ent" in fig.axes[0].get_xlabel()
    assert figs.attention_by_arch(df.assign(ent=2.0), "sink", "ent") is None


def test_verdict_shows_the_gap_with_every_arm_treated_only_when_the_baseline_was_treated():
    r = _analysis(QUIET, [-0.05, -0.06, -0.04, -0.05])
    gap = summarise({0: -0.01, 1: 0.0, 2: -0.02, 3: 0.01})
    arm = {"arm": "qknorm", "feature": "qk_norm", "base_treated": False, "gap_recipe": gap}
    r["remedy"] = [{"recipe": "temp", "arms": [arm]}]
    (v,) = axis_verdicts(r, None)
    assert v.treated is None and v.treated_recipe is None  # a treated arm against an untreated baseline: not shown
    arm["base_treated"] = True
    (v,) = axis_verdicts(r, None)
    assert v.treated == pytest.approx(gap["mean"]) and v.treated_ci == tuple(gap["ci95"]) and v.treated_recipe == "temp"


def test_a_target_at_the_ceiling_is_said_to_be_one():
    r = _analysis(QUIET, [0.0, 0.001, -0.001, 0.0])
    r["extension_effects"]["axes"][0]["effects"][0]["base_mean"] = 0.999
    (v,) = axis_verdicts(r, None)
    assert not v.beyond_noise and v.claim == "equivalent"
    assert v.meaning.startswith("No effect larger than ±0.01 on this task, but at the ceiling: the baseline (0.999) and this arm")
    r = _analysis(QUIET, [-0.009, 0.005, -0.012, 0.008])
    r["extension_effects"]["axes"][0]["effects"][0]["base_mean"] = 0.999
    (v,) = axis_verdicts(r, None)
    assert v.claim == "unresolved" and v.meaning.startswith("At the ceiling: the baseline (0.999)")


def test_the_smallest_effect_of_interest_is_the_analysis_own():
    r = _analysis(QUIET, [-0.004, -0.005, -0.003, -0.004])
    r["inference"] = {"min_effect": 0.002}
    (v,) = axis_verdicts(r, None)
    assert v.claim == "effect" and v.min_effect == 0.002


def test_a_damaged_calibration_record_is_left_out_of_the_report(tmp_path):
    from archpool.pool.calibrate import calibration_path
    from archpool.pool.provenance import calibration

    good = {"task": "mqar_rebind", "knob": "pair_every", "target": "t", "column": "c", "window": [0.4, 0.9],
            "points": [{"value": 8, "baseline": [0.8], "baseline_mean": 0.8, "ok": True, "all_mastered": True, "words": "w"}]}  # fmt: skip
    path = calibration_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(good))
    assert calibration(tmp_path) == good
    for bad in ({**good, "window": [0.4]}, {**good, "points": [{"value": "8"}]}, {**good, "task": None}, [1, 2]):
        path.write_text(json.dumps(bad))
        assert calibration(tmp_path) is None
    path.write_text("{not json")
    assert calibration(tmp_path) is None
