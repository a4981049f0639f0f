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
from archpool.axes import FEATURE_NAMES, GQA, SWA
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
                "paper, 7B": PAPER_COMPOUND if set(comp["features"]) == {GQA, SWA} else "—",
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
    lines += [
        "",
        "| axis | after extension (95% CI) | what the tests say | MDE | before, own length | extension-only (DiD) | carries to 7B? |",
    ]
    lines.append("|---|---:|---|---:|---:|---:|---|")
    for v in verdicts:
        lines.append(
            f"| {v.name} | {fmt(v.after)} {fmt_ci(v.after_ci)} | {v.claim} | "
            f"{'±' + format(v.mde, '.3f') if v.mde is not None else '—'} | {fmt(v.before)} | {fmt(v.did)} {fmt_ci(v.did_ci)} | "
            f"{v.carries or '—'} |"
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
                    **(
                        _beyond(entry)
                        if who == "pool"
                        else {"ρ given the count": "", "equal-count pairs ordered as the paper": ""}
                    ),
                }
            )
        if entry.get("ceiling"):
            c = entry["ceiling"]
            rows.append(
                {
                    "paper column": col.removeprefix("paper_"),
                    "ranked by": f"the paper's noise ceiling (σ {c['noise_sd']:.1f} from {c['replicate_pairs']} replicate pairs)",
                    "architectures": "",
                    "Spearman ρ": _stat({"v": c["ceiling"], "v_ci95": c["ceiling_ci95"]}, "v"),
                    "Kendall τ": "",
                    "pairs ordered as the paper": "",
                    "ρ given the count": "",
                    "equal-count pairs ordered as the paper": "",
                }
            )
    return pd.DataFrame(rows)


def _beyond(entry: Mapping[str, Any]) -> dict[str, str]:
    """The pool's ρ given the feature count and its accuracy on pairs of equal count (permutation p)."""
    b = entry.get("beyond_count") or {}
    if not b:
        return {"ρ given the count": "—", "equal-count pairs ordered as the paper": "—"}
    p = b.get("within_p")
    within = _stat(b, "within_pairwise") + f" of {b['within_pairs']}" + ("" if p is None else f" (p {p:.3f})")
    return {"ρ given the count": _stat(b, "partial_rho"), "equal-count pairs ordered as the paper": within}


def _stat(x: Mapping[str, Any], k: str) -> str:
    v, ci = x.get(k), x.get(f"{k}_ci95") or [None, None]
    if v is None:
        return "—"
    return f"{v:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci[0] is not None else "")


def _beyond_words(entry: Mapping[str, Any]) -> str:
    b, c = entry.get("beyond_count") or {}, entry.get("ceiling") or {}
    words = ""
    if b and b.get("partial_rho") is not None:
        lo = (b.get("partial_rho_ci95") or [None])[0]
        adds = "adds to the count" if lo is not None and lo > 0 else "does not add to the count beyond noise"
        words += f" Given the count, ρ {_stat(b, 'partial_rho')}: the pool {adds}."
    if c:
        words += f" The paper's own noise caps any ranking near ρ {c['ceiling']:.2f}."
    return words


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
            f"(pairs {_stat(pool, 'pairwise')}); the feature count ρ {_stat(count, 'rho')}." + _beyond_words(entry)
        )
    if a.get("not_mastered"):
        lines.append("Left out, as they did not master their own length: " + ", ".join(a["not_mastered"]) + ".")
    return lines


def carry_table(c: Mapping[str, Any]) -> pd.DataFrame:
    """Per group and feature: the standardised effect at each length beside the paper's, and the effect at the
    longest length with its interval (seed variance pooled over the group's arms)."""
    rows = []
    for g in c["groups"]:
        group = ", ".join(str(x) for x in g["group"])
        for feature in dict.fromkeys(x["feature"] for x in g["cells"]):
            cells = sorted((x for x in g["cells"] if x["feature"] == feature), key=lambda x: x["multiple"])
            last = cells[-1]
            lo, hi = last["ci95"]
            row = {"group": group, "feature": FEATURE_NAMES.get(feature, feature)}
            for x in cells:
                row[f"×{x['multiple']}: pool z (paper z)"] = f"{_signed(x['z'])} ({_signed(x['paper_z'])})"
            row[f"effect at ×{last['multiple']} (95% CI)"] = (
                "—" if last["effect"] is None else f"{last['effect']:+.3f}" + ("" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]")
            )
            row["the paper's sign"] = "yes" if last["same_sign"] else "no"
            rows.append(row)
    return pd.DataFrame(rows)


def _signed(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}"


def carry_words(c: Mapping[str, Any]) -> list[str]:
    """The transfer score in sentences, per group of single-feature arms."""
    lengths = "/".join(str(n) for n in c["lengths"])
    lines = [
        f"The pool's single-feature arms (pairs of architectures that differ in one feature only) measured on "
        f"{c['measure']} at {lengths} tokens, beside the paper's matched pairs of published runs at HELMET 8K/16K/32K/64K. "
        "Each effect is standardised by the spread (SD) between the architectures at that length on its own side; the "
        "transfer score is the cosine of the two profiles: 1 when the pool's effects follow the paper's in sign and "
        "relative size, 0 when unrelated, negative when reversed. Its 95% interval resamples the pool's seeds and "
        "perturbs the paper's scores by its own run-to-run noise (its replicate runs). The rule that chose the design "
        "by it is docs/results/transfer/rule.md."
    ]
    for g in c["groups"]:
        score = g["score"]
        lo, hi = g["ci95"]
        if score is None:
            continue
        resolved = g.get("resolved_8x") or []
        where = ", ".join(str(x) for x in g["group"])
        verdict = (
            "follows the paper"
            if lo is not None and lo > 0
            else "reverses the paper"
            if hi is not None and hi < 0
            else "cannot be told from unrelated at these seeds"
        )
        lines.append(
            f"[{where}] transfer score {score:+.2f}"
            + ("" if lo is None else f" [{lo:+.2f}, {hi:+.2f}]")
            + f": the profile {verdict}; at the longest length {len(resolved)} of the paper's four features "
            + "are resolved in the paper's direction"
            + (f" ({', '.join(FEATURE_NAMES[f] for f in resolved)})." if resolved else ".")
        )
    return lines
