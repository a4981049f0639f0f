"""Rank agreement with the paper's columns against scipy, on constructed tables with a known order."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from archpool.analysis import analyze
from archpool.analysis.agreement import agreement, pairwise_accuracy, rank_agreement
from archpool.analysis.table import validate


def test_pairwise_accuracy_counts_pairs_by_hand():
    x, y = np.array([1.0, 2.0, 3.0, 3.0]), np.array([10.0, 30.0, 20.0, 40.0])
    # pairs (y decides): (0,1) ok, (0,2) ok, (0,3) ok, (1,2) wrong, (1,3) ok, (2,3) x tied: 0.5
    assert pairwise_accuracy(x, y) == pytest.approx(4.5 / 6)
    assert pairwise_accuracy(x, np.array([1.0, 1.0, 2.0, 2.0])) == pytest.approx((1 + 1 + 1 + 1) / 4)
    assert pairwise_accuracy(x, np.ones(4)) is None


def test_rank_agreement_is_scipys_spearman_and_kendall():
    rng = np.random.default_rng(0)
    paper = rng.normal(50, 5, 12)
    seeds = [p / 100 + rng.normal(0, 0.02, 3) for p in paper]
    r = rank_agreement(seeds, paper, n_boot=500)
    means = np.array([s.mean() for s in seeds])
    assert r["rho"] == pytest.approx(sps.spearmanr(means, paper).statistic)
    assert r["tau"] == pytest.approx(sps.kendalltau(means, paper).statistic)
    assert r["rho_ci95"][0] < r["rho"] <= r["rho_ci95"][1] <= 1
    assert r["n_archs"] == 12 and r["pairwise"] == pytest.approx(pairwise_accuracy(means, paper))


def _replica(signal: float, seeds: int = 2) -> pd.DataFrame:
    """A replica-like table: 8 architectures (the four flags), the paper's HELMET falling with the count,
    the pool's target following it with weight ``signal`` plus seed noise."""
    rng = np.random.default_rng(1)
    rows = []
    for k, (qk, gqa, swa) in enumerate(itertools.product([0, 1], repeat=3)):
        helmet = 56 - 5 * (qk + gqa + swa) + rng.normal(0, 1)
        for s in range(seeds):
            rows.append(
                dict(
                    run=f"a{k}_s{s}",
                    arch=f"a{k}",
                    seed=s,
                    swa=swa,
                    qk_norm="layerwise" if qk else "none",
                    norm="pre",
                    n_kv_heads=1 if gqa else 4,
                    n_heads=4,
                    pretrain_ctx=128,
                    paper_helmet_32k=helmet,
                    paper_ruler_64k=60 - 3 * gqa + rng.normal(0, 2),
                    val_ppl_short=30 + rng.normal(0, 1),
                    target=0.6 + signal * (helmet - 50) / 20 + rng.normal(0, 0.01),
                )
            )
    return validate(pd.DataFrame(rows).astype(str))


def test_a_pool_that_follows_the_paper_agrees_and_one_that_does_not_is_near_zero():
    good = agreement(_replica(1.0), "target", 64, n_boot=300)
    col = good["columns"]["paper_helmet_32k"]
    assert col["pool"]["rho"] > 0.8 and col["pool"]["rho_ci95"][0] > 0
    assert col["feature_count"]["rho"] > 0.7  # the paper's HELMET falls with the count here by construction
    assert good["short_context"] == "val_ppl_short" and "short_context" in col
    flat = agreement(_replica(0.0), "target", 64, n_boot=300)["columns"]["paper_helmet_32k"]
    assert flat["pool"]["rho_ci95"][0] < 0 < flat["pool"]["rho_ci95"][1]


def test_the_analysis_carries_the_agreement_for_a_table_with_paper_columns(tmp_path):
    t = _replica(1.0)
    t.to_csv(tmp_path / "results.csv", index=False)
    from archpool.analysis import load_results

    r = analyze(load_results(tmp_path / "results.csv"), "target")
    assert set(r["agreement"]["columns"]) == {"paper_helmet_32k", "paper_ruler_64k"}


def test_a_ruler_mean_over_fewer_tasks_than_the_papers_says_so():
    """lm-eval's RULER mean over the 6 offline tasks is ranked against the paper's 13-task RULER, and every
    place that names the ranking says how many tasks it averages."""
    from archpool.analysis.results import target_label
    from archpool.analysis.summary_text import format_agreement
    from archpool.columns import ruler_tasks_column
    from archpool.report.scale import agreement_table

    assert ruler_tasks_column("ruler@4096") == "ruler_tasks@4096"
    assert ruler_tasks_column("base_ruler@512") == "base_ruler_tasks@512"
    assert ruler_tasks_column("ruler_ll@4096") is None and ruler_tasks_column("ruler_vt@4096") is None
    df = _replica(1.0).rename(columns={"target": "ruler@4096"}).assign(**{"ruler_tasks@4096": 6.0})
    a = agreement(df, "ruler@4096", 64, n_boot=100)
    assert a["target_tasks"] == 6 and target_label(a) == "this pool's target (RULER, 6 of 13 tasks)"
    assert "this pool's target (RULER, 6 of 13 tasks)" in set(agreement_table(a)["ranked by"])
    assert any("6 of 13 tasks" in line for line in format_agreement(a))
    full = agreement(df.assign(**{"ruler_tasks@4096": 13.0}), "ruler@4096", 64, n_boot=100)
    assert full["target_tasks"] == 13 and target_label(full) == "this pool's target"
    assert agreement(_replica(1.0), "target", 64, n_boot=100)["target_tasks"] is None


