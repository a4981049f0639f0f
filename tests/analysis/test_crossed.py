"""The two-source noise estimator (seeds × documents) against statsmodels' mixed model and scipy, and its
coverage on simulated answers with a known effect."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from scipy.integrate import quad
from statsmodels.stats.weightstats import ttost_paired

from archpool.analysis import crossed


def _mixedlm(z: np.ndarray):
    """statsmodels' REML fit of z[s, d] = μ + a[s] + b[d] + e with crossed random seeds and documents."""
    S, D = z.shape
    df = pd.DataFrame([(s, d, z[s, d]) for s in range(S) for d in range(D)], columns=["seed", "doc", "z"]).assign(g=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = smf.mixedlm("z ~ 1", df, groups="g", vc_formula={"seed": "0 + C(seed)", "doc": "0 + C(doc)"}, re_formula="0")
        return model.fit(reml=True)


def test_components_are_the_mixed_models_reml_estimates():
    rng = np.random.default_rng(3)
    z = 0.1 + rng.normal(0, 0.05, (4, 1)) + rng.normal(0, 0.08, (1, 12)) + rng.normal(0, 0.03, (4, 12))
    c = crossed.components(z)
    ref = _mixedlm(z)
    var_doc, var_seed = ref.vcomp  # statsmodels orders the components by name: doc, seed
    assert c["mean"] == pytest.approx(ref.params["Intercept"], abs=1e-9)
    assert c["var_seed"] == pytest.approx(var_seed, rel=1e-3)
    assert c["var_doc"] == pytest.approx(var_doc, rel=1e-3)
    assert c["var_res"] == pytest.approx(ref.scale, rel=1e-3)
    assert c["se"] == pytest.approx(ref.bse["Intercept"], rel=1e-3)


def test_one_document_is_the_paired_t_over_seeds():
    d = np.array([[-0.05], [-0.02], [-0.07]])
    c = crossed.components(d)
    ref = sps.ttest_1samp(d[:, 0], 0.0)
    assert c["df"] == 2 and crossed.t_test(c["mean"], c["se"], c["df"]) == pytest.approx(ref.pvalue)
    lo, hi = crossed.interval(c["mean"], c["se"], c["df"])
    ci = ref.confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ci.low, ci.high))


def test_one_seed_measures_the_documents_only():
    c = crossed.components(np.array([[0.1, 0.0, 0.2, 0.1]]))
    assert c["seed_noise"] is False and c["df"] == 3
    assert c["se"] == pytest.approx(np.std([0.1, 0.0, 0.2, 0.1], ddof=1) / 2)


def test_identical_seeds_are_not_beyond_noise_when_one_document_carries_them():
    # every seed misses the same one answer of 450 (document 5 of 16): the paired t over seeds would call it certain
    z = np.zeros((3, 16))
    z[:, 5] = -16 / 450
    c = crossed.components(z)
    assert c["mean"] == pytest.approx(-1 / 450)
    p = crossed.t_test(c["mean"], c["se"], c["df"])
    assert p is not None and p > 0.3


def test_tost_is_statsmodels_two_one_sided_tests():
    rng = np.random.default_rng(1)
    arm, base = rng.normal(0.5, 0.02, 5), rng.normal(0.505, 0.02, 5)
    d = (arm - base)[:, None]
    c = crossed.components(d)
    p, _, _ = ttost_paired(arm, base, -0.03, 0.03)
    assert crossed.tost(c["mean"], c["se"], c["df"], 0.03) == pytest.approx(p)
    assert crossed.tost(0.0, 0.0, 2.0, 0.01) is None  # no noise measured: no equivalence either


def _power(ncp: float, df: float, alpha: float) -> float:
    """Power by integrating over the chi-square of the variance (no noncentral-t routine)."""
    crit = sps.t.ppf(1 - alpha / 2, df)

    def given_v(v: float) -> float:
        s = crit * math.sqrt(v / df)
        return (sps.norm.sf(s - ncp) + sps.norm.cdf(-s - ncp)) * sps.chi2.pdf(v, df)

    return float(quad(given_v, 0, np.inf, limit=200)[0])


