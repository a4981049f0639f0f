"""The report's answer in plain words: per axis, the effect on long-context retrieval after extension, whether
it survives Holm's correction over the verdict's axes, the smallest effect the seeds could have detected,
whether it was already there before extension, the paper's number beside it, and what that means for an
architecture choice.

Works on an :func:`archpool.analysis.summary.analyze` result and its findings; every number comes from them
or from the paper's published table (:mod:`archpool.report.paper`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from archpool.analysis import inference
from archpool.analysis.extension import summarise
from archpool.columns import LADDER_MEAN, ColumnKey
from archpool.report import paper
from archpool.report.findings import FEATURE_NAMES, lower_is_better
from archpool.report.transfer import at_ceiling

AXIS_ORDER = ("qk_norm", "gqa", "swa", "short_ctx")


@dataclass(frozen=True)
class AxisVerdict:
    """One row of the verdict table (``None``: not measured)."""

    feature: str
    name: str
    change: str
    n: int
    after: float | None
    after_ci: tuple[float | None, float | None]
    seed_sd: float | None
    beyond_noise: bool
    before: float | None
    before_ci: tuple[float | None, float | None]
    before_present: bool
    did: float | None
    did_ci: tuple[float | None, float | None]
    did_from: str | None
    p: float | None  # paired t-test of the effect after extension
    p_holm: float | None  # Holm-adjusted over the verdict's axes
    did_p_holm: float | None  # the same for the extension-only effect
    mde: float | None  # smallest effect the seeds detect with 80% power at 0.05 / axes
    seeds_needed: int | None  # seed pairs needed to detect the observed effect at that level
    treated: float | None  # the same gap with both arms given the second recipe (a treatment)
    treated_ci: tuple[float | None, float | None]
    treated_recipe: str | None
    ceiling: float | None  # the baseline's accuracy at the target when it and the arm's are within 0.01 of 1
    paper_points: float | None
    paper_multiple: int | None
    meaning: str


def fmt(v: float | None, signed: bool = True, digits: int = 3) -> str:
    """One precision for every accuracy and effect in the report: ``+0.035``, ``—`` when absent."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def fmt_ci(ci: tuple[float | None, float | None] | list | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return ""
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def _excludes_zero(ci: tuple[float | None, float | None]) -> bool:
    lo, hi = ci
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


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


def target_multiple(target: str, long_ctx: int | None) -> int | None:
    key = ColumnKey.parse(target)
    if key is None or not long_ctx:
        return None
    ratio = key.length / long_ctx
    return int(ratio) if ratio == int(ratio) else None


def _meaning(v: dict[str, Any], lower: bool, remedy: bool) -> str:
    name, after = v["name"], v["after"]
    if after is None:
        return f"Not measured: {v.get('why') or 'no matched runs that mastered their own length'}."
    hurts = after > 0 if lower else after < 0
    if not v["beyond"] and v.get("ceiling") is not None:
        return (
            f"At the ceiling: the baseline ({v['ceiling']:.3f}) and this arm both solve the task here after extension, "
            "so a cost can only show as slower extension or on a harder task (findings below)."
        )
    if not v["beyond"]:
        mde, need = v.get("mde"), v.get("seeds_needed")
        more = f" An effect of this size would need about {need} seeds." if need else ""
        return (
            f"Not separable from seed noise after correcting for {v['family']} axes (these seeds detect effects of "
            f"about ±{fmt(mde, False)} with 80% power).{more}"
        )
    if v["before_present"]:
        return (
            f"{name[0].upper()}{name[1:]} already differs at the pretraining length, so it is a pretraining effect: a short-context "
            "evaluation shows it, and extension is not what reveals it."
        )
    if hurts:
        fix = " The treatment section shows what a second extension recipe changes." if remedy else ""
        return (
            f"{name[0].upper()}{name[1:]} costs long-context retrieval that only extension reveals: nothing at the "
            f"pretraining length warns of it. Choose it only after measuring the extension you will use.{fix}"
        )
    return f"{name[0].upper()}{name[1:]} helps long-context retrieval after extension here, against the paper's 7B direction."


