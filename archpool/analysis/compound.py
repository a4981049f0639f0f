"""Compounding: does a pair of features cost more than the sum of its parts?

The paper's headline is compounding: SWA costs about one HELMET point without GQA and about nine with
it (docs/paper.md). For every pair of features a pool has as a cell of its own (both on, the others
off) beside the two single-feature cells and the baseline (everything else matched), per seed::

    interaction = (pair − base) − (A − base) − (B − base) = pair − A − B + base

With the scored answers the interaction is one contrast of the four arms on the same documents
(:meth:`archpool.analysis.answers.Answers.contrast`), else the paired t over seeds. The pairs form one
family (Holm), with the equivalence test against the smallest effect of interest: a pair is
*super-additive* when the interaction is an effect in the cost direction, *sub-additive* in the other,
*additive within ±X* when the equivalence test rejects, and unresolved otherwise. Seeds where one of
the four runs did not master its own length are left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pandas as pd

from archpool.analysis import effects as fx
from archpool.analysis import inference
from archpool.analysis.answers import Answers
from archpool.analysis.extension import by_seed, effect, seed_key, seeds_of
from archpool.analysis.mastery import MASTERY_THRESHOLD, mastery_frame, mastery_metric
from archpool.analysis.table import MATCH_CONFOUNDS
from archpool.axes import FEATURES

SUPER, SUB, ADDITIVE, UNRESOLVED = "super-additive", "sub-additive", "additive", "not resolved"


def _baselines(cells: pd.DataFrame) -> Iterator[pd.Series]:
    """The cells with none of the four features: one baseline per combination of confounds."""
    return (row for _, row in cells.iterrows() if not any(row[f"f_{f}"] for f in FEATURES))


def _usable_cells(
    df: pd.DataFrame, target: str, short_ctx: int, min_runs: int
) -> tuple[pd.DataFrame, set[str], pd.DataFrame] | None:
    """The runs with a value of ``target`` (failed ones left out), those that did not master their own
    length, and the cells of the rest; None with fewer than ``min_runs`` runs."""
    if target not in df.columns:
        return None
    d = df[df["state"] != "failed"].reset_index(drop=True) if "state" in df.columns else df.reset_index(drop=True)
    d = d[pd.to_numeric(d[target], errors="coerce").notna()].reset_index(drop=True)
    if len(d) < min_runs:
        return None
    mf = mastery_frame(d, mastery_metric(target, d.columns) or "", MASTERY_THRESHOLD)
    return d, set(d.loc[mf["mastered"] == 0, "run"]), fx.cells(d, target, short_ctx)


def _cell_of(c: pd.DataFrame, on: set[str], like: pd.Series) -> pd.Series | None:
    """The cell with exactly the features ``on`` and the same confounds as ``like``."""
    for _, row in c.iterrows():
        if {f for f in FEATURES if row[f"f_{f}"]} != on:
            continue
        if all(
            row.get(k) == like.get(k) or (pd.isna(row.get(k)) and pd.isna(like.get(k))) for k in MATCH_CONFOUNDS if k in c.columns
        ):
            return row
    return None


def compounding(
    df: pd.DataFrame,
    target: str,
    short_ctx: int,
    answers: Answers | None = None,
    min_effect: float = inference.MIN_EFFECT,
    lower_is_better: bool = False,
) -> list[dict[str, Any]]:
    """Every pair of features with its four cells: the pair's effect, the sum of its parts and their
    difference (the interaction), tested as one family (see the module docstring)."""
    found = _usable_cells(df, target, short_ctx, 4)
    if found is None:
        return []
    d, bad, c = found
    out: list[dict[str, Any]] = []
    for base in _baselines(c):
        for a, b in itertools.combinations(FEATURES, 2):
            pair, ca, cb = (_cell_of(c, s, base) for s in ({a, b}, {a}, {b}))
            if pair is None or ca is None or cb is None:
                continue
            arms = {"pair": list(pair["runs"]), a: list(ca["runs"]), b: list(cb["runs"]), "base": list(base["runs"])}
            runs = [r for rs in arms.values() for r in rs]
            involved = d["run"].isin(runs)
            dropped = {seed_key(s) for s in seeds_of(d)[involved & d["run"].isin(bad)]}
            vals = {k: {s: v for s, v in by_seed(d, rs, d[target]).items() if s not in dropped} for k, rs in arms.items()}
            seeds = set.intersection(*(set(v) for v in vals.values()))
            if len(seeds) < 1:
                continue

            def per_seed(
                weights: dict[str, float], vals: dict[str, dict[Any, float]] = vals, seeds: set[Any] = seeds
            ) -> dict[Any, float]:
                return {s: sum(w * vals[k][s] for k, w in weights.items()) for s in sorted(seeds)}

            def terms(weights: dict[str, float], arms: dict[str, list[str]] = arms) -> list[tuple[str, list[str], float]]:
                return [(target, arms[k], w) for k, w in weights.items()]

            w_pair, w_parts = {"pair": 1.0, "base": -1.0}, {a: 1.0, b: 1.0, "base": -2.0}
            w_inter = {"pair": 1.0, a: -1.0, b: -1.0, "base": 1.0}
            out.append(
                {
                    "features": [a, b],
                    "arms": arms,
                    "dropped_seeds": sorted(dropped),
                    "pair": effect(answers, terms(w_pair), per_seed(w_pair)),
                    "parts": effect(answers, terms(w_parts), per_seed(w_parts)),
                    "interaction": effect(answers, terms(w_inter), per_seed(w_inter)),
                }
            )
    tests = inference.family([x["interaction"] for x in out], min_effect=min_effect)
    for x, t in zip(out, tests):
        x["test"] = t
        claim = (t or {}).get("claim")
        mean = x["interaction"]["mean"] or 0.0
        costs = mean > 0 if lower_is_better else mean < 0
        x["verdict"] = (
            (SUPER if costs else SUB) if claim == inference.EFFECT else ADDITIVE if claim == inference.EQUIVALENT else UNRESOLVED
        )
    return out


def versus_baseline(df: pd.DataFrame, target: str, short_ctx: int, answers: Answers | None = None) -> list[dict[str, Any]]:
    """Every architecture's effect against the baseline with the same confounds (``arm − base`` on the
    target, paired by seed, from the answers where they cover it), seeds where either did not master
    their own length left out: the per-architecture table's column."""
    found = _usable_cells(df, target, short_ctx, 2)
    if found is None:
        return []
    d, bad, c = found
    out = []
    for base in _baselines(c):
        for _, arm in c.iterrows():
            on = {f for f in FEATURES if arm[f"f_{f}"]}
            cell = _cell_of(c, on, base) if on else None
            if cell is None or list(cell["runs"]) != list(arm["runs"]):
                continue
            runs, base_runs = list(arm["runs"]), list(base["runs"])
            involved = d["run"].isin(runs + base_runs)
            dropped = {seed_key(s) for s in seeds_of(d)[involved & d["run"].isin(bad)]}
            a = {s: v for s, v in by_seed(d, runs, d[target]).items() if s not in dropped}
            b = {s: v for s, v in by_seed(d, base_runs, d[target]).items() if s not in dropped}
            per_seed = {s: a[s] - b[s] for s in sorted(set(a) & set(b))}
            if per_seed:
                est = effect(answers, [(target, runs, 1.0), (target, base_runs, -1.0)], per_seed)
                out.append({"runs": runs, "features": sorted(on), "effect": est})
    return out
