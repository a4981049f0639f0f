"""What a pool at this scale resolves: the short table of the report's verdict (each feature and the
compound pair beside the paper's effect), the untrained rung as its own finding, the compounding
test, the headroom rule and the calibration of the scored task, and the report's markdown summary.

Everything is laid out from the analysis's results (:class:`archpool.analysis.results.ReportData`) and the
pool's calibration record; nothing here computes a statistic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from archpool.analysis.results import (
    BELOW,
    CANNOT_RESOLVE,
    CEILING,
    CONTRADICTS,
    FEATURE_NAMES,
    NO_LARGER,
    REPRODUCES,
    SMALLER,
    AxisVerdict,
    ReportData,
    TransferCell,
    fmt,
    fmt_ci,
    target_label,
)
from archpool.report import transfer
from archpool.report.tables import mean_ci_text

RESOLVES = {
    REPRODUCES: "reproduces the paper's sign",
    CONTRADICTS: "contradicts the paper's sign",
    NO_LARGER: "no effect larger than ±X",
    SMALLER: "rules out the paper's relative size",
    BELOW: "beyond noise, smaller than ±X",
    CEILING: "cannot resolve: at the ceiling",
    CANNOT_RESOLVE: "cannot resolve",
}
COMPOUND_WORDS = {
    "super-additive": "costs more than the sum of its parts",
    "sub-additive": "costs less than the sum of its parts",
    "additive": "adds up: no interaction larger than ±X",
    "not resolved": "cannot resolve the interaction",
}
PAPER_COMPOUND = "SWA −1.1 HELMET points without GQA, about −9 with it (7B, HELMET@32K)"


def _verdict_words(c: TransferCell) -> str:
    words = RESOLVES[c.verdict].replace("X", f"{c.min_effect:g}")
    if c.verdict == NO_LARGER and c.paper_relative is not None and c.relative is not None:
        words += " (so smaller than the paper's relative size)" if abs(c.paper_relative) > c.min_effect else ""
    if c.verdict == CANNOT_RESOLVE:
        words += transfer.unresolved_note([c])
    return words


def resolves_table(data: ReportData) -> pd.DataFrame:
    """Per feature at the target's multiple: the paper's 7B effect, this pool's with its interval, and
    what the pool can say; then each compound pair's interaction beside the paper's compounding."""
    rows = []
    for c in data.transfer:
        if c.multiple != data.target_multiple:
            continue
        rows.append(
            {
                "feature": FEATURE_NAMES[c.feature],
                "paper, 7B": (
                    f"{c.paper_points:+.1f} HELMET points ({c.paper_relative:+.0%})"
                    if c.paper_points is not None and c.paper_relative is not None
                    else "—"
                ),
                "this pool": f"{fmt(c.effect)} {fmt_ci(c.ci95)}".strip()
                + (f" ({c.relative:+.0%})" if c.relative is not None else ""),
                "what this scale resolves": _verdict_words(c),
            }
        )
    x = data.min_effect
    for comp in data.analysis.get("compounding") or []:
        names = " + ".join(FEATURE_NAMES[f] for f in comp["features"])
        i = comp["interaction"]
        rows.append(
            {
                "feature": f"{names}: pair − sum of its parts",
                "paper, 7B": PAPER_COMPOUND if set(comp["features"]) == {"gqa", "swa"} else "—",
                "this pool": f"{fmt(i['mean'])} {fmt_ci(i['ci95'])}".strip(),
                "what this scale resolves": COMPOUND_WORDS[comp["verdict"]].replace("X", f"{x:g}"),
            }
        )
    return pd.DataFrame(rows)


def compounding_table(r: Mapping[str, Any]) -> pd.DataFrame:
    """Each pair of features: its effect, the sum of its parts, their difference (mean [95% CI]), p."""
    rows = []
    for comp in r.get("compounding") or []:
        t = comp.get("test") or {}
        rows.append(
            {
                "pair": " + ".join(FEATURE_NAMES[f] for f in comp["features"]),
                "seeds": comp["interaction"]["n"],
                "pair − baseline": mean_ci_text(comp["pair"]),
                "sum of the single effects": mean_ci_text(comp["parts"]),
                "interaction (pair − sum)": mean_ci_text(comp["interaction"]),
                "p_holm": t.get("p_holm"),
                "p_equivalent_holm": t.get("p_equivalent_holm"),
                "verdict": comp["verdict"],
            }
        )
    return pd.DataFrame(rows)


def rung_zero_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "axis": FEATURE_NAMES.get(x["feature"], x["feature"]),
                "baseline": x["base_mean"],
                "effect": mean_ci_text(x["effect"]),
                "p_holm": x["test"].get("p_holm"),
                "claim": x["test"].get("claim"),
            }
            for x in rows
        ]
    )


def headroom_words(h: Mapping[str, Any] | None) -> str | None:
    """The headroom rule's verdict on the pool's target, in one sentence."""
    if not h:
        return None
    lo, hi = h["window"]
    state = "holds" if h["ok"] else "does not hold"
    return (
        f"Headroom rule {state} at the target ({h['target']}): {h['words']} (the rule: the baseline between {lo:g} and "
        f"{hi:g}, every run mastering the task at its own length)."
    )


def calibration_words(cal: Mapping[str, Any] | None) -> list[str]:
    """Why the scored point of the task's difficulty knob: the rule's choice beside the pool's."""
    if not cal:
        return []
    lo, hi = cal["window"]
    knob, chosen, scored = cal["knob"], cal.get("chosen"), cal.get("scored")
    passing = [p["value"] for p in cal["points"] if p.get("ok")]
    lines = [
        f"The scored task ({cal['task']}) was measured on this pool's own checkpoints at {knob} = "
        f"{', '.join(str(p['value']) for p in cal['points'])}: the baseline's {cal['column']} at the target's rung, "
        f"and every run's mastery of each variant at its own length before extension. The rule keeps the points where "
        f"the baseline lies in [{lo:g}, {hi:g}] and every run masters the variant "
        f"({', '.join(map(str, passing)) or 'none'}) and picks the one closest to {(lo + hi) / 2:g}."
    ]
    if chosen is None:
        lines.append(
            f"No point passes: this task cannot show a cost at this scale and budget. The pool scores {knob} = {scored}."
        )
    elif cal.get("agrees"):
        lines.append(f"It picks {knob} = {chosen}, the point this pool scores.")
    else:
        lines.append(
            f"It picks {knob} = {chosen}; this pool scores {knob} = {scored}, so its target is not the calibrated point "
            f"(set eval.task_params.{cal['task']}.{knob}: {chosen} to score it)."
        )
    for p in cal["points"]:
        mean = "—" if p["baseline_mean"] is None else f"{p['baseline_mean']:.3f}"
        lines.append(f"{knob} = {p['value']}: baseline {mean}; {p['words']}.")
    return lines


