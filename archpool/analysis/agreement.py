"""Transfer as one number: does a pool rank its architectures as the paper's 7B pool ranks them?

For a results table that carries the paper's published scores (``paper_helmet_32k``, ...; a replica
pool of the paper's architectures writes them), per architecture the pool's target (the mean over its
seeds, runs that did not master their own length left out and listed), the feature count (the paper's
zero-compute screen) and a short-context measurement taken before extension (validation perplexity,
the paper's best short-context predictor being a perplexity) are each set against each paper column:

- Spearman's ρ and Kendall's τ (scipy), every quantity oriented so that higher means better (the count
  and perplexities negated, LongPPL too);
- the pairwise ranking accuracy: the share of architecture pairs the quantity orders as the paper
  does (pairs the paper ties are left out, pairs the quantity ties count a half), the number
  DataDecide-style proxy studies report;
- a 95% percentile bootstrap interval over architectures and, within each, seeds (2,000 resamples by
  default, seeded): the architectures are resampled with replacement, and each drawn architecture's
  mean is taken over its seeds resampled with replacement.

Beyond the count (:func:`beyond_count`): Spearman's ρ with the paper given the feature count (the partial
correlation of the ranks), and the pairwise accuracy over the pairs of architectures with the same count
with a permutation p (the pool's means shuffled within each count). The paper's own noise caps every
proxy (:func:`noise_ceiling`: √(1 − σ²/var), σ from its replicate pairs).

The paper's ρ of 0.82 (its count's R² of 0.67) is the scale the answer is read on; a ρ near 0 is a
finding about tiny-scale transfer, not a failure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from archpool.analysis.effects import arch_labels
from archpool.analysis.mastery import mastery_frame, mastery_metric
from archpool.analysis.table import features
from archpool.columns import lower_is_better, ruler_tasks_column

PAPER_TARGETS = ("paper_helmet_32k", "paper_helmet_64k", "paper_ruler_64k")
SHORT_CONTEXT = (
    "base_val_ppl_short",
    "val_ppl_short",
    "base_val_ppl_long",
    "pretrain_loss",
)  # the first the table has is the short-context predictor
BOOTSTRAP = 2000
PERMUTATIONS = 10_000
MIN_ARCHS = 4


def _pair_signs(x: np.ndarray) -> np.ndarray:
    """sign(x_i − x_j) over the pairs i < j, along the last axis."""
    i, j = np.triu_indices(x.shape[-1], k=1)
    signs: np.ndarray = np.sign(x[..., i] - x[..., j])
    return signs


def _rows(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Spearman's ρ, Kendall's τ-b and the pairwise accuracy of each row of ``x`` against the same row of
    ``y`` (NaN where undefined): ρ is the Pearson correlation of the average ranks, τ-b and the accuracy
    count concordant pairs (a pair ``y`` ties is left out of the accuracy, a pair ``x`` ties counts 0.5)."""
    rx, ry = sps.rankdata(x, axis=-1), sps.rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(-1) / np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
        sx, sy = _pair_signs(x), _pair_signs(y)
        tau = (sx * sy).sum(-1) / np.sqrt((sx != 0).sum(-1) * (sy != 0).sum(-1))
        agree = np.where(sx == 0, 0.5, (sx == sy).astype(float)) * (sy != 0)
        accuracy = agree.sum(-1) / (sy != 0).sum(-1)
    return {"rho": rho, "tau": tau, "pairwise": accuracy}


def pairwise_accuracy(x: np.ndarray, y: np.ndarray) -> float | None:
    """The share of pairs ``x`` orders as ``y`` does (pairs ``y`` ties left out, pairs ``x`` ties count 0.5)."""
    v = float(_rows(np.asarray(x, float)[None], np.asarray(y, float)[None])["pairwise"][0])
    return v if math.isfinite(v) else None


def _interval(values: np.ndarray) -> list[float | None]:
    v = values[np.isfinite(values)]
    if len(v) < 20:
        return [None, None]
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]


def _value(a: np.ndarray) -> float | None:
    v = float(a[0])
    return v if math.isfinite(v) else None


def rank_agreement(seeds: list[np.ndarray], paper: np.ndarray, n_boot: int = BOOTSTRAP, rng_seed: int = 0) -> dict[str, Any]:
    """ρ, τ and pairwise accuracy of per-architecture means (``seeds[i]``: architecture i's values over
    seeds, higher is better) against ``paper`` (higher is better), each with a bootstrap interval over
    architectures and seeds."""
    paper = np.asarray(paper, float)
    means = np.array([s.mean() for s in seeds])
    point = _rows(means[None], paper[None])
    rng = np.random.default_rng(rng_seed)
    n = len(seeds)
    resampled = np.stack([s[rng.integers(0, len(s), (n_boot, len(s)))].mean(1) for s in seeds], axis=1)  # B × n
    pick = rng.integers(0, n, (n_boot, n))
    boot = _rows(np.take_along_axis(resampled, pick, axis=1), paper[pick])
    rho = _value(point["rho"])
    return {
        "n_archs": n,
        "rho": rho,
        "rho_ci95": _interval(boot["rho"]),
        "tau": _value(point["tau"]),
        "tau_ci95": _interval(boot["tau"]),
        "pairwise": _value(point["pairwise"]),
        "pairwise_ci95": _interval(boot["pairwise"]),
        "spearman_p": float(sps.spearmanr(means, paper).pvalue) if rho is not None else None,
    }


