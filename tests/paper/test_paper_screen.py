"""The shipped paper table, the zero-compute screen against a hand computation, and `analyze` on the table."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from archpool.model.features import features
from archpool.paper.screen import format_screen, screen, single_feature_deltas
from archpool.paper.table import KNOWN_ERRORS, RULER_COLUMNS, TABLE_PATH, paper_runs, raw_rows

REPO = Path(__file__).resolve().parents[2]


def _hand_table():
    """(count, helmet_32k) per row, read straight from the CSV with the paper's binarisation."""
    counts, ys = [], []
    for row in csv.DictReader(TABLE_PATH.open()):
        counts.append(
            (row["qk_norm"] != "none") + (int(row["n_kv_heads"]) < 32) + (row["swa"] == "1") + (int(row["pretrain_ctx"]) <= 4096)
        )
        ys.append(float(row["helmet_32k"]))
    return np.array(counts, float), np.array(ys)


def _hand_prediction(count: int) -> tuple[float, float, float]:
    """OLS by the normal equations and the textbook 95% prediction interval."""
    x, y = _hand_table()
    X = np.column_stack([np.ones_like(x), x])
    beta = np.linalg.solve(X.T @ X, X.T @ y)
    resid = y - X @ beta
    n = len(y)
    s2 = resid @ resid / (n - 2)
    x0 = np.array([1.0, count])
    se = np.sqrt(s2 * (1 + x0 @ np.linalg.inv(X.T @ X) @ x0))
    t = stats.t.ppf(0.975, n - 2)
    mean = float(x0 @ beta)
    return mean, mean - t * se, mean + t * se


@pytest.mark.parametrize(("preset", "count"), [("llama3:7b", 1), ("olmo3:7b", 2)])
def test_screen_matches_a_hand_computation(preset, count):
    s = screen(features(preset))
    assert s["count"] == count
    mean, lo, hi = _hand_prediction(count)
    reg = s["regression"]
    assert reg["prediction"] == pytest.approx(mean, abs=1e-9)
    assert reg["interval"] == pytest.approx([lo, hi], abs=1e-9)
    assert reg["r2"] == pytest.approx(0.676, abs=5e-4)
    text = format_screen(s)
    assert f"HELMET@32K   {mean:.1f}" in text and f"{lo:.1f} to {hi:.1f}" in text
    assert "not a measurement of this model" in text


def test_llama3_nearest_runs_have_its_flags():
    near = screen(features("llama3:7b"))["nearest"]
    assert near["flags_apart"] == 0
    assert {r["name"] for r in near["runs"]} == {"G_pre_8kv_8k_14k", "G_pre_4kv_8k_14k", "J_pre_16kv_8k_14k"}
    assert next(r for r in near["runs"] if r["name"] == "G_pre_8kv_8k_14k")["scores"]["helmet_32k"] == 52.4


def test_single_feature_deltas_by_hand():
    """The short-context delta at 32K: mean over the pairs that differ only in the pretraining context."""
    d = single_feature_deltas()["short_ctx"]
    by_name = {r.name: r for r in paper_runs()}
    assert ["H_post_LQK_32kv_4k_11k", "H_post_LQK_32kv_8k_11k"] in d["pairs"]
    for a, b in d["pairs"]:
        ra, rb = by_name[a], by_name[b]
        assert ra.design["pretrain_ctx"] == 4096 and rb.design["pretrain_ctx"] == 8192
        assert ra.design["norm"] == rb.design["norm"]
    manual = np.mean([by_name[a].scores["helmet_32k"] - by_name[b].scores["helmet_32k"] for a, b in d["pairs"]])
    assert d["deltas"]["helmet_32k"] == pytest.approx(manual)


def test_known_transcription_error_is_real_and_masked():
    rows = {r["name"]: r for r in raw_rows()}
    assert [rows["G_pre_8kv_4k_14k"][c] for c in RULER_COLUMNS] == [rows["B_post_LQK_32kv_4k_11k_SWA"][c] for c in RULER_COLUMNS]
    g = next(r for r in paper_runs() if r.name == "G_pre_8kv_4k_14k")
    assert all(g.scores[c] is None for c in KNOWN_ERRORS["G_pre_8kv_4k_14k"])
    assert g.scores["helmet_32k"] == 50.2
    assert len(paper_runs()) == 26


def test_analyze_on_the_table_reproduces_the_papers_count_fit():
    out = subprocess.run(
        [sys.executable, "-m", "archpool", "analyze", str(TABLE_PATH), "--target", "helmet_32k", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    text = json.dumps(r)
    assert r is not None and "feature_count" in text
    fc = _find(r, "feature_count")
    assert round(fc["r2"], 3) == 0.676 and round(fc["loo_r2"], 3) == 0.607


def _find(obj, name):
    """The first dict under ``obj`` that describes predictor ``name`` (has its r2 / loo_r2)."""
    if isinstance(obj, dict):
        if (obj.get("predictor") == name or obj.get("name") == name) and "r2" in obj:
            return obj
        if name in obj and isinstance(obj[name], dict) and "r2" in obj[name]:
            return obj[name]
        for v in obj.values():
            hit = _find(v, name)
            if hit is not None:
                return hit
    if isinstance(obj, list):
        for v in obj:
            hit = _find(v, name)
            if hit is not None:
                return hit
    return None


def test_features_predict_cli_prints_the_estimate():
    out = subprocess.run(
        [sys.executable, "-m", "archpool", "features", "olmo3:7b", "--predict"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    mean, lo, hi = _hand_prediction(2)
    assert f"{mean:.1f}" in out.stdout and "H_post_LQK_32kv_8k_11k_SWA" in out.stdout
