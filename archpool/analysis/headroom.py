"""The headroom rule: a scored task can show a cost only where the baseline is neither at the ceiling nor
near chance, and only on a task every arm has learned (docs/extensibility.md, "Headroom").

A pool's target passes when (1) the baseline's mean at the target lies inside ``window`` (default
[0.40, 0.90]: room for a cost of the paper's relative size and for a gain) and (2) every run masters the
scored task at its own pretraining length before extension (:mod:`archpool.analysis.mastery`: accuracy
and every distance bucket at least 0.90). Calibrating a task's difficulty applies the same rule to each
point of a difficulty knob and picks, among the points that pass, the one whose baseline mean is closest
to the window's centre: a rule on the baseline and on mastery only, never on an arm's difference. The
rule is a window on an accuracy: a target that is not one (a log-probability, a perplexity) gets none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis.mastery import MASTERY_THRESHOLD, mastery_frame, mastery_metric
from archpool.columns import is_accuracy
from archpool.study import HEADROOM as WINDOW


def baseline_runs(df: pd.DataFrame) -> list[str]:
    """The runs with none of the four features on (the pool's baseline arm)."""
    from archpool.analysis.table import default_short_ctx, features

    f = features(df, default_short_ctx(df))
    return list(df.loc[f["feature_count"] == 0, "run"])


def rule(baseline: Sequence[float], mastered: Mapping[str, bool | None], window: tuple[float, float] = WINDOW) -> dict[str, Any]:
    """The rule on the baseline's values at the target (one per seed) and every run's mastery (True /
    False / None when not judged): ``ok``, ``in_window``, ``all_mastered`` and the words."""
    values = [float(v) for v in baseline if v is not None and np.isfinite(v)]
    mean = float(np.mean(values)) if values else None
    lo, hi = window
    inside = mean is not None and lo <= mean <= hi
    not_mastered = sorted(r for r, m in mastered.items() if m is False)
    unjudged = sorted(r for r, m in mastered.items() if m is None)
    all_mastered = not not_mastered and not unjudged and bool(mastered)
    if mean is None:
        where = "the baseline has no value at the target"
    elif mean > hi:
        where = f"the baseline's {mean:.3f} is above {hi:g}: too near the ceiling for a cost to show"
    elif mean < lo:
        where = f"the baseline's {mean:.3f} is below {lo:g}: too near chance to learn what the task measures"
    else:
        where = f"the baseline's {mean:.3f} lies in [{lo:g}, {hi:g}]"
    if not_mastered:
        learned = f"{len(not_mastered)} run(s) did not master the task at their own length ({', '.join(not_mastered[:4])})"
    elif unjudged:
        learned = f"mastery was not measured for {', '.join(unjudged[:4])}"
    else:
        learned = "every run masters the task at its own length"
    return {
        "ok": bool(inside and all_mastered),
        "baseline_mean": mean,
        "baseline_n": len(values),
        "window": [lo, hi],
        "in_window": bool(inside),
        "all_mastered": all_mastered,
        "not_mastered": not_mastered,
        "words": f"{where}; {learned}",
    }


def check(
    df: pd.DataFrame, target: str, window: tuple[float, float] = WINDOW, threshold: float = MASTERY_THRESHOLD
) -> dict[str, Any] | None:
    """The rule on a results table: the baseline's values at ``target`` and every run's mastery of the
    target's task; None when the table has no baseline or the target is not one of its columns."""
    if target not in df.columns or not is_accuracy(target):
        return None  # a window on an accuracy: a log-probability or a perplexity has no such scale
    d = df[df["state"] != "failed"] if "state" in df.columns else df
    base = baseline_runs(d)
    if not base:
        return None
    metric = mastery_metric(target, d.columns)
    mf = mastery_frame(d, metric, threshold) if metric else None
    mastered = {
        r: (None if mf is None or pd.isna(mf.at[i, "mastered"]) else bool(mf.at[i, "mastered"]))
        for i, r in zip(d.index, d["run"])
    }
    values = pd.to_numeric(d.loc[d["run"].isin(base), target], errors="coerce").dropna()
    return {"target": target, "mastery_metric": metric, **rule(list(values), mastered, window)}


def choose(points: Sequence[dict[str, Any]], window: tuple[float, float] = WINDOW) -> dict[str, Any] | None:
    """The calibration's choice among ``points`` (each with ``value`` and its rule result): of those that
    pass, the one whose baseline mean is closest to the window's centre (ties: the first); None when
    none passes."""
    centre = sum(window) / 2
    passing = [p for p in points if p.get("ok")]
    return min(passing, key=lambda p: abs(p["baseline_mean"] - centre)) if passing else None
