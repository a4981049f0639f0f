"""Inference over effects: a test per effect, Holm's correction over a family of effects, an
equivalence test against the smallest effect of interest, the words the two tests allow, and what
the design can resolve (docs/extensibility.md, "Statistics").

An effect is an estimate with a standard error and degrees of freedom: from the scored answers, with
the noise of the seeds and of the documents (:mod:`archpool.analysis.crossed`), or, without them, the
paired t-test over its per-seed differences ``d_s`` (arm − baseline, each pair sharing data order and
initial weights). A family of tests (the verdict's axes, the transfer table's axes × lengths) is
corrected with Holm's step-down method, which controls the family-wise error rate without assuming
independence; the equivalence tests (two one-sided tests against ``± min_effect``) of a family are
Holm-corrected the same way.

The minimum detectable effect (MDE) is the absolute effect a two-sided t-test with the effect's
standard error and degrees of freedom detects with probability ``power`` at ``α / m`` (``m`` tests in
the family: Holm's first step, the level an effect must meet to be certain to count), from the
noncentral t.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from archpool.analysis import crossed

# the claims a test makes and the smallest effect of interest, which the analysis reads through this module
from archpool.analysis.results import BELOW_INTEREST as BELOW_INTEREST
from archpool.analysis.results import EFFECT as EFFECT
from archpool.analysis.results import EQUIVALENT as EQUIVALENT
from archpool.analysis.results import UNRESOLVED as UNRESOLVED
from archpool.analysis.results import UNTESTED as UNTESTED
from archpool.study import MIN_EFFECT as MIN_EFFECT

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000  # seeds_needed answers None beyond this


def paired_p(per_seed: Sequence[float] | np.ndarray) -> float | None:
    """Two-sided p of the paired t-test (mean of the per-seed differences against 0); None below 2
    values, and None when every difference is the same non-zero number (no spread to test against:
    identical seeds are never "beyond noise" on their own); 1 when all are 0."""
    x = np.asarray(list(per_seed), float)
    if len(x) < 2 or not np.all(np.isfinite(x)):
        return None
    if np.ptp(x) == 0:
        return 1.0 if x[0] == 0 else None
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


def test_of(e: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """``(p, se, df)`` of an effect: its own (an estimate from the answers, :mod:`archpool.analysis.answers`)
    or the paired t over its per-seed values."""
    if "se" in e and "df" in e and "p" in e:
        return e["p"], e["se"], e["df"]
    x = np.asarray(list((e.get("per_seed") or {}).values()), float)
    if len(x) < 2:
        return None, None, None
    se = float(x.std(ddof=1)) / math.sqrt(len(x))
    return paired_p(x), se, float(len(x) - 1)


def claim(mean: float | None, p_holm: float | None, tost_holm: float | None, min_effect: float, alpha: float = ALPHA) -> str:
    """One of EFFECT, BELOW_INTEREST, EQUIVALENT, UNRESOLVED, UNTESTED (see their definitions)."""
    if mean is None or (p_holm is None and tost_holm is None):
        return UNTESTED
    if p_holm is not None and p_holm < alpha:
        return EFFECT if abs(mean) >= min_effect else BELOW_INTEREST
    if tost_holm is not None and tost_holm < alpha:
        return EQUIVALENT
    return UNRESOLVED


def family(
    effects: Sequence[dict[str, Any] | None], alpha: float = ALPHA, power: float = POWER, min_effect: float = MIN_EFFECT
) -> list[dict[str, Any] | None]:
    """Test a family of effects (each an estimate with ``mean`` and either ``se``/``df``/``p`` or
    ``per_seed``): per effect ``p`` and its Holm-adjusted ``p_holm``; the equivalence test against
    ``± min_effect`` (``p_equivalent``, Holm-adjusted over the family as ``p_equivalent_holm``); the
    ``claim`` they allow; the MDE at ``alpha / m`` and the seeds needed to detect an effect of the
    observed size at that level (``m``: the effects with a p-value)."""
    tests = [test_of(e) if e else (None, None, None) for e in effects]
    ps = [t[0] for t in tests]
    adj = holm(ps, alpha)
    tost_ps = [
        crossed.tost(e.get("mean"), se, df, min_effect) if e is not None and se is not None else None
        for e, (_, se, df) in zip(effects, tests)
    ]
    tost_adj = holm(tost_ps, alpha)
    m = max(1, sum(p is not None for p in ps))
    level = alpha / m
    out: list[dict[str, Any] | None] = []
    for e, (p, se, df), a, eq, eq_a in zip(effects, tests, adj, tost_ps, tost_adj):
        if e is None:
            out.append(None)
            continue
        if e.get("source") == "answers":
            needed = crossed.seeds_needed(e.get("mean"), {**(e.get("components") or {}), "n_docs": e.get("n_docs")}, level, power)
        else:
            needed = seeds_needed(e.get("mean"), e.get("sd"), level, power)
        out.append(
            {
                "p": p,
                "p_holm": a,
                "p_equivalent": eq,
                "p_equivalent_holm": eq_a,
                "min_effect": min_effect,
                "claim": claim(e.get("mean"), a, eq_a, min_effect, alpha),
                "family_size": m,
                "mde": crossed.mde(se, df, level, power),
                "mde_alpha": level,
                "power": power,
                "seeds_needed": needed,
                "source": e.get("source", "seeds"),
            }
        )
    return out
