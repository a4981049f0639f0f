"""The transfer table: cells per axis and multiple, Holm over the whole table, the paper's sign and the
sentences the report makes of them."""

from __future__ import annotations

import pytest
from scipy import stats as sps

from archpool.analysis import inference, paper, transfer
from archpool.analysis.extension import summarise
from archpool.report.transfer import statements

TARGET = "mqar_acc@1024[d>128]#ext150"
STRONG_DOWN = [-0.10, -0.11, -0.09, -0.10]
STRONG_UP = [0.10, 0.11, 0.09, 0.10]
NOISE = [0.2, -0.3, 0.1, -0.1]  # relative interval about ±0.44 of the baseline: wider than the paper's SWA −25%
NIL = [0.002, -0.003, 0.001, -0.001]  # interval about ±0.004: no effect larger than 0.01
SMALL = [0.01, -0.02, 0.015, -0.005]  # interval about ±0.025: beyond 0.01, inside the paper's relative size


def _axis(feature, by_length, rung="ext150"):
    effects = [
        {
            "rung": rung,
            "length": length,
            "column": f"mqar_acc@{length}#{rung}",
            "is_target": False,
            "base_mean": 0.8,
            "post": summarise(dict(enumerate(per_seed))),
        }
        for length, per_seed in by_length.items()
    ]
    return {"feature": feature, "effects": effects}


def _result(axes):
    return {"target": TARGET, "extension_effects": {"axes": axes}, "runs": [{"pretrain_ctx": 128}]}


def test_cells_follow_the_paper_sign_only_when_holm_says_so():
    axes = [
        _axis("qk_norm", {128: STRONG_UP, 1024: STRONG_DOWN, 2048: STRONG_DOWN}),  # 16× is not in the table
        _axis("gqa", {1024: STRONG_UP}),
        _axis("swa", {256: SMALL, 512: NIL, 1024: NOISE}),
        _axis("qk_norm", {1024: STRONG_UP}),  # a second QK-norm arm: only the first arm of an axis is used
    ]
    cells = transfer.transfer_cells(_result(axes), 128)
    got = {(c.feature, c.multiple): c for c in cells}
    assert set(got) == {("qk_norm", 1), ("qk_norm", 8), ("gqa", 8), ("swa", 2), ("swa", 4), ("swa", 8)}
    assert got["qk_norm", 1].verdict == "reproduces"  # the paper's QK-norm is +1.6 at 1×
    assert got["qk_norm", 8].verdict == "reproduces"  # and −6.0 at 8×
    assert got["gqa", 8].verdict == "contradicts"
    assert got["swa", 8].verdict == "cannot resolve" and got["swa", 8].mde is not None
    assert got["swa", 4].verdict == "no effect larger than the smallest of interest"  # equivalence at ±0.01
    assert got["swa", 2].verdict == "smaller than the paper's"  # equivalence at the paper's relative size only
    ps = [sps.ttest_1samp(x, 0).pvalue for x in (STRONG_UP, STRONG_DOWN, STRONG_UP, SMALL, NIL, NOISE)]
    adj = inference.holm(ps)
    order = [("qk_norm", 1), ("qk_norm", 8), ("gqa", 8), ("swa", 2), ("swa", 4), ("swa", 8)]
    assert [got[k].p_holm for k in order] == pytest.approx(adj)
    assert got["qk_norm", 8].relative == pytest.approx(-0.10 / 0.8)
    assert got["qk_norm", 8].paper_points == -6.0
    assert got["qk_norm", 8].paper_relative == pytest.approx(-6.0 / paper.baseline_score(8))
    lines = statements(cells)
    assert lines[0] == "QK-norm: this pool reproduces the paper's sign at 1×, 8×."
    assert lines[1] == "GQA: this pool contradicts the paper's sign at 8×."
    assert lines[2].startswith(
        "SWA: this pool finds no effect larger than ±0.01 at 4×; rules out an effect of the paper's relative size at 2×; "
        "cannot resolve it at 8× (an effect of ±"
    )


def test_only_the_targets_rung_is_tabled_and_a_lower_is_better_target_flips_the_sign():
    axes = [_axis("qk_norm", {1024: STRONG_DOWN}, rung="ext0"), _axis("gqa", {1024: STRONG_UP})]
    cells = transfer.transfer_cells(_result(axes), 128)
    assert [(c.feature, c.multiple) for c in cells] == [("gqa", 8)]
    r = _result([_axis("gqa", {1024: STRONG_UP}, rung="")])
    r["target"] = "longppl@1024"
    (cell,) = transfer.transfer_cells(r, 128)
    assert cell.verdict == "reproduces"  # perplexity up = worse, as the paper's GQA at 8×
    assert transfer.transfer_cells({"target": TARGET, "extension_effects": None}, 128) == []


def test_an_accuracy_at_the_ceiling_is_not_read_as_evidence_of_no_cost():
    axis = _axis("qk_norm", {1024: NIL})
    axis["effects"][0]["base_mean"] = 0.995
    (cell,) = transfer.transfer_cells(_result([axis]), 128)
    assert cell.verdict == "at the ceiling"
    assert statements([cell]) == [
        "QK-norm: this pool cannot show a cost at 8×, where the baseline and the arm are at the ceiling."
    ]
    axis["effects"][0]["post"] = summarise(dict(enumerate([-0.02, -0.03, -0.01, -0.02])))  # the arm below it: a cost shows
    (cell,) = transfer.transfer_cells(_result([axis]), 128)
    assert cell.verdict != "at the ceiling"
