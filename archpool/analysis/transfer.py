"""The transfer table: per axis, this pool's effect after extension at 1×, 2×, 4× and 8× the pretraining
context beside the paper's 7B effect at the same multiples, each relative to its baseline, and what the
pool can say about the paper's effect there.

Every cell is the effect on the target's metric at that length and at the target's rung
(:mod:`archpool.analysis.extension`), estimated from the scored answers when the pool has them. The cells of
the table form one family: their tests, and their equivalence tests, are Holm-corrected together
(:mod:`archpool.analysis.inference`). A cell *reproduces* the paper when its corrected test rejects no
effect, the effect is at least the smallest effect of interest and its sign (higher-is-better) matches the
paper's; it *contradicts* it when the sign is opposite. Otherwise it is *at the ceiling* when it is an
accuracy on which the baseline and the arm are both within the smallest effect of interest of 1 (both have
solved the task there, so no difference can show, whatever the architecture would cost on a harder task);
*no effect larger than X* when the equivalence test against the smallest effect of interest rejects; *smaller
than the paper's* when the equivalence test against the paper's relative size (times this pool's baseline)
rejects; *beyond noise, below X* for a real effect smaller than the smallest of interest; and *cannot
resolve* it otherwise: the smallest effect the design detects there (MDE, at the family's strictest
level) says how large an effect could still hide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from archpool.analysis import crossed, inference, paper
from archpool.analysis.results import (
    BELOW,
    CANNOT_RESOLVE,
    CEILING,
    CONTRADICTS,
    NO_LARGER,
    REPRODUCES,
    SMALLER,
    TransferCell,
)
from archpool.axes import FEATURES
from archpool.columns import ColumnKey, lower_is_better, rung_label, split_rung

MULTIPLES = (1, 2, 4, 8)


def min_effect_of(r: Mapping[str, Any]) -> float:
    """The smallest effect of interest the analysis ``r`` was made with."""
    return float((r.get("inference") or {}).get("min_effect") or inference.MIN_EFFECT)


def transfer_cells(r: Mapping[str, Any], long_ctx: int | None) -> list[TransferCell]:
    """The table's cells, axes in the paper's order, from an :func:`archpool.analysis.analyze` result."""
    min_effect = min_effect_of(r)
    ext = r.get("extension_effects") or {}
    if not ext or not long_ctx:
        return []
    rung = split_rung(r["target"])[1]
    sign = -1.0 if lower_is_better(r["target"]) else 1.0
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for feature in FEATURES:
        for a in (x for x in ext.get("axes", []) if x["feature"] == feature):
            for x in a["effects"]:
                multiple = x["length"] / long_ctx
                if x["rung"] == rung and multiple in MULTIPLES and x["post"]["mean"] is not None:
                    rows.append((feature, int(multiple), x))
            break  # the first arm of an axis (a pool's main single-feature arm)
    tests = inference.family([x["post"] for _, _, x in rows], min_effect=min_effect)
    paper_equivalent = inference.holm([_paper_tost(feature, multiple, x) for feature, multiple, x in rows])
    out = []
    for (feature, multiple, x), t, eq in zip(rows, tests, paper_equivalent):
        t = t or {}
        effect = x["post"]["mean"]
        base = x.get("base_mean")
        points = paper.single_feature_delta(feature, multiple)
        paper_base = paper.baseline_score(multiple)
        paper_rel = points / paper_base if points is not None and paper_base else None
        claim = t.get("claim", inference.UNTESTED)
        if points is None or points == 0:
            verdict = CANNOT_RESOLVE
        elif claim == inference.EFFECT:
            verdict = REPRODUCES if (sign * effect > 0) == (points > 0) else CONTRADICTS
        elif at_ceiling(x["column"], base, effect, min_effect):
            verdict = CEILING
        elif claim == inference.EQUIVALENT:
            verdict = NO_LARGER
        elif eq is not None and eq < inference.ALPHA:
            verdict = SMALLER
        elif claim == inference.BELOW_INTEREST:
            verdict = BELOW
        else:
            verdict = CANNOT_RESOLVE
        out.append(
            TransferCell(
                feature=feature,
                multiple=multiple,
                length=x["length"],
                column=x["column"],
                n=x["post"]["n"],
                effect=effect,
                ci95=tuple(x["post"]["ci95"]),
                relative=effect / base if base else None,
                p_holm=t.get("p_holm"),
                p_equivalent_holm=t.get("p_equivalent_holm"),
                claim=claim,
                mde=t.get("mde"),
                min_effect=min_effect,
                paper_points=points,
                paper_relative=paper_rel,
                verdict=verdict,
            )
        )
    return out


def _paper_tost(feature: str, multiple: int, x: dict[str, Any]) -> float | None:
    """The equivalence test of a cell's effect against the paper's relative effect at that multiple times
    this pool's baseline (None without the paper's number, the baseline or a standard error)."""
    points, paper_base = paper.single_feature_delta(feature, multiple), paper.baseline_score(multiple)
    base = x.get("base_mean")
    if not points or not paper_base or not base:
        return None
    _, se, df = inference.test_of(x["post"])
    return crossed.tost(x["post"]["mean"], se, df, abs(points / paper_base * base))


def at_ceiling(column: str, base: float | None, effect: float | None, gap: float = inference.MIN_EFFECT) -> bool:
    """An accuracy where the baseline and the arm are both within ``gap`` (the smallest effect of interest)
    of 1: neither can show a difference there."""
    if "_acc" not in column or base is None or effect is None:
        return False
    return min(base, base + effect) >= 1 - gap


def rung_zero(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per axis the effect at the target's length and distance filter after the RoPE change alone (the
    ladder's rung 0, zero-shot extensibility), tested as a family of its own: never mixed into the
    primary target."""
    key = ColumnKey.parse(r["target"])
    ext = r.get("extension_effects") or {}
    if key is None or not key.rung or key.rung == rung_label(0):
        return []
    column = key.but(rung=rung_label(0)).format()
    rows = []
    for a in ext.get("axes") or []:
        x = next((x for x in a["effects"] if x["column"] == column), None)
        if x is not None and x["post"]["mean"] is not None:
            rows.append({"feature": a["feature"], "column": column, "effect": x["post"], "base_mean": x.get("base_mean")})
    for row, t in zip(rows, inference.family([x["effect"] for x in rows], min_effect=min_effect_of(r))):
        row["test"] = t or {}
    return rows