def partial_spearman(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Spearman's ρ of ``x`` and ``y`` given ``z`` along the last axis: the partial correlation of their
    average ranks, ``(r_xy − r_xz·r_yz) / √((1 − r_xz²)(1 − r_yz²))`` (NaN where undefined)."""
    r = {k: _rows(a, b)["rho"] for k, (a, b) in {"xy": (x, y), "xz": (x, z), "yz": (y, z)}.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        rho: np.ndarray = (r["xy"] - r["xz"] * r["yz"]) / np.sqrt((1 - r["xz"] ** 2) * (1 - r["yz"] ** 2))
    return rho


def within_strata_pairwise(x: np.ndarray, y: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """The share of pairs within one stratum (equal ``strata``) that ``x`` orders as ``y`` does, along
    the last axis (pairs ``y`` ties left out, pairs ``x`` ties count 0.5; NaN without such pairs)."""
    i, j = np.triu_indices(x.shape[-1], k=1)
    same = strata[..., i] == strata[..., j]
    sx, sy = np.sign(x[..., i] - x[..., j]), np.sign(y[..., i] - y[..., j])
    use = same & (sy != 0)
    agree = np.where(sx == 0, 0.5, (sx == sy).astype(float)) * use
    with np.errstate(invalid="ignore", divide="ignore"):
        share: np.ndarray = agree.sum(-1) / use.sum(-1)
    return share


def strata_permutation_p(
    x: np.ndarray, y: np.ndarray, strata: np.ndarray, n_perm: int = PERMUTATIONS, rng_seed: int = 0
) -> float | None:
    """One-sided permutation p of :func:`within_strata_pairwise`: ``x`` shuffled within each stratum,
    ``(1 + #{permuted ≥ observed}) / (1 + n_perm)``; None without pairs inside a stratum."""
    observed = float(within_strata_pairwise(x, y, strata))
    if not math.isfinite(observed):
        return None
    rng = np.random.default_rng(rng_seed)
    perms = np.tile(np.asarray(x, float), (n_perm, 1))
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        if len(idx) > 1:
            perms[:, idx] = np.take_along_axis(perms[:, idx], rng.random((n_perm, len(idx))).argsort(1), axis=1)
    null = within_strata_pairwise(perms, y, strata)
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + n_perm))


def beyond_count(
    seeds: list[np.ndarray], paper: np.ndarray, count: np.ndarray, n_boot: int = BOOTSTRAP, rng_seed: int = 0
) -> dict[str, Any]:
    """What per-architecture means add beyond the feature count (``count``, higher = more features):
    Spearman's ρ with ``paper`` given the count, and the pairwise accuracy within equal-count strata with
    its permutation p, each with a bootstrap interval over architectures and seeds (as
    :func:`rank_agreement`)."""
    paper, count = np.asarray(paper, float), np.asarray(count, float)
    means = np.array([s.mean() for s in seeds])
    rng = np.random.default_rng(rng_seed)
    n = len(seeds)
    resampled = np.stack([s[rng.integers(0, len(s), (n_boot, len(s)))].mean(1) for s in seeds], axis=1)
    pick = rng.integers(0, n, (n_boot, n))
    bx, by, bz = np.take_along_axis(resampled, pick, axis=1), paper[pick], count[pick]
    i, j = np.triu_indices(n, k=1)
    same = count[i] == count[j]
    return {
        "partial_rho": _value(partial_spearman(means[None], paper[None], count[None])),
        "partial_rho_ci95": _interval(partial_spearman(bx, by, bz)),
        "within_pairwise": _value(within_strata_pairwise(means[None], paper[None], count[None])),
        "within_pairwise_ci95": _interval(within_strata_pairwise(bx, by, bz)),
        "within_p": strata_permutation_p(means, paper, count, rng_seed=rng_seed),
        "within_pairs": int(np.sum(same & (paper[i] != paper[j]))),
    }