def _rank_residual_partial(x, y, z) -> float:
    """Partial Spearman by hand: Pearson (scipy) of the ranks of x and y after regressing each on z's ranks."""
    rx, ry, rz = (sps.rankdata(v) for v in (x, y, z))
    design = np.column_stack([np.ones_like(rz), rz])
    res = [r - design @ np.linalg.lstsq(design, r, rcond=None)[0] for r in (rx, ry)]
    return float(sps.pearsonr(*res).statistic)


def test_partial_spearman_is_the_correlation_of_rank_residuals():
    from archpool.analysis.agreement import partial_spearman

    rng = np.random.default_rng(3)
    z = rng.integers(0, 4, 20).astype(float)
    x = z + rng.normal(0, 1, 20)
    y = -z + 0.5 * x + rng.normal(0, 1, 20)
    got = float(partial_spearman(x[None], y[None], z[None])[0])
    assert got == pytest.approx(_rank_residual_partial(x, y, z))
    assert np.isnan(partial_spearman(z[None], -z[None], z[None])[0])  # x is the count itself: undefined


def test_within_strata_pairwise_and_its_exact_permutation_p_by_hand():
    from archpool.analysis.agreement import strata_permutation_p, within_strata_pairwise

    strata = np.array([0, 0, 0, 1, 1])
    y = np.array([3.0, 2.0, 1.0, 5.0, 4.0])
    x = np.array([0.9, 0.1, 0.5, 0.2, 0.1])
    # within stratum 0: (0,1) ok, (0,2) ok, (1,2) wrong; stratum 1: (3,4) ok; cross-stratum pairs ignored
    assert float(within_strata_pairwise(x, y, strata)) == pytest.approx(3 / 4)
    # the exact null: every within-stratum ordering of x, equally likely (3! x 2! = 12)
    null = []
    for p0 in itertools.permutations([0, 1, 2]):
        for p1 in itertools.permutations([3, 4]):
            xp = x.copy()
            xp[[0, 1, 2]] = x[list(p0)]
            xp[[3, 4]] = x[list(p1)]
            null.append(float(within_strata_pairwise(xp, y, strata)))
    exact = np.mean(np.array(null) >= 3 / 4 - 1e-12)
    p = strata_permutation_p(x, y, strata, n_perm=20_000)
    assert p == pytest.approx(exact, abs=0.01)
    assert strata_permutation_p(x, y, np.arange(5)) is None  # no pair shares a stratum


def test_beyond_count_sees_information_the_count_lacks_and_none_where_there_is_none():
    from archpool.analysis.agreement import beyond_count

    rng = np.random.default_rng(5)
    count = np.repeat([0, 1, 2, 3], 6).astype(float)
    hidden = rng.normal(0, 1, 24)
    paper = -5 * count + 3 * hidden
    informed = [np.array([h, h]) + rng.normal(0, 0.05, 2) for h in hidden]
    blind = [np.array([-c, -c]) + rng.normal(0, 0.05, 2) for c in count]  # the count again, with noise
    good = beyond_count(informed, paper, count, n_boot=400)
    assert good["partial_rho"] > 0.5 and good["partial_rho_ci95"][0] > 0
    assert good["within_pairwise"] > 0.7 and good["within_p"] < 0.01 and good["within_pairs"] == 4 * 15
    none = beyond_count(blind, paper, count, n_boot=400)
    assert none["partial_rho_ci95"][0] < 0 < none["partial_rho_ci95"][1]
    assert none["within_p"] > 0.01


def test_noise_ceiling_by_hand_and_for_the_papers_helmet():
    from archpool.analysis.agreement import noise_ceiling, paper_ceiling

    scores = np.array([30.0, 40.0, 50.0, 60.0])
    diffs = np.array([2.0, -2.0])  # sigma^2 = mean(d^2) / 2 = 2
    c = noise_ceiling(scores, diffs, n_boot=200)
    assert c["ceiling"] == pytest.approx(np.sqrt(1 - 2 / np.var(scores, ddof=1)))
    assert c["noise_sd"] == pytest.approx(np.sqrt(2))
    helmet = paper_ceiling("paper_helmet_32k", n_boot=200)
    assert helmet is not None and helmet["replicate_pairs"] == 9
    assert 0.85 < helmet["ceiling"] < 0.92  # sigma about 2.9 HELMET points against a spread of about 6.5
    assert paper_ceiling("paper_no_such_column") is None


def test_the_agreement_reports_what_the_pool_adds_beyond_the_count():
    from archpool.analysis.summary_text import format_agreement
    from archpool.report.scale import agreement_table, agreement_words

    a = agreement(_replica(1.0), "target", 64, n_boot=200)
    col = a["columns"]["paper_helmet_32k"]
    assert set(col["beyond_count"]) >= {"partial_rho", "partial_rho_ci95", "within_pairwise", "within_p", "within_pairs"}
    assert col["ceiling"]["replicate_pairs"] == 9
    text = "\n".join(format_agreement(a))
    assert "ρ given count" in text and "noise ceiling" in text
    table = agreement_table(a)
    assert "ρ given the count" in table.columns and table["ranked by"].str.contains("noise ceiling").any()
    assert any("Given the count" in w for w in agreement_words(a))
