"""The report's parts: metric names in words, per-architecture means, column families, the verdict rules,
table precision and the pool context (compute time, loss curves, chance)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from archpool.report import archs
from archpool.report import verdict as vd
from archpool.report.html import cell_text

TARGET = "mqar_acc@1024[d>128]#ladder_mean"


def test_describe_metric_in_words():
    words = vd.describe_metric(TARGET, 128)
    assert words == (
        "MQAR retrieval accuracy at 1,024 tokens (8× the pretraining context) for key–query distances > 128 "
        "averaged over the extension budgets"
    )
    assert vd.describe_metric("mqar_acc@512#ext5") == "MQAR retrieval accuracy at 512 tokens after 5 extension steps"
    assert vd.target_multiple(TARGET, 128) == 8 and vd.target_multiple(TARGET, 96) is None


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


def _summary(mean, lo, hi, n=4):
    return {"mean": mean, "ci95": [lo, hi], "sd": 0.01, "n": n}


def _analysis(pre, post):
    """An analysis result with one QK-norm axis: ``pre``/``post`` are (mean, lo, hi)."""
    effect = {"rung": "ladder_mean", "length": 1024, "column": TARGET, "is_target": True}
    effect |= {"post": _summary(*post), "did": _summary(post[0] - pre[0], post[1] - pre[2], post[2] - pre[1])}
    axis = {"axis": "qk_norm", "feature": "qk_norm", "from": "none", "to": "layerwise", "pre": _summary(*pre)}
    axis |= {"effects": [effect], "dropped_seeds": []}
    return {
        "target": TARGET,
        "spread": {"seed_sd": 0.02},
        "runs": [{"run": "a", "pretrain_ctx": 128}],
        "extension_effects": {"axes": [axis]},
        "remedy": [],
    }


@pytest.mark.parametrize(
    ("pre", "post", "beyond", "present", "says"),
    [
        ((0.0, -0.01, 0.01), (-0.05, -0.08, -0.02), True, False, "only extension reveals"),
        ((-0.05, -0.08, -0.03), (-0.06, -0.09, -0.03), True, True, "pretraining effect"),
        ((0.0, -0.01, 0.01), (-0.01, -0.06, 0.04), False, False, "resolves effects of about ±0.050"),
        ((0.0, -0.01, 0.01), (0.05, 0.03, 0.07), True, False, "against the paper's 7B direction"),
    ],
)
def test_verdict_rules(pre, post, beyond, present, says):
    (v,) = vd.axis_verdicts(_analysis(pre, post), None)
    assert v.beyond_noise is beyond and v.before_present is present
    assert says in v.meaning
    assert v.paper_points == -6.0 and v.paper_multiple == 8  # the paper's layerwise QK-norm at 8×
    lines = vd.headline([v], "the score")
    assert lines[0] == "Question: how much does QK-norm change the score?"
    assert ("Beyond seed noise: QK-norm" in lines[1]) is beyond


def test_cell_precision_is_consistent():
    assert cell_text("r2", 0.0001022) == "0.00"
    assert cell_text("p", 0.0004) == "<0.001" and cell_text("p", 0.0123) == "0.012"
    assert cell_text("effect", 0.000747) == "0.001" and cell_text("effect", -0.00174) == "-0.002"
    assert cell_text("n", 4.0) == "4" and cell_text("mastered", True) == "yes" and cell_text("x", None) == "—"


def test_pool_context_reads_compute_time_curves_and_chance(tmp_path):
    from archpool.pool.graph import Node, node_dir
    from archpool.pool.provenance import chance_levels, loss_curves, stage_seconds

    pre = Node(id="pretrain:a_s0", stage="pretrain", config={}, run="a_s0", key="k1")
    ev = Node(id="eval:a_s0", stage="eval", config={}, run="a_s0", key="k2")
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
