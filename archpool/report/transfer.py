"""The transfer table in words: per axis, where this pool reproduces, contradicts, rules out or cannot
resolve the paper's effect (the cells are :class:`archpool.analysis.results.TransferCell`, made by
:mod:`archpool.analysis.transfer`).
"""

from __future__ import annotations

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
from archpool.axes import FEATURE_NAMES


def unresolved_note(cells: list[TransferCell]) -> str:
    """Why unresolved cells are: an interval that excludes 0 only before Holm's correction, else the
    effect the design would detect."""
    if any(c.ci95[0] is not None and c.ci95[1] is not None and (c.ci95[0] > 0 or c.ci95[1] < 0) for c in cells):
        return " (its 95% interval excludes 0, but not after Holm's correction over the table)"
    mdes = [c.mde for c in cells if c.mde is not None]
    return f" (an effect of ±{max(mdes):.3f} would be detected with 80% power)" if mdes else ""


def statements(cells: list[TransferCell]) -> list[str]:
    """Per axis one plain sentence: where the pool reproduces, contradicts, rules out or cannot resolve the paper."""
    lines = []
    for feature in dict.fromkeys(c.feature for c in cells):
        mine = [c for c in cells if c.feature == feature]
        parts = []
        for kind in (REPRODUCES, CONTRADICTS, NO_LARGER, SMALLER, BELOW, CEILING, CANNOT_RESOLVE):
            at = [c for c in mine if c.verdict == kind]
            if not at:
                continue
            where = ", ".join(f"{c.multiple}×" for c in at)
            x = at[0].min_effect
            if kind == CANNOT_RESOLVE:
                parts.append(f"cannot resolve it at {where}{unresolved_note(at)}")
            elif kind == NO_LARGER:
                parts.append(f"finds no effect larger than ±{x:g} at {where}")
            elif kind == SMALLER:
                parts.append(f"rules out an effect of the paper's relative size at {where}")
            elif kind == BELOW:
                parts.append(f"finds an effect beyond noise but smaller than ±{x:g} at {where}")
            elif kind == CEILING:
                parts.append(f"cannot show a cost at {where}, where the baseline and the arm are at the ceiling")
            else:
                parts.append(f"{kind} the paper's sign at {where}")
        lines.append(f"{FEATURE_NAMES[feature]}: this pool " + "; ".join(parts) + ".")
    return lines