def summary_markdown(
    r: Mapping[str, Any], verdicts: Sequence[AxisVerdict], resolves: pd.DataFrame, headline: Sequence[str]
) -> str:
    """The report's short summary as markdown (the verdict's lines, its table and what this scale
    resolves), for a README or a lab notebook: made from the run, never copied by hand."""
    lines = [f"Target `{r['target']}`; {r['n']} runs.", ""]
    lines += [f"- {h}" for h in headline]
    lines += ["", "| axis | after extension (95% CI) | what the tests say | MDE | before, own length | extension-only (DiD) |"]
    lines.append("|---|---:|---|---:|---:|---:|")
    for v in verdicts:
        lines.append(
            f"| {v.name} | {fmt(v.after)} {fmt_ci(v.after_ci)} | {v.claim} | "
            f"{'±' + format(v.mde, '.3f') if v.mde is not None else '—'} | {fmt(v.before)} | {fmt(v.did)} {fmt_ci(v.did_ci)} |"
        )
    if len(resolves):
        lines += ["", "| " + " | ".join(resolves.columns) + " |", "|" + "---|" * len(resolves.columns)]
        lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in resolves.itertuples(index=False)]
    return "\n".join(lines) + "\n"


WHO = {
    "pool": "this pool's target",
    "feature_count": "the feature count (no compute)",
    "short_context": "short-context predictor",
}


def agreement_table(a: Mapping[str, Any]) -> pd.DataFrame:
    """One row per paper column and ranking: ρ, τ and pairwise accuracy with their intervals."""
    rows = []
    for col, entry in a["columns"].items():
        for who in ("pool", "feature_count", "short_context"):
            x = entry.get(who)
            if not x:
                continue
            name = target_label(a) if who == "pool" else WHO[who] + (f" ({a['short_context']})" if who == "short_context" else "")
            rows.append(
                {
                    "paper column": col.removeprefix("paper_"),
                    "ranked by": name,
                    "architectures": x["n_archs"],
                    "Spearman ρ": _stat(x, "rho"),
                    "Kendall τ": _stat(x, "tau"),
                    "pairs ordered as the paper": _stat(x, "pairwise"),
                }
            )
    return pd.DataFrame(rows)


def _stat(x: Mapping[str, Any], k: str) -> str:
    v, ci = x.get(k), x.get(f"{k}_ci95") or [None, None]
    if v is None:
        return "—"
    return f"{v:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci[0] is not None else "")


def agreement_words(a: Mapping[str, Any]) -> list[str]:
    """The agreement in sentences: the pool's ρ beside the feature count's, per paper column."""
    lines = [
        "Per architecture, the pool's target (mean over its seeds), the feature count and a short-context measurement "
        "taken before extension, each ranked against the paper's published 7B scores: Spearman's ρ, Kendall's τ and the "
        "share of architecture pairs ordered as the paper orders them, with 95% bootstrap intervals over architectures "
        "and seeds. The feature count is the zero-compute screen; the pool is worth its compute where its ρ exceeds it."
    ]
    for col, entry in a["columns"].items():
        pool, count = entry.get("pool") or {}, entry.get("feature_count") or {}
        lines.append(
            f"{col.removeprefix('paper_')}: {target_label(a)} ranks {pool.get('n_archs', 0)} architectures with ρ {_stat(pool, 'rho')} "
            f"(pairs {_stat(pool, 'pairwise')}); the feature count ρ {_stat(count, 'rho')}."
        )
    if a.get("not_mastered"):
        lines.append("Left out, as they did not master their own length: " + ", ".join(a["not_mastered"]) + ".")
    return lines
