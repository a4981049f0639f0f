"""Paired tests, Holm's correction and the minimum detectable effect, against hand computations and
scipy's noncentral t (an implementation independent of the statsmodels solver the module uses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from scipy.integrate import quad

from archpool.analysis import crossed, inference


def _power(d: float, n: int, alpha: float) -> float:
    """Power of a two-sided one-sample t-test at standardised effect ``d`` with ``n`` pairs, by integrating
    T = (Z + δ) / √(V / df) over V ~ χ²(df) with scipy (no noncentral-t routine involved)."""
    df, nc = n - 1, d * math.sqrt(n)
    crit = sps.t.ppf(1 - alpha / 2, df)

    def given_v(v: float) -> float:
        s = crit * math.sqrt(v / df)
        return (sps.norm.sf(s - nc) + sps.norm.cdf(-s - nc)) * sps.chi2.pdf(v, df)

    return float(quad(given_v, 0, np.inf, limit=200)[0])


def test_holm_matches_a_hand_computation():
    # sorted 0.005, 0.01, 0.03, 0.04 -> ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert inference.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert inference.holm([0.3, None, 0.9]) == pytest.approx([0.6, None, 0.9])  # None is not in the family
    assert inference.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_is_monotone_and_never_below_the_raw_p(ps):
    adj = inference.holm(ps)
    assert all(a >= p - 1e-12 and a <= 1.0 for a, p in zip(adj, ps))
    order = np.argsort(ps, kind="stable")
    assert all(adj[i] <= adj[j] + 1e-12 for i, j in zip(order, order[1:]))


def test_paired_p_is_scipys_paired_t_test():
    arm, base = np.array([0.31, 0.42, 0.35, 0.29]), np.array([0.60, 0.71, 0.58, 0.66])
    assert inference.paired_p(arm - base) == pytest.approx(sps.ttest_rel(arm, base).pvalue)
    d = arm - base
    t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    assert inference.paired_p(d) == pytest.approx(2 * sps.t.sf(abs(t), len(d) - 1))
    assert inference.paired_p([0.1]) is None
    assert inference.paired_p([0.0, 0.0, 0.0]) == 1.0
    assert inference.paired_p([0.2, 0.2]) is None  # identical seeds: no spread to test against, never "beyond noise"


@pytest.mark.parametrize(("n", "alpha"), [(3, 0.05), (4, 0.05), (4, 0.0125), (5, 0.0125), (10, 0.01), (2, 0.05), (2, 0.0125)])
def test_mde_has_the_stated_power_under_scipys_noncentral_t(n, alpha):
    sd = 0.037
    m = crossed.mde(sd / math.sqrt(n), n - 1, alpha)  # the paired t-test over n seed means
    assert m is not None
    assert _power(m / sd, n, alpha) == pytest.approx(0.8, abs=2e-3)
    assert _power(0.9 * m / sd, n, alpha) < 0.8  # smaller effects are detected less often
    assert crossed.mde(sd, 0) is None and crossed.mde(None, 3) is None


def test_seeds_needed_is_the_smallest_n_with_the_stated_power():
    effect, sd, alpha = 0.03, 0.04, 0.0125
    n = inference.seeds_needed(effect, sd, alpha)
    assert n is not None and _power(effect / sd, n, alpha) >= 0.8 > _power(effect / sd, n - 1, alpha)
    assert inference.seeds_needed(0.0, sd) is None and inference.seeds_needed(1e-6, 1.0) is None  # beyond MAX_SEEDS


def test_family_tests_each_effect_and_corrects_over_those_with_a_p():
    a = {"mean": -0.05, "sd": 0.01, "n": 4, "per_seed": {0: -0.05, 1: -0.06, 2: -0.04, 3: -0.05}}
    b = {"mean": 0.0, "sd": 0.02, "n": 4, "per_seed": {0: 0.02, 1: -0.02, 2: 0.01, 3: -0.01}}
    out = inference.family([a, None, b])
    assert out[1] is None
    ps = [sps.ttest_1samp(list(e["per_seed"].values()), 0).pvalue for e in (a, b)]
    assert [out[0]["p_holm"], out[2]["p_holm"]] == pytest.approx(list(inference.holm(ps)))
    assert out[0]["family_size"] == 2 and out[0]["mde_alpha"] == pytest.approx(0.025)
    sd = float(np.std(list(a["per_seed"].values()), ddof=1))  # the spread of the per-seed values themselves
    assert out[0]["mde"] == pytest.approx(crossed.mde(sd / 2, 3, 0.025))
