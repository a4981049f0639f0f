"""Matched-pair effects, interactions and the noise floor (seed and init spread).

A *cell* is a configuration: the five design axes plus ``n_heads`` and the confounds that must match
(``init``, ``fp8``, ``n_layers`` when present); runs in one cell differ only in seed (or are repeats).
A *pair* is two cells that differ in exactly one axis — or in ``qk_norm`` and ``norm`` together, the
paper's "remove QK-norm from Olmo" lever, reported as axis ``qk_norm+norm``. Its effect is
``mean(to) − mean(from)``, oriented from the feature-off side (no SWA, no / layerwise QK-norm, pre-norm,
more KV heads, longer pretraining context) to the feature-on side.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis.table import MATCH_CONFOUNDS, features
from archpool.axes import AXES, AXIS, FEATURES, GQA, NORM, QK_NORM, SWA

QK_NORM_AND_NORM = f"{QK_NORM}+{NORM}"  # the two axes of the "remove QK-norm from Olmo" lever, as one
STRESSED = (SWA, GQA)  # the paper's compounding: SWA costs little without GQA, much with it


def _f(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def cells(df: pd.DataFrame, target: str, short_ctx: int, match: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per configuration: its key columns, count features (``f_<feature>``), runs, n, mean and sd."""
    key = [*AXES, "n_heads", *[c for c in (*MATCH_CONFOUNDS, *match) if c in df.columns and c not in AXES]]
    key = list(dict.fromkeys(key))
    d = pd.concat([df, features(df, short_ctx).add_prefix("f_")], axis=1)
    rows = []
    for values, g in d.groupby(key, sort=True, dropna=False):
        y = g[target].astype(float)
        row = dict(zip(key, values))
        row.update({f"f_{f}": int(g[f"f_{f}"].iloc[0]) for f in FEATURES})
        row.update(runs=list(g["run"]), n=len(g), mean=float(y.mean()), sd=float(y.std(ddof=1)) if len(g) > 1 else float("nan"))
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["key"] = key
    return out


def arch_labels(df: pd.DataFrame) -> list[str]:
    """An architecture per run: the ``arch`` column where every run has one, else its configuration
    (the design axes, head count and the confounds that must match): runs with the same label differ
    only in seed."""
    if "arch" in df.columns and df["arch"].astype(str).str.strip().ne("").all():
        return [str(a) for a in df["arch"]]
    key = [c for c in dict.fromkeys([*AXES, "n_heads", *MATCH_CONFOUNDS]) if c in df.columns]
    return ["/".join(str(v) for v in row) for row in df[key].itertuples(index=False)]


def pooled_sd(groups: list[np.ndarray]) -> tuple[float | None, int]:
    """Pooled within-group standard deviation and its degrees of freedom (groups of size ≥ 2)."""
    groups = [g for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return None, 0
    return _f(math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)), dof


def spread(df: pd.DataFrame, target: str, c: pd.DataFrame) -> dict[str, Any]:
    """Seed spread (runs of one cell) and init spread (cells that differ only in ``init``)."""
    groups = [df.loc[df["run"].isin(r), target].to_numpy(float) for r in c["runs"]]
    seed_sd, seed_df = pooled_sd(groups)
    out = {"seed_sd": seed_sd, "seed_df": seed_df, "replicated_configs": int(sum(len(g) > 1 for g in groups))}
    if "init" in c.columns:
        others = [k for k in c.attrs["key"] if k != "init"]
        by = [g["mean"].to_numpy(float) for _, g in c.groupby(others, dropna=False)]
        out["init_sd"], out["init_df"] = pooled_sd(by)
    return out


def _orient(axis: str, a: pd.Series, b: pd.Series) -> bool:
    """True when ``a`` is the feature-off ("from") side of the pair (the lever: by its QK-norm)."""
    spec = AXIS[QK_NORM if axis == QK_NORM_AND_NORM else axis]
    return bool(spec.rank(a[spec.name]) < spec.rank(b[spec.name]))


def _label(axis: str, r: pd.Series) -> str:
    if axis == QK_NORM_AND_NORM:
        return f"{r[QK_NORM]}/{r[NORM]}"
    return str(r[axis] if AXIS[axis].categorical else int(r[axis]))


