"""The transfer table: per axis, this pool's effect after extension at 1×, 2×, 4× and 8× the pretraining
context beside the paper's 7B effect at the same multiples, each relative to its baseline, and whether
the pool reproduces, contradicts or cannot resolve the paper's sign there.

Every cell is the seed-paired effect on the target's metric at that length and at the target's rung
(:mod:`archpool.analysis.extension`). The cells of the table form one family: their paired t-tests are
Holm-corrected together (:mod:`archpool.analysis.inference`). A cell *reproduces* the paper when its
corrected p is below 0.05 and its sign (higher-is-better) matches the paper's, and *contradicts* it when the
sign is opposite. Otherwise it is *at the ceiling* when it is an accuracy on which the baseline and the arm
are both within 0.01 of 1 (both have solved the task there, so no difference can show, whatever the
architecture would cost on a harder task), *smaller than the paper's* when the 95% interval of its relative effect
lies inside ± the paper's relative effect (an equivalence test: both one-sided tests at 2.5% reject an
effect as large as the paper's), and *cannot resolve* it when it does not; the smallest effect the seeds
detect there (MDE, at the family's strictest level) says how large an effect could still hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archpool.analysis import inference
from archpool.columns import split_rung
from archpool.report import paper
from archpool.report.findings import FEATURE_NAMES, lower_is_better

MULTIPLES = (1, 2, 4, 8)
REPRODUCES, CONTRADICTS, SMALLER, UNRESOLVED = "reproduces", "contradicts", "smaller than the paper's", "cannot resolve"
CEILING = "at the ceiling"
CEILING_GAP = 0.01  # an accuracy whose baseline mean is within this of 1 leaves no room for a gain to show


@dataclass(frozen=True)
class TransferCell:
    """One axis at one multiple of the pretraining context."""

    feature: str
    multiple: int
    length: int
    column: str
    n: int
    effect: float | None
    ci95: tuple[float | None, float | None]
    relative: float | None  # effect / the baseline's mean
    p_holm: float | None
    mde: float | None
    paper_points: float | None
    paper_relative: float | None  # the paper's effect / its baseline's HELMET
    verdict: str


def transfer_cells(r: dict[str, Any], long_ctx: int | None) -> list[TransferCell]:
    """The table's cells, axes in the paper's order, from an :func:`archpool.analysis.analyze` result."""
    ext = r.get("extension_effects") or {}
    if not ext or not long_ctx:
        return []
    rung = split_rung(r["target"])[1]
    sign = -1.0 if lower_is_better(r["target"]) else 1.0
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for feature in ("qk_norm", "gqa", "swa", "short_ctx"):
        for a in (x for x in ext.get("axes", []) if x["feature"] == feature):
            for x in a["effects"]:
                multiple = x["length"] / long_ctx
                if x["rung"] == rung and multiple in MULTIPLES and x["post"]["mean"] is not None:
                    rows.append((feature, int(multiple), x))
            break  # the first arm of an axis (a pool's main single-feature arm)
    tests = inference.family([x["post"] for _, _, x in rows])
    out = []
    for (feature, multiple, x), t in zip(rows, tests):
        t = t or {}
        effect = x["post"]["mean"]
        base = x.get("base_mean")
        points = paper.single_feature_delta(feature, multiple)
        paper_base = paper.baseline_score(multiple)
        significant = t.get("p_holm") is not None and t["p_holm"] < inference.ALPHA
        paper_rel = points / paper_base if points is not None and paper_base else None
        if points is None or points == 0:
            verdict = UNRESOLVED
        elif significant:
            verdict = REPRODUCES if (sign * effect > 0) == (points > 0) else CONTRADICTS
        elif at_ceiling(x["column"], base, effect):
            verdict = CEILING
        elif _inside(x["post"]["ci95"], base, paper_rel):
            verdict = SMALLER
        else:
            verdict = UNRESOLVED
        out.append(
            TransferCell(
                feature=feature,
                multiple=multiple,
                length=x["length"],
                column=x["column"],
                n=x["post"]["n"],
                effect=effect,
                ci95=tuple(x["post"]["ci95"]),  # type: ignore[arg-type]
                relative=effect / base if base else None,
                p_holm=t.get("p_holm"),
                mde=t.get("mde"),
                paper_points=points,
                paper_relative=paper_rel,
                verdict=verdict,
            )
        )
    return out


def at_ceiling(column: str, base: float | None, effect: float | None) -> bool:
    """An accuracy where the baseline and the arm are both within ``CEILING_GAP`` of 1: neither can show a
    difference there."""
    if "_acc" not in column or base is None or effect is None:
        return False
    return min(base, base + effect) >= 1 - CEILING_GAP


def _inside(ci: list | tuple, base: float | None, paper_rel: float | None) -> bool:
    """The relative 95% interval ``ci / base`` lies strictly inside ± ``|paper_rel|``."""
    if not base or paper_rel is None or ci[0] is None or ci[1] is None:
        return False
    bound = abs(paper_rel)
    return -bound < ci[0] / base and ci[1] / base < bound


def statements(cells: list[TransferCell]) -> list[str]:
    """Per axis one plain sentence: where the pool reproduces, contradicts or cannot resolve the paper."""
    lines = []
    for feature in dict.fromkeys(c.feature for c in cells):
        mine = [c for c in cells if c.feature == feature]
        parts = []
        for kind in (REPRODUCES, CONTRADICTS, SMALLER, CEILING, UNRESOLVED):
            at = [c for c in mine if c.verdict == kind]
            if not at:
                continue
            where = ", ".join(f"{c.multiple}×" for c in at)
            if kind == UNRESOLVED:
                mdes = [c.mde for c in at if c.mde is not None]
                hide = f" (effects up to ±{max(mdes):.3f} could hide there)" if mdes else ""
                parts.append(f"cannot resolve it at {where}{hide}")
            elif kind == SMALLER:
                parts.append(f"rules out an effect of the paper's relative size at {where}")
            elif kind == CEILING:
                parts.append(f"cannot show a cost at {where}, where the baseline and the arm are at the ceiling")
            else:
                parts.append(f"{kind} the paper's sign at {where}")
        lines.append(f"{FEATURE_NAMES[feature]}: this pool " + "; ".join(parts) + ".")
    return lines