@pytest.mark.parametrize(("df", "alpha"), [(1.0, 0.05), (2.0, 0.0125), (3.7, 0.05), (14.2, 0.0125)])
def test_mde_has_the_stated_power(df, alpha):
    se = 0.004
    m = crossed.mde(se, df, alpha)
    assert m is not None and _power(m / se, df, alpha) == pytest.approx(0.8, abs=2e-3)


def test_seeds_needed_is_the_fewest_with_the_stated_power():
    c = {"var_seed": 4e-4, "var_doc": 1e-4, "var_res": 1.6e-3, "n_docs": 16}
    n = crossed.seeds_needed(0.03, c, 0.05)

    def power(s: int) -> float:
        var = c["var_seed"] / s + c["var_doc"] / 16 + c["var_res"] / (16 * s)
        ms_s, ms_d = 16 * c["var_seed"] + c["var_res"], s * c["var_doc"] + c["var_res"]
        ve = c["var_res"]
        df = (ms_s + ms_d - ve) ** 2 / (ms_s**2 / (s - 1) + ms_d**2 / 15 + ve**2 / ((s - 1) * 15))  # Satterthwaite
        return _power(0.03 / math.sqrt(var), df, 0.05)

    assert n is not None and power(n) >= 0.8 > power(n - 1)
    # when the documents' share alone is too large, more seeds cannot resolve it
    assert crossed.seeds_needed(0.005, c, 0.05) is None
    # a seed-dominated effect seen on 3 seeds is not "detectable with 2": the t's few degrees of freedom count
    big_seed = {"var_seed": 3.7e-3, "var_doc": 0.0, "var_res": 6.2e-3, "n_docs": 16}
    assert crossed.seeds_needed(0.289, big_seed, 0.0125) > 3


def _simulate(rng: np.random.Generator, delta: float, seeds: int = 3, docs: int = 16) -> np.ndarray:
    """Binomial answers of a baseline and an arm on the same documents for each seed: documents differ in
    difficulty (and in the effect), seeds shift each arm, answers are Bernoulli; returns z[s, d]."""
    n = rng.integers(10, 41, docs)  # answers per document
    difficulty, doc_effect = rng.normal(0, 0.1, docs), rng.normal(0, 0.03, docs)
    z = np.zeros((seeds, docs))
    for s in range(seeds):
        base = 0.7 + difficulty + rng.normal(0, 0.03) + rng.normal(0, 0.02, docs)
        arm = base + delta + rng.normal(0, 0.03) + doc_effect + rng.normal(0, 0.02, docs)
        k_base, k_arm = rng.binomial(n, np.clip(base, 0, 1)), rng.binomial(n, np.clip(arm, 0, 1))
        z[s] = (k_arm - k_base) * docs / n.sum()
    return z


def test_the_95_percent_interval_covers_a_known_effect_in_93_to_97_percent_of_simulations():
    rng = np.random.default_rng(2026)
    delta, sims = -0.05, 2000  # Monte Carlo sd of the coverage about 0.005
    hits = 0
    for _ in range(sims):
        c = crossed.components(_simulate(rng, delta))
        lo, hi = crossed.interval(c["mean"], c["se"], c["df"])
        hits += lo <= delta <= hi
    assert 0.93 <= hits / sims <= 0.97


def _three_way(rng, arms=6, seeds=3, docs=16, effects=None, sd_as=0.03, sd_ad=0.04, sd_e=0.05):
    """y[a, s, d]: arm, seed and document effects, the three two-way interactions and noise."""
    effects = np.zeros(arms) if effects is None else np.asarray(effects, float)
    y = (
        0.6
        + effects[:, None, None]
        + rng.normal(0, 0.05, (1, seeds, 1))
        + rng.normal(0, 0.1, (1, 1, docs))
        + rng.normal(0, sd_as, (arms, seeds, 1))
        + rng.normal(0, sd_ad, (arms, 1, docs))
        + rng.normal(0, 0.02, (1, seeds, docs))
        + rng.normal(0, sd_e, (arms, seeds, docs))
    )
    return y


