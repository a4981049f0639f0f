"""An effect's uncertainty from both sources of noise: the seeds and the sampled answers
(docs/extensibility.md, "Statistics").

Every arm of a pool answers the same evaluation documents (one evaluation seed), and every seed trains
every arm, so an effect measured on answers is a *crossed* design: a matrix ``z[s, d]`` over seeds ``s``
and documents ``d`` whose grand mean is the effect (:mod:`archpool.analysis.answers` builds it so that
the mean is exactly the pooled difference results.csv reports). Its model is the two-way random-effects
model without replication::

    z[s, d] = μ + a[s] + b[d] + e[s, d],   a ~ (0, σ²_seed), b ~ (0, σ²_doc), e ~ (0, σ²_res)

The variance components are the ANOVA (method-of-moments) estimates, truncated at zero — for a balanced
design the REML estimates of a mixed model (statsmodels ``MixedLM`` gives the same numbers) — and the
variance of the grand mean is ``σ²_seed / S + σ²_doc / D + σ²_res / (S·D)``. Intervals and tests are
t-based with Satterthwaite's degrees of freedom (as lmerTest does). Both sources count: identical
per-seed differences leave the documents' spread, and a difference carried by one document is not
beyond noise because three seeds repeat it.

With one seed only the documents' part can be estimated (``seed_noise`` False: the interval is too
narrow by the unmeasured seed spread); with one document only the seeds' part.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy import stats as sps
from scipy.integrate import quad
from scipy.optimize import brentq

ALPHA = 0.05
POWER = 0.8


def _f(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _satterthwaite(terms: list[tuple[float, float, float]]) -> float:
    """Degrees of freedom of ``Σ a·MS`` from each term's coefficient, mean square and degrees of freedom."""
    num = sum(a * ms for a, ms, _ in terms) ** 2
    den = sum((a * ms) ** 2 / df for a, ms, df in terms if a and df > 0)
    return num / den if den > 0 else math.inf


def components(z: np.ndarray) -> dict[str, Any]:
    """The mean of ``z`` (seeds × documents), the variance components, the standard error of the mean
    and its Satterthwaite degrees of freedom (see the module docstring)."""
    z = np.asarray(z, float)
    if z.ndim != 2 or z.size == 0 or not np.all(np.isfinite(z)):
        raise ValueError("z must be a finite, non-empty seeds × documents matrix")
    S, D = z.shape
    m = float(z.mean())
    rows, cols = z.mean(1), z.mean(0)
    out: dict[str, Any] = {"mean": m, "n_seeds": S, "n_docs": D, "seed_noise": S > 1, "doc_noise": D > 1}
    if S == 1 and D == 1:
        return {**out, "se": None, "df": None, "var_seed": None, "var_doc": None, "var_res": None}
    if S == 1:  # the documents only: a one-sample t over the documents
        ms_d = float(((cols - m) ** 2).sum() / (D - 1))
        return {**out, "se": math.sqrt(ms_d / D), "df": float(D - 1), "var_seed": None, "var_doc": ms_d, "var_res": None}
    if D == 1:  # the seeds only: the paired t over seeds
        ms_s = float(((rows - m) ** 2).sum() / (S - 1))
        return {**out, "se": math.sqrt(ms_s / S), "df": float(S - 1), "var_seed": ms_s, "var_doc": None, "var_res": None}
    ms_s = D * float(((rows - m) ** 2).sum()) / (S - 1)
    ms_d = S * float(((cols - m) ** 2).sum()) / (D - 1)
    resid = z - rows[:, None] - cols[None, :] + m
    ms_e = float((resid**2).sum()) / ((S - 1) * (D - 1))
    var_seed = max(0.0, (ms_s - ms_e) / D)
    var_doc = max(0.0, (ms_d - ms_e) / S)
    n = S * D
    var_mean = var_seed / S + var_doc / D + ms_e / n
    # the same variance as a combination of mean squares, for Satterthwaite's degrees of freedom
    a_s, a_d = (1 / n if var_seed > 0 else 0.0), (1 / n if var_doc > 0 else 0.0)
    a_e = (1 - (var_seed > 0) - (var_doc > 0)) / n
    df = _satterthwaite([(a_s, ms_s, S - 1), (a_d, ms_d, D - 1), (a_e, ms_e, (S - 1) * (D - 1))])
    return {**out, "se": math.sqrt(var_mean), "df": df, "var_seed": var_seed, "var_doc": var_doc, "var_res": ms_e}