def noise_ceiling(
    scores: np.ndarray, replicate_differences: np.ndarray, n_boot: int = BOOTSTRAP, rng_seed: int = 0
) -> dict[str, Any]:
    """The highest correlation any proxy can reach with scores that carry run-to-run noise: √(1 − σ²/var)
    of the published ``scores``, σ the RMS of the replicate pairs' ``replicate_differences`` over √2,
    with a bootstrap interval over the runs and the replicate pairs."""
    scores, diffs = np.asarray(scores, float), np.asarray(replicate_differences, float)

    def value(sc: np.ndarray, df_: np.ndarray) -> np.ndarray:
        sigma2 = (df_**2).mean(-1) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            reliability: np.ndarray = np.sqrt(np.clip(1 - sigma2 / sc.var(-1, ddof=1), 0, 1))
        return reliability

    rng = np.random.default_rng(rng_seed)
    boot = value(
        scores[rng.integers(0, len(scores), (n_boot, len(scores)))], diffs[rng.integers(0, len(diffs), (n_boot, len(diffs)))]
    )
    return {
        "ceiling": float(value(scores, diffs)),
        "ceiling_ci95": _interval(boot),
        "noise_sd": float(np.sqrt((diffs**2).mean() / 2)),
        "replicate_pairs": len(diffs),
    }


def paper_ceiling(column: str, n_boot: int = BOOTSTRAP, rng_seed: int = 0) -> dict[str, Any] | None:
    """:func:`noise_ceiling` of one of the paper's published columns (``paper_helmet_32k``), from its
    replicate pairs (:func:`archpool.analysis.carry.replicate_pairs`); None for a column it lacks."""
    from archpool.analysis.carry import replicate_pairs
    from archpool.paper.table import paper_runs

    name = column.removeprefix("paper_")
    scores = [s for s in (r.scores.get(name) for r in paper_runs()) if s is not None]
    diffs = []
    for a, b in replicate_pairs():
        x, y = a.scores.get(name), b.scores.get(name)
        if x is not None and y is not None:
            diffs.append(x - y)
    if len(scores) < MIN_ARCHS or len(diffs) < 2:
        return None
    return noise_ceiling(np.array(scores), np.array(diffs), n_boot, rng_seed)


def agreement(df: pd.DataFrame, target: str, short_ctx: int, n_boot: int = BOOTSTRAP, rng_seed: int = 0) -> dict[str, Any] | None:
    """The pool's, the feature count's and the short-context predictor's rank agreement with each paper
    column (see the module docstring); None without paper columns or with fewer than 4 architectures."""
    papers = [c for c in PAPER_TARGETS if c in df.columns and pd.to_numeric(df[c], errors="coerce").notna().any()]
    if not papers or target not in df.columns:
        return None
    d = df[df["state"] != "failed"].reset_index(drop=True) if "state" in df.columns else df.reset_index(drop=True)
    d = d[pd.to_numeric(d[target], errors="coerce").notna()].reset_index(drop=True)
    mf = mastery_frame(d, mastery_metric(target, d.columns) or "")
    not_mastered = sorted(d.loc[mf["mastered"] == 0, "run"])
    d = d[mf["mastered"] != 0].reset_index(drop=True)
    if d.empty:
        return None
    d = d.assign(_arch=arch_labels(d), _count=features(d, short_ctx)["feature_count"])
    short = next((c for c in SHORT_CONTEXT if c in d.columns and pd.to_numeric(d[c], errors="coerce").notna().all()), None)
    sign = -1.0 if lower_is_better(target) else 1.0
    out: dict[str, Any] = {
        "target": target,
        "target_tasks": _tasks_covered(d, target),
        "short_context": short,
        "not_mastered": not_mastered,
        "columns": {},
    }
    for col in papers:
        g = d[pd.to_numeric(d[col], errors="coerce").notna()].groupby("_arch", sort=True)
        if g.ngroups < MIN_ARCHS:
            continue
        paper = np.array([float(x[col].iloc[0]) for _, x in g]) * (-1.0 if lower_is_better(col) else 1.0)
        quantities = {
            "pool": [sign * pd.to_numeric(x[target]).to_numpy(float) for _, x in g],
            "feature_count": [-x["_count"].to_numpy(float)[:1] for _, x in g],
        }
        if short is not None:
            short_sign = -1.0 if lower_is_better(short) else 1.0
            quantities["short_context"] = [short_sign * pd.to_numeric(x[short]).to_numpy(float) for _, x in g]
        count = np.array([float(x["_count"].iloc[0]) for _, x in g])
        out["columns"][col] = {
            "archs": [str(a) for a, _ in g],
            **{k: rank_agreement(v, paper, n_boot, rng_seed) for k, v in quantities.items()},
            "beyond_count": beyond_count(quantities["pool"], paper, -count, n_boot, rng_seed),
            "ceiling": paper_ceiling(col, n_boot, rng_seed),
        }
    return out if out["columns"] else None


def _tasks_covered(d: pd.DataFrame, target: str) -> int | None:
    """How many of RULER's tasks the target averages when it is lm-eval's RULER mean (the fewest over the
    runs); None for any other target or without the count column."""
    col = ruler_tasks_column(target)
    if col is None or col not in d.columns:
        return None
    counts = pd.to_numeric(d[col], errors="coerce")
    return int(counts.min()) if counts.notna().any() else None
