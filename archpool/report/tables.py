"""Tables for the page: human headers, one precision per kind of number, and the tables laid out as text
(effects as ``mean [95% CI]``) from the analysis's results.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis.results import TransferCell, fmt, fmt_ci
from archpool.axes import FEATURE_NAMES


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, (bool, np.bool_))


HEADERS = {
    "run": "Run",
    "arm": "Architecture",
    "arch": "Architecture",
    "n": "n",
    "r2": "R²",
    "loo_r2": "Leave-one-architecture-out R²",
    "n_groups": "Architectures",
    "p_equivalent_holm": "Equivalence p, Holm-corrected",
    "coef": "Coefficient",
    "se": "SE",
    "ci95_lo": "95% CI low",
    "ci95_hi": "95% CI high",
    "p": "p",
    "p_holm": "p, Holm-corrected",
    "mde": "Detectable (MDE)",
    "multiple": "× pretraining context",
    "kind": "Kind",
    "phase": "Measured",
    "note": "Note",
    "predictor": "Predictor",
    "pre-extension predictor": "Predictor (before extension)",
    "model": "Model",
    "term": "Term",
    "mastery_acc": "Accuracy at own length",
    "mastered": "Mastered",
    "mastered_wilson_lo": "Mastered, Wilson 95% low",
    "mastered_wilson_hi": "Mastered, Wilson 95% high",
    "metric": "Metric",
    "axis": "Axis",
    "effect": "Effect",
    "seeds": "Seeds",
    "seed_sd": "Seed sd",
    "above_seed_noise": "Beyond seed noise",
    "vs_paper": "Direction vs paper",
    "recipe": "Recipe",
    "closed_fraction": "Share of the gap closed",
    "reason": "Reason",
    "length": "Length",
    "rung": "Rung",
    "column": "Column",
    "effect_of": "Effect of",
    "given": "Given",
    "n_with": "n with",
    "n_without": "n without",
    "with": "With",
    "without": "Without",
    "difference": "Difference",
    "target": "Target, mean",
    "runs": "Runs",
    "pretrain_loss": "Pretraining loss",
}
R2_COLUMNS = {"r2", "loo_r2", "residualised_r2", "closed_fraction"}


def _header(c: str) -> str:
    if c in HEADERS:
        return HEADERS[c]
    for suffix, words in (("_ci95_lo", " 95% CI low"), ("_ci95_hi", " 95% CI high"), ("_sd", " seed sd"), ("_n", " n")):
        if c.endswith(suffix):
            return _header(c[: -len(suffix)]) + words
    return c.replace("_", " ").capitalize()


def cell_text(column: str, v: Any) -> str:
    """One precision per kind: R² two decimals, p-values two significant digits, everything else three decimals."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}" if abs(int(v)) >= 10000 else str(int(v))
    if isinstance(v, numbers.Real):
        x = float(v)
        if column in ("p", "p_holm"):
            return "<0.001" if x < 0.001 else f"{x:.2g}"
        if column in R2_COLUMNS:
            return f"{x:.2f}"
        if x.is_integer() and abs(x) < 1e6 and (column in ("n", "seed", "length", "seeds", "runs") or column.endswith("_n")):
            return str(int(x))
        return f"{x:.1f}" if abs(x) >= 100 else f"{x:.3f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(cell_text(column, x) for x in v)
    return str(v)


def present(df: pd.DataFrame, title: str = "", collapsed: bool = False, flag: str | None = None) -> dict[str, Any]:
    """A table for the template: human headers, consistent precision, flagged rows."""
    rows = []
    for _, r in df.iterrows():
        cells = [{"text": cell_text(c, r[c]), "num": _is_number(r[c])} for c in df.columns if c != flag]
        rows.append({"cells": cells, "flag": bool(flag and r.get(flag))})
    return {"title": title, "collapsed": collapsed, "header": [_header(c) for c in df.columns if c != flag], "rows": rows}


def mean_ci_text(s: Mapping[str, Any] | None) -> str:
    if not s or s.get("mean") is None:
        return "—"
    return f"{fmt(s['mean'])} {fmt_ci(s.get('ci95'))}".strip()


def remedy_table(remedy: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per remedy recipe and arm, each effect as ``mean [CI]`` text."""
    rows = []
    for rec in remedy:
        for a in rec["arms"]:
            rows.append(
                {
                    "recipe": rec["recipe"],
                    "arm": a["arm"],
                    "seeds": (a.get("paired") or {}).get("n"),
                    "change with the treatment": mean_ci_text(a.get("paired")),
                    "gap to the baseline, both untreated": mean_ci_text(a.get("gap_primary")),
                    "gap to the baseline, both treated": mean_ci_text(a.get("gap_recipe"))
                    if a.get("base_treated", True)
                    else "— (baseline not treated)",
                    "closed_fraction": a.get("closed_fraction"),
                    "note": a.get("closed_note", ""),
                }
            )
    return pd.DataFrame(rows)


def transfer_table(cells: Sequence[TransferCell]) -> pd.DataFrame:
    """The transfer cells as a table (effects as text with their CI)."""
    return pd.DataFrame(
        [
            {
                "axis": FEATURE_NAMES[c.feature],
                "multiple": f"{c.multiple}×",
                "seeds": c.n,
                "effect": f"{fmt(c.effect)} {fmt_ci(c.ci95)}".strip(),
                "relative": f"{c.relative:+.0%}" if c.relative is not None else "—",
                "p_holm": c.p_holm,
                "p_equivalent_holm": c.p_equivalent_holm,
                "mde": c.mde,
                "paper (HELMET points)": f"{c.paper_points:+.1f}" if c.paper_points is not None else "—",
                "paper relative": f"{c.paper_relative:+.0%}" if c.paper_relative is not None else "—",
                "this pool": c.verdict,
            }
            for c in cells
        ]
    )


def arch_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-architecture table with its difference to the baseline as ``mean [CI]`` text."""
    if "vs baseline" not in frame:
        return frame
    return frame.assign(**{"vs baseline": [mean_ci_text(v) if isinstance(v, Mapping) else v for v in frame["vs baseline"]]})