def arm_seed_variance(y: np.ndarray) -> dict[str, Any]:
    """The seed-by-arm variance pooled over every arm of a pool, from ``y`` (arms × seeds × documents; the
    same seeds and documents for every arm): the three-way random model without replication::

        y[a, s, d] = μ + α[a] + b[s] + c[d] + (αb)[a, s] + (αc)[a, d] + (bc)[s, d] + e[a, s, d]

    ``var_arm_seed`` is the ANOVA estimate of the (αb) variance, ``(MS_AS − MS_ASD) / D`` truncated at 0,
    with Satterthwaite's degrees of freedom; a contrast ``Σ c_a · arm_a`` paired by seed then has seed
    variance ``Σ c_a² · var_arm_seed`` with ``(A − 1)(S − 1)`` degrees of freedom behind it, where one
    pair alone has ``S − 1``."""
    y = np.asarray(y, float)
    if y.ndim != 3 or min(y.shape) < 1 or not np.all(np.isfinite(y)):
        raise ValueError("y must be a finite arms × seeds × documents array")
    A, S, D = y.shape
    if A < 2 or S < 2:
        return {"var_arm_seed": None, "df": None, "ms_as": None, "ms_asd": None, "n_arms": A}
    m = y.mean()
    a_, s_, d_ = y.mean((1, 2)), y.mean((0, 2)), y.mean((0, 1))
    as_, ad_, sd_ = y.mean(2), y.mean(1), y.mean(0)
    inter_as = as_ - a_[:, None] - s_[None, :] + m
    df_as = (A - 1) * (S - 1)
    ms_as = D * float((inter_as**2).sum()) / df_as
    if D == 1:
        return {"var_arm_seed": ms_as, "df": float(df_as), "ms_as": ms_as, "ms_asd": None, "n_arms": A}
    resid = (
        y - as_[:, :, None] - ad_[:, None, :] - sd_[None, :, :] + a_[:, None, None] + s_[None, :, None] + d_[None, None, :] - m
    )
    df_asd = (A - 1) * (S - 1) * (D - 1)
    ms_asd = float((resid**2).sum()) / df_asd
    var = max(0.0, (ms_as - ms_asd) / D)
    df = _satterthwaite([(1 / D, ms_as, df_as), (-1 / D, ms_asd, df_asd)]) if var > 0 else float(df_as)
    return {"var_arm_seed": var, "df": df, "ms_as": ms_as, "ms_asd": ms_asd, "n_arms": A}


def with_pooled_seed(c: dict[str, Any], var_seed: float, df_seed: float) -> dict[str, Any]:
    """:func:`components` of one contrast with its seed variance replaced by a pooled estimate
    (``var_seed``: already times the contrast's ``Σ c²``; ``df_seed`` its degrees of freedom): the variance
    of the mean ``var_seed / S + σ²_doc / D + σ²_res / (S·D)``, the documents' part the contrast's own,
    with Satterthwaite's degrees of freedom over the pooled seed term and the contrast's document mean
    square."""
    S, D = int(c["n_seeds"]), int(c["n_docs"])
    if S < 2:
        return c
    if D == 1:
        return {**c, "se": math.sqrt(var_seed / S), "df": float(df_seed), "var_seed": var_seed, "seed_pooled": True}
    var_doc, ms_e = float(c["var_doc"] or 0.0), float(c["var_res"] or 0.0)
    n = S * D
    doc_ms, doc_df = (S * var_doc + ms_e, D - 1) if var_doc > 0 else (ms_e, (S - 1) * (D - 1))
    var_mean = var_seed / S + var_doc / D + ms_e / n
    df = _satterthwaite([(1 / S, var_seed, df_seed), (1 / n, doc_ms, doc_df)])
    return {**c, "se": math.sqrt(var_mean), "df": df, "var_seed": var_seed, "seed_pooled": True}


def t_test(mean: float | None, se: float | None, df: float | None) -> float | None:
    """Two-sided p of ``mean / se`` against a t with ``df`` degrees of freedom; 1 when there is no
    effect and no noise, None when there is an effect but no noise to test it against (or no estimate)."""
    if mean is None or se is None or df is None:
        return None
    if se == 0:
        return 1.0 if mean == 0 else None
    return float(2 * sps.t.sf(abs(mean) / se, df))