def axis_verdicts(r: dict[str, Any], found: dict[str, Any] | None) -> list[AxisVerdict]:
    """One verdict per varied axis, in the paper's order, from the extension-only effects on the target."""
    ext = r.get("extension_effects") or {}
    target = r["target"]
    lower = lower_is_better(target)
    seed_sd = (r.get("spread") or {}).get("seed_sd")
    long_ctx = (ext.get("long_ctx") if ext else None) or long_ctx_of(r)
    multiple = target_multiple(target, long_ctx)
    by_feature = {a["feature"]: a for a in ext.get("axes") or []}
    remedied = {a.get("feature") for rec in r.get("remedy") or [] for a in rec.get("arms", [])}
    found_axes = {a["feature"]: a for t in (found or {}).get("targets", []) if t["metric"] == target for a in t["axes"]}
    tested = _tested(by_feature, found_axes)
    treated = _treated_gaps(r)
    out = []
    for feature in AXIS_ORDER:
        a = by_feature.get(feature)
        if a is None and feature not in found_axes:
            continue
        name = FEATURE_NAMES[feature]
        v: dict[str, Any] = dict(name=name, after=None, after_ci=(None, None), why=None)
        change = ""
        n = 0
        before, before_ci, did, did_ci, did_from = None, (None, None), None, (None, None), None
        if a is not None:
            change = f"{a['from']} → {a['to']}"
            x = next((x for x in a["effects"] if x["is_target"]), None)
            if x is not None and x["post"]["mean"] is not None:
                v.update(after=x["post"]["mean"], after_ci=tuple(x["post"]["ci95"]))
                n = x["post"]["n"]
                did, did_ci, did_from = x["did"]["mean"], tuple(x["did"]["ci95"]), x.get("did_from")
                if at_ceiling(x["column"], x.get("base_mean"), x["post"]["mean"]):
                    v["ceiling"] = x["base_mean"]
            before, before_ci = a["pre"]["mean"], tuple(a["pre"]["ci95"])
            if x is None or x["post"]["mean"] is None:
                v["why"] = "no seed-paired runs that mastered their own length"
        elif feature in found_axes:  # no extension analysis: the matched-pair effect on the target
            f = found_axes[feature]
            if f["effect"] is not None:
                v.update(after=f["effect"], after_ci=tuple(f["ci95"]))
                n = f["n_seeds"]
        v["after_ci"] = tuple(None if c is None else float(c) for c in v["after_ci"])
        present = before is not None and _excludes_zero(before_ci) and (seed_sd is None or abs(before) >= seed_sd)
        v["before_present"] = present
        t = tested.get(feature) or {}
        beyond = v["after"] is not None and t.get("p_holm") is not None and t["p_holm"] < inference.ALPHA
        v.update(beyond=beyond, mde=t.get("mde"), seeds_needed=t.get("seeds_needed"), family=t.get("family_size", 1))
        out.append(
            AxisVerdict(
                feature=feature,
                name=name,
                change=change,
                n=n,
                after=v["after"],
                after_ci=v["after_ci"],
                seed_sd=seed_sd,
                beyond_noise=bool(beyond),
                before=before,
                before_ci=before_ci,
                before_present=present,
                did=did,
                did_ci=did_ci,
                did_from=did_from,
                p=t.get("p"),
                p_holm=t.get("p_holm"),
                did_p_holm=t.get("did_p_holm"),
                mde=t.get("mde"),
                seeds_needed=t.get("seeds_needed"),
                treated=(treated.get(feature) or {}).get("mean"),
                treated_ci=tuple((treated.get(feature) or {}).get("ci95") or (None, None)),  # type: ignore[arg-type]
                treated_recipe=(treated.get(feature) or {}).get("recipe"),
                ceiling=v.get("ceiling"),
                paper_points=paper.single_feature_delta(feature, multiple),
                paper_multiple=multiple if paper.single_feature_delta(feature, multiple) is not None else None,
                meaning=_meaning(v, lower, feature in remedied),
            )
        )
    return out


def _tested(by_feature: dict[str, Any], found_axes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per axis of the verdict: the paired test of its effect after extension and of its extension-only
    effect, Holm-corrected over the axes (each a family of its own), with the MDE and seeds needed."""
    post: dict[str, dict[str, Any]] = {}
    did: dict[str, dict[str, Any]] = {}
    for feature in AXIS_ORDER:
        a = by_feature.get(feature)
        x = next((x for x in a["effects"] if x["is_target"]), None) if a is not None else None
        if x is not None and x["post"]["mean"] is not None:
            post[feature], did[feature] = x["post"], x["did"]
        elif a is None and feature in found_axes and found_axes[feature].get("per_seed"):
            post[feature] = summarise(dict(enumerate(found_axes[feature]["per_seed"])))
    names = list(post)
    tests = inference.family([post[k] for k in names])
    did_tests = inference.family([did.get(k) for k in names])
    out: dict[str, dict[str, Any]] = {}
    for k, t, u in zip(names, tests, did_tests):
        out[k] = {**(t or {}), "did_p_holm": (u or {}).get("p_holm")}
    return out


def _treated_gaps(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per axis, its gap to the baseline with both arms treated by the first second recipe that treated
    the baseline too (``{"mean", "ci95", "n", "recipe"}``)."""
    out: dict[str, dict[str, Any]] = {}
    for rec in r.get("remedy") or []:
        for a in rec.get("arms", []):
            feature, gap = a.get("feature"), a.get("gap_recipe") or {}
            if feature and a.get("base_treated") and gap.get("mean") is not None and feature not in out:
                out[feature] = {**gap, "recipe": rec["recipe"]}
    return out


def long_ctx_of(r: dict[str, Any]) -> int | None:
    ctxs = [x.get("pretrain_ctx") for x in r.get("runs") or [] if x.get("pretrain_ctx")]
    return int(max(ctxs)) if ctxs else None


def headline(verdicts: list[AxisVerdict], target_words: str) -> list[str]:
    """Three lines: the question, the answer (largest cost first), and what did not show."""
    measured = [v for v in verdicts if v.after is not None]
    costly = sorted((v for v in measured if v.beyond_noise), key=lambda v: -abs(v.after or 0))
    quiet = [v for v in measured if not v.beyond_noise]
    names = [v.name for v in verdicts] or ["the varied axes"]
    axes = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    subject = f"each of {axes}" if len(names) > 1 else axes
    lines = [f"Question: how much does {subject} change {target_words}?"]
    if costly:
        parts = []
        for v in costly:
            when = "already before extension" if v.before_present else "revealed by extension"
            parts.append(f"{v.name} {fmt(v.after)} {fmt_ci(v.after_ci)} ({when})")
        lines.append("Beyond seed noise (Holm-corrected over the axes): " + "; ".join(parts) + ".")
    else:
        lines.append("No axis changes it beyond seed noise in this pool (Holm-corrected over the axes).")
    if quiet:
        lines.append(
            "Not distinguishable from seed noise: "
            + ", ".join(f"{v.name} {fmt(v.after)} {fmt_ci(v.after_ci)} (detectable: ±{fmt(v.mde, False)})".strip() for v in quiet)
            + "."
        )
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
    return lines
