"""The verdict in words: a metric id as a phrase, and the headline's lines (one per kind of answer the
tests allow) from the typed verdicts of :mod:`archpool.analysis.results`.
"""

from __future__ import annotations

from archpool.analysis.results import (
    BELOW_INTEREST,
    EFFECT,
    EQUIVALENT,
    UNRESOLVED,
    UNTESTED,
    AxisVerdict,
    fmt,
    fmt_ci,
)
from archpool.columns import LADDER_MEAN, ColumnKey
from archpool.study import MIN_EFFECT


def describe_metric(column: str, long_ctx: int | None = None) -> str:
    """A metric id in words: ``mqar_acc@1024[d>128]#ladder_mean`` → MQAR accuracy at 1,024 tokens (8× …)."""
    key = ColumnKey.parse(column)
    if key is None:
        return column.replace("_", " ")
    words = {
        "mqar_acc": "MQAR retrieval accuracy",
        "mqar_rebind_acc": "MQAR retrieval accuracy with keys bound again",
        "mqar_lp": "MQAR answer log-probability",
    }.get(key.metric, key.metric.replace("_", " "))
    mult = f" ({key.length / long_ctx:g}× the pretraining context)" if long_ctx else ""
    parts = [("before extension: " if key.base else "") + words, f"at {key.length:,} tokens{mult}"]
    if key.filter:
        parts.append(f"for key–query distances {key.filter.replace('d', '').replace('<=', '≤ ')}".replace(">", "> "))
    if key.rung == LADDER_MEAN:
        parts.append("averaged over the extension budgets")
    elif key.rung:
        parts.append(f"after {key.rung.removeprefix('ext')} extension steps")
    return " ".join(parts)


def _listed(vs: list[AxisVerdict]) -> str:
    return "; ".join(f"{v.name} {fmt(v.after)} {fmt_ci(v.after_ci)}".strip() for v in vs)


def headline(verdicts: list[AxisVerdict], target_words: str, basis: str | None = None) -> list[str]:
    """The question, then one line per kind of answer the tests allow (costs first, largest first), the
    ceiling, what was not measured, and what the intervals rest on (``basis``)."""
    measured = [v for v in verdicts if v.after is not None]
    names = [v.name for v in verdicts] or ["the varied axes"]
    axes = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    subject = f"each of {axes}" if len(names) > 1 else axes
    x = verdicts[0].min_effect if verdicts else MIN_EFFECT
    lines = [f"Question: how much does {subject} change {target_words}?"]
    effects = sorted((v for v in measured if v.claim == EFFECT), key=lambda v: -abs(v.after or 0))
    if effects:
        parts = []
        for v in effects:
            when = (
                "already before extension"
                if v.before_present
                else "revealed by extension"
                if v.did_claim == EFFECT
                else "not at the pretraining length; the extension-only share not resolved"
            )
            parts.append(f"{v.name} {fmt(v.after)} {fmt_ci(v.after_ci)} ({when})")
        lines.append(f"Beyond noise and at least ±{x:g} (Holm-corrected over the axes): " + "; ".join(parts) + ".")
    else:
        lines.append(f"No axis changes it beyond noise by at least ±{x:g} in this pool (Holm-corrected over the axes).")
    equivalent = [v for v in measured if v.claim == EQUIVALENT]
    if equivalent:
        lines.append(f"No effect larger than ±{x:g} (equivalence tests): " + _listed(equivalent) + ".")
    small = [v for v in measured if v.claim == BELOW_INTEREST]
    if small:
        lines.append(f"Beyond noise but smaller than ±{x:g}: " + _listed(small) + ".")
    unresolved = [v for v in measured if v.claim == UNRESOLVED]
    if unresolved:
        lines.append(
            "Not resolved after Holm's correction over the axes (95% intervals before it): "
            + ", ".join(
                f"{v.name} {fmt(v.after)} {fmt_ci(v.after_ci)} (detectable: ±{fmt(v.mde, False)})".strip() for v in unresolved
            )
            + "."
        )
    untested = [v.name for v in measured if v.claim == UNTESTED]
    if untested:
        lines.append("Not tested (no spread to test against): " + ", ".join(untested) + ".")
    ceiling = next((v.ceiling for v in verdicts if v.ceiling is not None), None)
    if ceiling is not None:
        lines.append(
            f"The baseline is at the ceiling here ({ceiling:.3f}), and so is every arm marked so in the table: they "
            "solve the task at this length after the extension, so their costs can only show as slower extension or "
            "on a harder task."
        )
    unmeasured = [v.name for v in verdicts if v.after is None]
    if unmeasured:
        lines.append("Not measured: " + ", ".join(unmeasured) + " (see the mastery table).")
    if basis:
        lines.append(f"Intervals and tests rest on {basis}.")
    return lines