def interval(mean: float | None, se: float | None, df: float | None, level: float = 0.95) -> list[float | None]:
    if mean is None or se is None or df is None:
        return [None, None]
    h = float(sps.t.ppf(0.5 + level / 2, df)) * se
    return [mean - h, mean + h]


def tost(mean: float | None, se: float | None, df: float | None, margin: float | None) -> float | None:
    """p of the two one-sided tests that the effect lies inside ``± margin`` (equivalence: the larger of
    the two one-sided p-values; below ``α`` exactly when the ``1 − 2α`` interval lies inside the margin);
    None without a standard error, or with a zero one (no noise measured)."""
    if mean is None or se is None or df is None or margin is None or not margin > 0 or se == 0:
        return None  # no noise measured: nothing to test equivalence against
    lower = float(sps.t.sf((mean + margin) / se, df))  # H0: effect <= -margin
    upper = float(sps.t.cdf((mean - margin) / se, df))  # H0: effect >= +margin
    return max(lower, upper)


def power_of(ncp: float, df: float, alpha: float) -> float:
    """Power of the two-sided t-test at level ``alpha`` against a noncentrality ``ncp``: scipy's
    noncentral t, or, where it has no value (it is NaN at some points for one or two degrees of
    freedom), the same probability integrated over the chi-square of the variance estimate."""
    crit = float(sps.t.ppf(1 - alpha / 2, df))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))
    if math.isfinite(p):
        return p

    def given_v(v: float) -> float:
        s = crit * math.sqrt(v / df)
        return float((sps.norm.sf(s - ncp) + sps.norm.cdf(-s - ncp)) * sps.chi2.pdf(v, df))

    return float(quad(given_v, 0, math.inf, limit=200)[0])


def mde(se: float | None, df: float | None, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest absolute effect a two-sided t-test with this standard error and these degrees of
    freedom detects at level ``alpha`` with probability ``power`` (noncentral t)."""
    if se is None or df is None or not math.isfinite(se) or not df > 0:
        return None
    if se == 0:
        return 0.0
    hi = 1.0
    while power_of(hi, df, alpha) < power:
        hi *= 2
        if hi > 1e6:
            return None
    ncp = brentq(lambda x: power_of(x, df, alpha) - power, 0.0, hi, xtol=1e-10)
    return float(ncp) * se


def seeds_needed(
    effect: float | None, c: dict[str, Any], alpha: float = ALPHA, power: float = POWER, limit: int = 1000
) -> int | None:
    """The fewest seeds (with the same documents) at which a t-test detects an effect of size ``effect``
    with ``power`` at level ``alpha``, from the variance components ``c``: at ``S`` seeds the variance of
    the mean is ``σ²_seed / S + σ²_doc / D + σ²_res / (S·D)`` with Satterthwaite's degrees of freedom of
    the mean squares those components give. None when no number of seeds up to ``limit`` reaches it,
    which is the case when the documents' share of the noise alone is too large (more documents, not
    more seeds)."""
    if effect is None or effect == 0 or c.get("var_doc") is None or c.get("var_seed") is None or c.get("var_res") is None:
        return None
    D = int(c["n_docs"])
    vs, vd, ve = float(c["var_seed"]), float(c["var_doc"]), float(c["var_res"])
    for S in range(2, limit + 1):
        n = S * D
        ms_s, ms_d = D * vs + ve, S * vd + ve  # expected mean squares at S seeds
        var_mean = vs / S + vd / D + ve / n
        if var_mean <= 0:
            return S
        a_s, a_d = (1 / n if vs > 0 else 0.0), (1 / n if vd > 0 else 0.0)
        a_e = (1 - (vs > 0) - (vd > 0)) / n
        df = _satterthwaite([(a_s, ms_s, S - 1), (a_d, ms_d, D - 1), (a_e, ve, (S - 1) * (D - 1))])
        if power_of(abs(effect) / math.sqrt(var_mean), min(df, 1e6), alpha) >= power:
            return S
        if S > 50 and vd / D >= var_mean * 0.999:  # the documents' share dominates: more seeds do not help
            return None
    return None