def pairs(c: pd.DataFrame, seed_sd: float | None) -> list[dict[str, Any]]:
    """Every pair of cells that differs in exactly one axis (see the module docstring)."""
    fixed = [k for k in c.attrs["key"] if k not in AXES]
    out = []
    for i, j in itertools.combinations(range(len(c)), 2):
        a, b = c.iloc[i], c.iloc[j]
        if any(a[k] != b[k] and not (pd.isna(a[k]) and pd.isna(b[k])) for k in fixed):
            continue
        diff = [k for k in AXES if a[k] != b[k]]
        if len(diff) == 1:
            axis = diff[0]
        elif set(diff) == {QK_NORM, NORM}:
            axis = QK_NORM_AND_NORM
        else:
            continue
        if not _orient(axis, a, b):
            a, b = b, a
        flipped = [f for f in FEATURES if a[f"f_{f}"] != b[f"f_{f}"]]
        effect = b["mean"] - a["mean"]
        out.append(
            {
                "axis": axis,
                "from": _label(axis, a),
                "to": _label(axis, b),
                "feature": flipped[0] if len(flipped) == 1 else None,
                "context": {f: int(a[f"f_{f}"]) for f in FEATURES if f not in flipped},
                "runs_from": list(a["runs"]),
                "runs_to": list(b["runs"]),
                "n_from": int(a["n"]),
                "n_to": int(b["n"]),
                "mean_from": _f(a["mean"]),
                "mean_to": _f(b["mean"]),
                "effect": _f(effect),
                "seed_sd": seed_sd,
                "below_seed_sd": bool(seed_sd is not None and abs(effect) < seed_sd),
            }
        )
    return out


def summarise(effects: list[float], seed_sd: float | None, **fields: Any) -> dict[str, Any]:
    """Mean, sd and range of a set of pair effects, next to the seed sd (flagged when smaller)."""
    e = np.asarray(effects, float)
    mean = _f(e.mean()) if len(e) else None
    return {
        **fields,
        "n": len(e),
        "mean": mean,
        "sd": _f(e.std(ddof=1)) if len(e) > 1 else None,
        "min": _f(e.min()) if len(e) else None,
        "max": _f(e.max()) if len(e) else None,
        "seed_sd": seed_sd,
        "below_seed_sd": bool(mean is not None and seed_sd is not None and abs(mean) < seed_sd),
    }


def axis_effects(ps: list[dict[str, Any]], seed_sd: float | None) -> list[dict[str, Any]]:
    """Pair effects grouped by (axis, from, to)."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for p in ps:
        groups.setdefault((p["axis"], p["from"], p["to"]), []).append(p["effect"])
    return [summarise(v, seed_sd, axis=k[0], **{"from": k[1], "to": k[2]}) for k, v in sorted(groups.items())]


def feature_effects(ps: list[dict[str, Any]], seed_sd: float | None) -> list[dict[str, Any]]:
    """Pair effects grouped by the count feature they switch on (all pairs that change the count by one)."""
    return [
        summarise([p["effect"] for p in ps if p["feature"] == f], seed_sd, feature=f)
        for f in FEATURES
        if any(p["feature"] == f for p in ps)
    ]


def interactions(ps: list[dict[str, Any]], seed_sd: float | None) -> list[dict[str, Any]]:
    """Effect of feature A with vs without feature B, from the pairs switching A; the paper's SWA × GQA first."""
    out = []
    combos = [STRESSED] + [(a, b) for a, b in itertools.permutations(FEATURES, 2) if (a, b) != STRESSED]
    for a, b in combos:
        sel = [p for p in ps if p["feature"] == a and b in p["context"]]
        if not sel:
            continue
        with_ = summarise([p["effect"] for p in sel if p["context"][b] == 1], seed_sd)
        without = summarise([p["effect"] for p in sel if p["context"][b] == 0], seed_sd)
        diff = (with_["mean"] - without["mean"]) if with_["n"] and without["n"] else None
        out.append(
            {
                "effect_of": a,
                "given": b,
                "stressed": (a, b) == STRESSED,
                "with": with_["mean"],
                "n_with": with_["n"],
                "sd_with": with_["sd"],
                "without": without["mean"],
                "n_without": without["n"],
                "sd_without": without["sd"],
                "difference": _f(diff) if diff is not None else None,
                "seed_sd": seed_sd,
                "below_seed_sd": bool(diff is not None and seed_sd is not None and abs(diff) < seed_sd),
            }
        )
    return out
