"""The verdict per axis: the effect on the target after extension, whether it survives Holm's correction
over the verdict's axes, the smallest effect the seeds could have detected, whether it was already there
before extension, the paper's number beside it, and what that means for an architecture choice.

Works on an :func:`archpool.analysis.summary.analyze` result and its findings; every number comes from them
or from the paper's published table (:mod:`archpool.analysis.paper`).
"""

from __future__ import annotations

from typing import Any

from archpool.analysis import carry, inference, paper
from archpool.analysis.extension import summarise
from archpool.analysis.results import AxisVerdict, fmt
from archpool.analysis.transfer import at_ceiling, min_effect_of
from archpool.axes import FEATURE_NAMES, FEATURES
from archpool.columns import ColumnKey, lower_is_better


def _excludes_zero(ci: tuple[float | None, float | None]) -> bool:
    lo, hi = ci
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def target_multiple(target: str, long_ctx: int | None) -> int | None:
    key = ColumnKey.parse(target)
    if key is None or not long_ctx:
        return None
    ratio = key.length / long_ctx
    return int(ratio) if ratio == int(ratio) else None


def _cap(name: str) -> str:
    return f"{name[0].upper()}{name[1:]}"


def _unresolved(v: dict[str, Any]) -> str:
    """Why an effect is not resolved, and what would resolve it."""
    mde, need, x = v.get("mde"), v.get("seeds_needed"), v["min_effect"]
    more = ""
    if need:
        more = f" An effect of this size would need about {need} seeds."
    elif v.get("source") == "answers" and v.get("after"):
        more = (
            " More seeds alone would not resolve an effect of this size: the documents' share of the noise needs more documents."
        )
    if _excludes_zero(v["after_ci"]):
        why = (
            f"its 95% interval excludes 0, but its test does not pass after Holm's correction over {v['family']} axes, "
            f"and an effect as large as ±{x:g} is not ruled out either"
        )
    else:
        why = f"after correcting for {v['family']} axes the interval allows no effect and effects beyond ±{x:g}"
    return f"Not resolved: {why} (this design detects about ±{fmt(mde, False)} with 80% power).{more}"


def _meaning(v: dict[str, Any], lower: bool, remedy: bool) -> str:
    name, after, claim, x = v["name"], v["after"], v["claim"], v["min_effect"]
    if after is None:
        return f"Not measured: {v.get('why') or 'no matched runs that mastered their own length'}."
    if claim == inference.UNTESTED:
        return (
            "Not tested: its per-seed differences have no spread to test against and there is no answers table "
            "to measure the noise of the answers (items.parquet)."
        )
    if v.get("ceiling") is not None and claim != inference.EFFECT:
        lead = f"No effect larger than ±{x:g} on this task, but at" if claim == inference.EQUIVALENT else "At"
        return (
            f"{lead} the ceiling: the baseline ({v['ceiling']:.3f}) and this arm both solve the task here after extension, "
            "so a cost can only show as slower extension or on a harder task (findings below)."
        )
    if claim == inference.EQUIVALENT:
        return (
            f"No effect larger than ±{x:g}: the equivalence test (two one-sided tests, Holm-corrected over the axes) rules "
            "out an effect of the smallest size of interest in either direction."
        )
    if claim == inference.BELOW_INTEREST:
        return (
            f"Beyond noise but smaller than the smallest effect of interest (±{x:g}): a real difference, too small to "
            "call a cost or a gain."
        )
    if claim == inference.UNRESOLVED:
        return _unresolved(v)
    hurts = after > 0 if lower else after < 0
    if v["before_present"]:
        return (
            f"{_cap(name)} already differs at the pretraining length, so it is a pretraining effect: a short-context "
            "evaluation shows it, and extension is not what reveals it."
        )
    if not hurts:
        return f"{_cap(name)} helps long-context retrieval after extension here, against the paper's 7B direction."
    if v["did_claim"] == inference.EFFECT:
        fix = " The treatment section shows what a second extension recipe changes." if remedy else ""
        return (
            f"{_cap(name)} costs long-context retrieval that only extension reveals: nothing at the pretraining length "
            f"warns of it, and the difference in differences is itself beyond noise. Choose it only after measuring the "
            f"extension you will use.{fix}"
        )
    return (
        f"{_cap(name)} costs long-context retrieval after extension, and nothing at the pretraining length shows it; "
        "whether extension is what reveals it is not resolved (the difference in differences is not beyond noise)."
    )