def test_the_pooled_arm_seed_variance_is_the_three_way_anovas():
    from statsmodels.stats.anova import anova_lm

    y = _three_way(np.random.default_rng(7), arms=4, seeds=3, docs=6)
    A, S, D = y.shape
    frame = pd.DataFrame(
        [(a, s, d, y[a, s, d]) for a in range(A) for s in range(S) for d in range(D)], columns=["a", "s", "d", "y"]
    )
    fit = smf.ols("y ~ C(a) + C(s) + C(d) + C(a):C(s) + C(a):C(d) + C(s):C(d)", frame).fit()
    table = anova_lm(fit)
    ms_as = table.loc["C(a):C(s)", "sum_sq"] / table.loc["C(a):C(s)", "df"]
    ms_asd = table.loc["Residual", "sum_sq"] / table.loc["Residual", "df"]
    r = crossed.arm_seed_variance(y)
    assert r["ms_as"] == pytest.approx(ms_as) and r["ms_asd"] == pytest.approx(ms_asd)
    assert r["var_arm_seed"] == pytest.approx(max(0.0, (ms_as - ms_asd) / D))
    # one document: the additive arm + seed model's residual mean square
    one = crossed.arm_seed_variance(y[:, :, :1])
    two_way = smf.ols("y ~ C(a) + C(s)", frame[frame.d == 0]).fit()
    assert one["var_arm_seed"] == pytest.approx(two_way.scale) and one["df"] == two_way.df_resid


def _pooled_test(y: np.ndarray, arm: int, base: int = 0) -> dict:
    """The verdict's estimator on a simulated pool: the contrast's own components, its seed variance pooled."""
    z = y[arm] - y[base]
    c = crossed.components(z)
    p = crossed.arm_seed_variance(y)
    return crossed.with_pooled_seed(c, 2 * p["var_arm_seed"], p["df"])


def test_pooled_intervals_cover_a_known_effect_in_93_to_97_percent_of_simulations():
    rng = np.random.default_rng(11)
    delta, sims, hits = -0.04, 1500, 0
    for _ in range(sims):
        c = _pooled_test(_three_way(rng, effects=[0, delta, 0, 0, 0, 0]), 1)
        lo, hi = crossed.interval(c["mean"], c["se"], c["df"])
        hits += lo <= delta <= hi
    assert 0.93 <= hits / sims <= 0.97


def test_verdicts_agree_between_two_independent_seed_sets_at_the_rate_their_stated_power_implies():
    """Two pools that differ only in their seeds: each says 'an effect' when its test rejects; they agree
    as often as π² + (1 − π)², π the power each states (its MDE's noncentral t at the true effect); pooling
    the seed variance across the arms gives the claims enough degrees of freedom to be stable."""
    rng = np.random.default_rng(2027)
    delta, sims = -0.07, 600
    claims, powers = [], []
    for _ in range(sims):
        pair = []
        for _ in range(2):
            c = _pooled_test(_three_way(rng, effects=[0, delta, 0, 0, 0, 0]), 1)
            pair.append(crossed.t_test(c["mean"], c["se"], c["df"]) < crossed.ALPHA)
            powers.append(crossed.power_of(abs(delta) / c["se"], c["df"], crossed.ALPHA))
        claims.append(pair)
    claims = np.array(claims)
    rate = claims.mean()
    stated = float(np.mean(powers))
    assert 0.5 < stated < 0.95  # a case where the verdict could go either way
    assert rate == pytest.approx(stated, abs=4 * math.sqrt(stated * (1 - stated) / claims.size) + 0.03)
    agree = float(np.mean(claims[:, 0] == claims[:, 1]))
    implied = rate**2 + (1 - rate) ** 2
    assert agree == pytest.approx(implied, abs=4 * math.sqrt(implied * (1 - implied) / sims))
    # with the seed variance of the one pair alone (2 degrees of freedom), the same pools reach the claim less often
    alone = np.mean(
        [
            crossed.t_test(*(lambda c: (c["mean"], c["se"], c["df"]))(crossed.components(y[1] - y[0]))) < crossed.ALPHA
            for y in (_three_way(rng, effects=[0, delta, 0, 0, 0, 0]) for _ in range(400))
        ]
    )
    assert alone < rate
