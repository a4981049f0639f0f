"""Inference over seed-paired effects: a paired test per effect, Holm's correction over a family of
effects, and what a number of seeds can resolve (docs/extensibility.md, "Statistics").

An effect here is a set of per-seed differences ``d_s`` (arm − baseline, each pair sharing data order
and initial weights). Its test is the one-sample t-test of ``d_s`` against 0 (the paired t-test);
a family of such tests (the verdict's axes, the transfer table's axes × lengths) is corrected with Holm's
step-down method, which controls the family-wise error rate without assuming independence.

The minimum detectable effect (MDE) of ``n`` seed pairs with a seed-pair sd ``σ`` is the absolute mean
difference a two-sided paired t-test at level ``α`` detects with probability ``power``: ``d* · σ`` where
``d*`` solves the noncentral-t power equation (statsmodels ``TTestPower``). With ``m`` tests in the family,
the MDE is given at ``α / m`` (Holm's first step, the level an effect must meet to be certain to count).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps
from scipy.optimize import brentq
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000  # seeds_needed answers None beyond this


def paired_p(per_seed: Sequence[float]) -> float | None:
    """Two-sided p of the paired t-test (mean of the per-seed differences against 0); None below 2
    values; 0 when every difference is the same non-zero number, 1 when all are 0."""
    x = np.asarray(list(per_seed), float)
    if len(x) < 2 or not np.all(np.isfinite(x)):
        return None
    if np.ptp(x) == 0:
        return 1.0 if x[0] == 0 else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy's precision note for nearly equal differences
        return float(sps.ttest_1samp(x, 0.0).pvalue)


def holm(pvalues: Sequence[float | None], alpha: float = ALPHA) -> list[float | None]:
    """Holm-adjusted p-values over the family of the given tests (None entries are not in the family
    and stay None)."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    if not idx:
        return out
    _, adj, _, _ = multipletests([float(pvalues[i]) for i in idx], alpha=alpha, method="holm")  # type: ignore[arg-type]
    for i, a in zip(idx, adj):
        out[i] = float(a)
    return out


def mde(sd: float | None, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest absolute mean paired difference ``n`` seed pairs with sd ``sd`` detect (two-sided,
    level ``alpha``) with probability ``power``; None below 2 pairs, without an sd, or when no effect
    reaches that power."""
    if sd is None or not math.isfinite(sd) or n < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels warns, and answers nan, when d* lies beyond its bracket
        d = float(np.asarray(TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power)).item())
    if not math.isfinite(d) or abs(TTestPower().power(d, n, alpha) - power) > 1e-4:  # d* beyond statsmodels' bracket
        d = _widened(n, alpha, power)
    return None if d is None else d * float(sd)


def _widened(n: int, alpha: float, power: float) -> float | None:
    """d* on a fine log grid of statsmodels' power function (its noncentral t is NaN at some points for
    one degree of freedom, so points without a value are skipped), refined by bisection between the two
    grid points around it where both have values; None when no d up to 10⁴ reaches ``power``."""
    grid = np.logspace(-2, 4, 3001)
    values = [TTestPower().power(float(x), n, alpha) for x in grid]
    for i, (x, p) in enumerate(zip(grid, values)):
        if math.isfinite(p) and p >= power:
            lo = next((j for j in range(i - 1, -1, -1) if math.isfinite(values[j])), None)
            if lo is None:
                return float(x)
            try:
                return float(brentq(lambda z: TTestPower().power(z, n, alpha) - power, float(grid[lo]), float(x)))
            except ValueError:  # a NaN inside the bracket: the grid point (0.5% apart) is the answer
                return float(x)
    return None


def seeds_needed(effect: float | None, sd: float | None, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The seed pairs a paired t-test needs to detect ``effect`` with probability ``power`` at level
    ``alpha``; None when the effect is 0 or unknown, or more than ``MAX_SEEDS`` are needed."""
    if effect is None or sd is None or not math.isfinite(effect) or not math.isfinite(sd) or effect == 0:
        return None
    if sd == 0:
        return 2
    size = abs(effect) / sd
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = TTestPower().solve_power(effect_size=size, nobs=None, alpha=alpha, power=power, alternative="two-sided")
    except (ValueError, RuntimeError):
        return None
    n = float(np.asarray(n).item())
    if not math.isfinite(n) or n > MAX_SEEDS:
        return None
    return max(2, math.ceil(n))


def family(effects: Sequence[dict[str, Any] | None], alpha: float = ALPHA, power: float = POWER) -> list[dict[str, Any] | None]:
    """Test a family of effects (each a :func:`archpool.analysis.extension.summarise` dict with
    ``per_seed``): per effect ``p``, Holm-adjusted ``p_holm``, ``mde`` at ``alpha / m`` and the seeds
    needed to detect an effect of its observed size at that level (``m``: the effects with a p-value)."""
    ps = [paired_p(list(e["per_seed"].values())) if e else None for e in effects]
    adj = holm(ps, alpha)
    m = max(1, sum(p is not None for p in ps))
    out: list[dict[str, Any] | None] = []
    for e, p, a in zip(effects, ps, adj):
        if e is None:
            out.append(None)
            continue
        level = alpha / m
        out.append(
            {
                "p": p,
                "p_holm": a,
                "family_size": m,
                "mde": mde(e.get("sd"), e.get("n", 0), level, power),
                "mde_alpha": level,
                "power": power,
                "seeds_needed": seeds_needed(e.get("mean"), e.get("sd"), level, power),
            }
        )
    return out