def axis_verdicts(r: dict[str, Any], found: dict[str, Any] | None) -> list[AxisVerdict]:
    """One verdict per varied axis, in the paper's order, from the extension-only effects on the target."""
    min_effect = min_effect_of(r)
    ext = r.get("extension_effects") or {}
    target = r["target"]
    lower = lower_is_better(target)
    seed_sd = (r.get("spread") or {}).get("seed_sd")
    long_ctx = (ext.get("long_ctx") if ext else None) or long_ctx_of(r)
    multiple = target_multiple(target, long_ctx)
    by_feature: dict[str, dict[str, Any]] = {}
    for a in ext.get("axes") or []:
        by_feature.setdefault(a["feature"], a)  # the feature's main arm: the extension analysis lists it first
    remedied = {a.get("feature") for rec in r.get("remedy") or [] for a in rec.get("arms", [])}
    found_axes = {a["feature"]: a for t in (found or {}).get("targets", []) if t["metric"] == target for a in t["axes"]}
    tested = _tested(by_feature, found_axes, min_effect)
    treated = _treated_gaps(r)
    co = _co_target(r, min_effect)
    evidence, width = carry.ladder_evidence(), carry.pool_width(r.get("carry"))
    out = []
    for feature in FEATURES:
        a = by_feature.get(feature)
        if a is None and feature not in found_axes:
            continue
        name = FEATURE_NAMES[feature]
        v: dict[str, Any] = dict(name=name, after=None, after_ci=(None, None), why=None, min_effect=min_effect)
        change = ""
        n = 0
        before, before_ci, did, did_ci, did_from = None, (None, None), None, (None, None), None
        source = "seeds"
        if a is not None:
            change = f"{a['from']} → {a['to']}"
            x = next((x for x in a["effects"] if x["is_target"]), None)
            if x is not None and x["post"]["mean"] is not None:
                v.update(after=x["post"]["mean"], after_ci=tuple(x["post"]["ci95"]))
                n = x["post"]["n"]
                source = x["post"].get("source", "seeds")
                did, did_ci, did_from = x["did"]["mean"], tuple(x["did"]["ci95"]), x.get("did_from")
                if at_ceiling(x["column"], x.get("base_mean"), x["post"]["mean"], min_effect):
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
        t = tested.get(feature) or {}
        present = before is not None and t.get("pre_claim") == inference.EFFECT
        v["before_present"] = present
        claim = t.get("claim", inference.UNTESTED) if v["after"] is not None else inference.UNTESTED
        beyond = v["after"] is not None and t.get("p_holm") is not None and t["p_holm"] < inference.ALPHA
        v.update(
            beyond=beyond,
            claim=claim,
            did_claim=t.get("did_claim", inference.UNTESTED),
            mde=t.get("mde"),
            seeds_needed=t.get("seeds_needed"),
            family=t.get("family_size", 1),
            source=source,
        )
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
                claim=claim,
                before=before,
                before_ci=before_ci,
                before_present=present,
                did=did,
                did_ci=did_ci,
                did_from=did_from,
                did_claim=v["did_claim"],
                p=t.get("p"),
                p_holm=t.get("p_holm"),
                p_equivalent_holm=t.get("p_equivalent_holm"),
                did_p_holm=t.get("did_p_holm"),
                mde=t.get("mde"),
                seeds_needed=t.get("seeds_needed"),
                min_effect=min_effect,
                source=source,
                co_column=(co.get(feature) or {}).get("column"),
                co_after=(co.get(feature) or {}).get("mean"),
                co_ci=tuple((co.get(feature) or {}).get("ci95") or (None, None)),
                co_claim=(co.get(feature) or {}).get("claim", inference.UNTESTED),
                treated=(treated.get(feature) or {}).get("mean"),
                treated_ci=tuple((treated.get(feature) or {}).get("ci95") or (None, None)),
                treated_recipe=(treated.get(feature) or {}).get("recipe"),
                ceiling=v.get("ceiling"),
                paper_points=paper.single_feature_delta(feature, multiple),
                paper_multiple=multiple if paper.single_feature_delta(feature, multiple) is not None else None,
                meaning=_meaning(v, lower, feature in remedied),
                carries=carry.carries(feature, carry.pool_cell(r.get("carry"), feature), evidence, width),
            )
        )
    return out


def _tested(by_feature: dict[str, Any], found_axes: dict[str, Any], min_effect: float) -> dict[str, dict[str, Any]]:
    """Per axis of the verdict: the tests of its effect after extension, of its extension-only effect and of
    its effect before extension at each arm's own length, each a family over the axes (Holm), with the
    claims they allow, the MDE and the seeds needed."""
    post: dict[str, dict[str, Any]] = {}
    did: dict[str, dict[str, Any]] = {}
    pre: dict[str, dict[str, Any]] = {}
    for feature in FEATURES:
        a = by_feature.get(feature)
        x = next((x for x in a["effects"] if x["is_target"]), None) if a is not None else None
        if x is not None and x["post"]["mean"] is not None:
            post[feature], did[feature], pre[feature] = x["post"], x["did"], a["pre"]  # type: ignore[index]
        elif a is None and feature in found_axes and found_axes[feature].get("per_seed"):
            post[feature] = summarise(dict(enumerate(found_axes[feature]["per_seed"])))
    names = list(post)
    tests = inference.family([post[k] for k in names], min_effect=min_effect)
    did_tests = inference.family([did.get(k) for k in names], min_effect=min_effect)
    pre_tests = inference.family([pre.get(k) for k in names], min_effect=min_effect)
    out: dict[str, dict[str, Any]] = {}
    for k, t, u, w in zip(names, tests, did_tests, pre_tests):
        out[k] = {
            **(t or {}),
            "did_p_holm": (u or {}).get("p_holm"),
            "did_claim": (u or {}).get("claim", inference.UNTESTED),
            "pre_claim": (w or {}).get("claim", inference.UNTESTED),
        }
    return out


def _co_target(r: dict[str, Any], min_effect: float) -> dict[str, dict[str, Any]]:
    """Per axis the effect on the co-target (the target's gold log-probability), tested as a family over
    the axes: ``{"column", "mean", "ci95", "claim"}``."""
    co = r.get("co_target") or {}
    axes = (co.get("extension_effects") or {}).get("axes") or []
    found = {}
    for a in axes:
        x = next((x for x in a["effects"] if x["is_target"]), None)
        if x is not None and x["post"]["mean"] is not None and a["feature"] not in found:
            found[a["feature"]] = x["post"]
    names = list(found)
    out = {}
    for k, t in zip(names, inference.family([found[k] for k in names], min_effect=min_effect)):
        out[k] = {
            "column": co.get("column"),
            "mean": found[k]["mean"],
            "ci95": found[k]["ci95"],
            "claim": (t or {}).get("claim", inference.UNTESTED),
        }
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
