"""The report's "Findings": what the analysis found, in plain sentences generated from the numbers.

For each target metric and each of the paper's four features that varies in the pool (QK-norm, GQA, SWA,
short pretraining context):

- the effect: switching the feature on, averaged over matched pairs (cells that differ in that feature
  only), computed within each seed and averaged over seeds;
- its 95% CI over seeds (a t-interval of the per-seed effects; without seed replicates, the four-axis
  regression's CI);
- above or below seed noise: with seed replicates, above when the paired t-test's p, Holm-corrected over the
  metric's axes, is below 0.05; without them, when the regression CI excludes 0 and the effect is at least
  the pooled seed sd;
- same or opposite direction to the paper's: each feature *lowers* long-context scores, i.e. it *raises* a
  lower-is-better metric (names containing ``ppl`` or ``loss``).

Extension-only effects on the target (difference in differences: the post-extension effect minus the
pre-extension mastery effect, per seed; see :mod:`archpool.analysis.extension`), the runs that did not master
their own length before extension, and each remedy recipe's change of an arm's gap to the baseline.

When the pool's configurations are not a full factorial, the four-axis regression is not used for effects
or their CIs (pairwise effects only).

Then the feature-count fit (R², leave-one-out R²) and whether it generalises, and a small-n warning when
there are few runs per predictor. A result against the paper is a finding like any other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis import effects as fx
from archpool.analysis import inference, stats
from archpool.analysis.answers import Answers
from archpool.analysis.extension import NOT_FACTORIAL, is_factorial, summarise
from archpool.analysis.table import features, metric_columns
from archpool.axes import FEATURE_NAMES, FEATURES
from archpool.columns import lower_is_better

RUNS_PER_PREDICTOR = 10  # rule of thumb below which regression R² and CIs are unreliable


def _num(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _usable(df: pd.DataFrame, target: str) -> pd.DataFrame:
    ok = pd.to_numeric(df[target], errors="coerce").notna()
    if "state" in df.columns:
        ok &= df["state"] != "failed"
    return df[ok].reset_index(drop=True)


def _pair_effects(d: pd.DataFrame, target: str, short_ctx: int, covariates: tuple[str, ...]) -> dict[str, list[float]]:
    """Matched-pair effects of each feature on ``target`` within ``d`` (one cell per configuration)."""
    if len(d) < 2:
        return {}
    c = fx.cells(d, target, short_ctx, covariates)
    out: dict[str, list[float]] = {}
    for p in fx.pairs(c, None):
        if p["feature"] is not None and p["effect"] is not None:
            out.setdefault(p["feature"], []).append(p["effect"])
    return out


def axis_effect(
    d: pd.DataFrame,
    target: str,
    short_ctx: int,
    feature: str,
    covariates: tuple[str, ...] = (),
    answers: Answers | None = None,
) -> dict[str, Any]:
    """Effect of switching ``feature`` on, with its 95% CI over seeds (see the module docstring); from the
    scored ``answers`` (both sources of noise) when they cover the target."""
    per_seed: dict[Any, float] = {}
    n_pairs = 0
    if "seed" in d.columns and d["seed"].nunique() > 1:
        for s, g in d.groupby("seed", sort=True):
            eff = _pair_effects(g.reset_index(drop=True), target, short_ctx, covariates).get(feature)
            if eff:
                per_seed[s] = float(np.mean(eff))
                n_pairs += len(eff)
    out: dict[str, Any] = {
        "feature": feature,
        "name": FEATURE_NAMES[feature],
        "effect": None,
        "ci95": [None, None],
        "n_seeds": len(per_seed),
        "n_pairs": n_pairs,
        "ci_from": None,
    }
    if len(per_seed) >= 2:
        est = _from_answers(d, target, short_ctx, feature, covariates, answers, per_seed) or summarise(per_seed)
        out.update(
            effect=est["mean"],
            ci95=list(est["ci95"]),
            ci_from="answers" if est.get("source") == "answers" else "seeds",
            per_seed=list(per_seed.values()),
            estimate=est,
        )
        return out
    # no seed replicates of the pairs: pooled pair effects, CI from the four-axis regression (factorial only)
    pooled = _pair_effects(d, target, short_ctx, covariates).get(feature)
    term = None
    if is_factorial(d, short_ctx):
        f = features(d, short_ctx)
        fit = stats.fit_multi(f[list(FEATURES)], d[target].astype(float))
        term = (fit.get("coefs") or {}).get(feature)
    else:
        out["note"] = NOT_FACTORIAL
    if pooled:
        out.update(effect=float(np.mean(pooled)), n_pairs=len(pooled))
    elif term:
        out.update(effect=term["coef"])
    if term and term["ci95"][0] is not None:
        out.update(ci95=term["ci95"], ci_from="regression")
    return out


def _from_answers(
    d: pd.DataFrame,
    target: str,
    short_ctx: int,
    feature: str,
    covariates: tuple[str, ...],
    answers: Answers | None,
    per_seed: dict[Any, float],
) -> dict[str, Any] | None:
    """The mean of the matched pairs that switch ``feature`` on, as one contrast of the answers; None
    when the answers do not cover it or its per-seed values are not the table's (a pair missing a seed)."""
    if answers is None:
        return None
    ps = [p for p in fx.pairs(fx.cells(d, target, short_ctx, covariates), None) if p["feature"] == feature]
    if not ps:
        return None
    w = 1.0 / len(ps)
    terms = [t for p in ps for t in ((target, p["runs_to"], w), (target, p["runs_from"], -w))]
    est = answers.contrast(terms, seeds=per_seed)
    if est is None or set(est["per_seed"]) != set(per_seed):
        return None
    if any(abs(est["per_seed"][s] - v) > 1e-4 for s, v in per_seed.items()):
        return None
    return est


def _fmt(v: float | None, signed: bool = True) -> str:
    if v is None:
        return "—"
    a = abs(v)
    s = f"{v:+.3g}" if (0 < a < 0.01) or a >= 1000 else f"{v:+.3f}"
    return s if signed else s.lstrip("+")


def _ci(ci: Sequence[float | None]) -> str:
    return "—" if ci[0] is None else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


CLAIM_WORDS = {
    inference.EFFECT: "beyond noise and at least the smallest effect of interest",
    inference.BELOW_INTEREST: "beyond noise, but smaller than the smallest effect of interest",
    inference.EQUIVALENT: "no effect larger than the smallest effect of interest (equivalence test)",
    inference.UNRESOLVED: "not resolved (neither beyond noise nor ruled out as larger than the smallest effect of interest)",
    inference.UNTESTED: "not tested (no spread to test against)",
}


def classify(e: dict[str, Any], seed_sd: float | None, metric: str) -> dict[str, Any]:
    """Adds ``above_noise`` (an effect: beyond noise and at least the smallest effect of interest),
    ``paper_direction`` ('same' | 'opposite' | None) and ``sentence``."""
    eff, (lo, hi) = e["effect"], e["ci95"]
    excludes = lo is not None and hi is not None and (lo > 0 or hi < 0)
    big = seed_sd is None or (eff is not None and abs(eff) >= seed_sd)
    holm = e.get("p_holm")
    claim = e.get("claim")
    if claim is not None:  # seed replicates: the test, Holm-corrected over the metric's axes, and the equivalence test
        e["above_noise"] = bool(eff is not None and claim == inference.EFFECT)
    else:
        e["above_noise"] = bool(eff is not None and excludes and big)
    lower = lower_is_better(metric)
    if eff is None or eff == 0:
        e["paper_direction"] = None
    else:
        hurts = eff > 0 if lower else eff < 0
        e["paper_direction"] = "same" if hurts else "opposite"
    e["lower_is_better"] = lower
    if eff is None:
        e["sentence"] = f"{e['name']}: no matched pairs or fit for {metric}; no effect can be stated."
        return e
    verb = "raises" if eff > 0 else "lowers"
    noise = "seeds and answers" if e["ci_from"] == "answers" else "seeds"
    ci_txt = (
        f"95% CI {_ci(e['ci95'])} over {e['n_seeds']} seeds (noise of the {noise})"
        if e["ci_from"] in ("seeds", "answers")
        else f"95% CI {_ci(e['ci95'])} from the four-axis regression"
        if e["ci_from"] == "regression"
        else "no CI: no replicates"
    )
    if seed_sd:
        ci_txt += f"; {abs(eff) / seed_sd:.1f}× the seed sd of {_fmt(seed_sd, False)}"
    if holm is not None:
        ci_txt += f"; p = {holm:.2g} after Holm's correction over {e.get('family_size', 1)} axes"
    if claim is not None:
        verdict = CLAIM_WORDS[claim] + f" (±{e.get('min_effect', inference.MIN_EFFECT):g})"
    elif not excludes:
        verdict = "not distinguishable from seed noise (the CI contains 0)"
    else:
        verdict = "below seed noise (smaller than the seed sd)" if not big else "above seed noise"
    better = "lower is better" if lower else "higher is better"
    paper = {
        "same": "Same direction as the paper's (there, each feature hurts long-context scores)",
        "opposite": "Opposite to the paper's direction (there, each feature hurts long-context scores)",
        None: "No direction",
    }[e["paper_direction"]]
    if not e["above_noise"] and e["paper_direction"] is not None:
        paper += ", but not established here"
    e["sentence"] = f"{e['name']} {verb} {metric} ({better}) by {_fmt(abs(eff), False)} ({ci_txt}): {verdict}. {paper}."
    return e


CARRIED = 0.5  # a fit whose R² falls below this share of itself without one architecture is carried by it


def carried_by(p: dict[str, Any]) -> tuple[str, float | None] | None:
    """The architecture that carries a fit (without it, R² falls below ``CARRIED`` of the full R²), with its
    R² without that architecture; None when no single architecture does."""
    r2, without = _num(p.get("r2")), p.get("r2_without") or {}
    if r2 is None or r2 <= 0 or not without:
        return None
    arm, low = min(((a, _num(v)) for a, v in without.items()), key=lambda t: -1.0 if t[1] is None else t[1])
    return (arm, low) if low is None or low < CARRIED * r2 else None


def _rests_on(p: dict[str, Any]) -> str:
    """On how many architectures a fit rests, and which one carries it (if one does)."""
    n = p.get("n_groups")
    out = f" It rests on {n} architectures" if n else ""
    c = carried_by(p)
    if c is not None:
        arm, low = c
        without = "cannot be fitted" if low is None else f"is {low:.2f}"
        out += f"; without {arm} its R² {without}, so that one architecture carries it"
    return out + "." if out else ""


def count_fit(r: dict[str, Any]) -> dict[str, Any]:
    """The feature-count model's R², leave-one-architecture-out R², slope and a sentence on whether it generalises."""
    fc = r["predictors"]["feature_count"]
    r2, loo, coef = _num(fc.get("r2")), _num(fc.get("loo_r2")), _num(fc.get("coef"))
    out = {"r2": r2, "loo_r2": loo, "coef": coef, "ci95": fc.get("ci95") or [None, None], "n_groups": fc.get("n_groups")}
    metric = r["target"]
    if r2 is None:
        out["generalises"] = None
        out["sentence"] = (
            f"The feature count does not vary (or there are too few runs), so its fit to {metric} cannot be estimated."
        )
        return out
    carried = carried_by(fc)
    if loo is None or loo <= 0:
        out["generalises"] = False
        gen = "it does not generalise: it predicts a held-out architecture no better than the mean"
    elif loo < 0.5 * r2 or carried is not None:
        out["generalises"] = "weakly"
        gen = "it generalises only weakly (held-out R² well below in-sample, or one architecture carries it)"
    else:
        out["generalises"] = True
        gen = "it generalises (held-out R² close to in-sample)"
    lower = lower_is_better(metric)
    direction = ""
    if coef is not None and coef != 0:
        paper_like = coef > 0 if lower else coef < 0
        direction = f" Each added feature changes {metric} by {_fmt(coef)} (95% CI {_ci(out['ci95'])}), " + (
            "the paper's direction (more features, worse scores)."
            if paper_like
            else "against the paper's direction (there, more features mean worse scores)."
        )
    loo_txt = "—" if loo is None else f"{loo:.2f}"
    out["sentence"] = (
        f"The feature count explains {metric} with R² {r2:.2f} in-sample and {loo_txt} leave-one-architecture-out: "
        f"{gen}.{direction}{_rests_on(fc)}"
    )
    return out


DIAGNOSTIC_MARKERS = ("attn", "ppl", "loss", "stability", "entropy", "sink")


def before_extension(r: dict[str, Any]) -> str | None:
    """Sentences on the best pre-extension predictor of the (post-extension) target, and on the best
    generic diagnostic (attention statistics, perplexity, losses), which needs no task of its own; each
    cross-validated by architecture, and named when one architecture carries it."""
    pre = [p for p in r.get("pre_extension") or [] if _num(p.get("loo_r2")) is not None]
    if not pre:
        return None

    def verdict(p: dict[str, Any]) -> str:
        loo = _num(p["loo_r2"]) or 0.0
        if carried_by(p) is not None:
            return "one architecture carries it, so it does not show that the outcome can be told before extension"
        return (
            "it tells the outcome before extension is paid for"
            if loo >= 0.5
            else "a weak signal"
            if loo > 0
            else "it does not predict held-out architectures"
        )

    best = pre[0]
    out = (
        f"Before extension, the best predictor of {r['target']} is {best['predictor']} (pre-extension): "
        f"R² {_num(best['r2']):.2f}, leave-one-architecture-out {_num(best['loo_r2']):.2f} — {verdict(best)}." + _rests_on(best)
    )
    diag = [p for p in pre if any(m in p["predictor"] for m in DIAGNOSTIC_MARKERS)]
    if diag and diag[0] is not best:
        d = diag[0]
        out += (
            f" The best task-free diagnostic is {d['predictor']}: R² {_num(d['r2']):.2f}, leave-one-architecture-out "
            f"{_num(d['loo_r2']):.2f} — {verdict(d)}."
        )
    return out + f" ({len(pre)} pre-extension measurements compared.)"


def extension_sentences(r: dict[str, Any]) -> list[str]:
    """Per axis, the extension-only effect on the target (difference in differences) next to the pre- and
    post-extension effects; then the runs that did not master their own length, and each remedy."""
    out: list[str] = []
    e = r.get("extension_effects")
    if e:
        for a in e["axes"]:
            name = FEATURE_NAMES.get(a["feature"], a["feature"])
            x = next((x for x in a["effects"] if x["is_target"]), None)
            if x is None:
                continue
            did, post = x["did"], x["post"]
            if did["mean"] is None:
                out.append(
                    f"{name}: no seed has both pre- and post-extension values for {e['target']}; no extension-only effect."
                )
                continue
            ci = f"95% CI {_ci(did['ci95'])}" if did["ci95"][0] is not None else "no CI"
            dropped = (
                f"; seeds {', '.join(map(str, a['dropped_seeds']))} dropped (a run did not master its length)"
                if a["dropped_seeds"]
                else ""
            )
            out.append(
                f"{name}: extension-only effect on {e['target']} {_fmt(did['mean'])} ({ci}, p {_p(did.get('p'))}, "
                f"n {did['n']} seeds) = post-extension effect {_fmt(post['mean'])} minus the same gap on "
                f"{x.get('did_from') or 'the metric'} before extension {_fmt(x['before']['mean'])}{dropped}."
            )
        for x in e["not_mastered"]:
            out.append(f"{x['run']} ({x['arm']}, mastery_acc {_fmt(x['mastery_acc'], False)}) {x['reason']}.")
    for rec in r.get("remedy") or []:
        for a in rec["arms"]:
            if "gap_primary" not in a or a["gap_primary"]["mean"] is None:
                continue
            frac = a.get("closed_fraction")
            share = f"; it closes {frac:.0%} of the gap." if frac is not None else f"; {a.get('closed_note') or 'no share'}."
            out.append(
                f"Remedy {rec['recipe']!r} on the {FEATURE_NAMES.get(a['feature'], a['feature'])} arm: gap to the "
                f"baseline {_fmt(a['gap_primary']['mean'])} with the primary recipe, {_fmt(a['gap_recipe']['mean'])} "
                f"with the remedy (paired change {_fmt(a['paired']['mean'])}, 95% CI {_ci(a['paired']['ci95'])}, "
                f"n {a['paired']['n']}){share}"
            )
    return out


def _p(p: float | None) -> str:
    return "—" if p is None else f"{p:.2g}"


def small_n(n: int, n_features: int, n_metric_predictors: int) -> str | None:
    """A warning when runs are few for the number of predictors."""
    k = max(n_features, 1)
    if n >= RUNS_PER_PREDICTOR * k and n >= 12:
        return None
    msg = (
        f"Small sample: {n} runs for {n_features} varying feature{'s' if n_features != 1 else ''} "
        f"(a common rule of thumb asks for about {RUNS_PER_PREDICTOR} runs per predictor). Treat R², CIs and "
        "p-values as rough."
    )
    if n_metric_predictors and n <= 6:
        msg += (
            f" With {n} runs, any of the {n_metric_predictors} single-metric predictors can reach R² near 1 "
            "by chance; their table is not evidence."
        )
    return msg


def _tested(effects: Iterable[dict[str, Any]], min_effect: float) -> list[dict[str, Any]]:
    """The axis effects with ``p_holm``, ``claim`` and ``family_size`` (the test of each effect over seeds or
    answers, Holm over the axes that have one); effects without seed replicates keep ``p_holm`` None."""
    effects = list(effects)
    tested = [e.get("estimate") if e.get("estimate") else None for e in effects]
    for e, t in zip(effects, inference.family(tested, min_effect=min_effect)):
        e["p_holm"] = t["p_holm"] if t else None
        e["claim"] = t["claim"] if t else None
        e["min_effect"] = min_effect
        e["family_size"] = t["family_size"] if t else None
    return effects


def findings(
    df: pd.DataFrame,
    r: dict[str, Any],
    targets: Iterable[str] = (),
    covariates: Iterable[str] = (),
    answers: Answers | None = None,
) -> dict[str, Any]:
    """Findings for the analysis ``r`` of ``df`` (its ``target``) and for each extra metric in ``targets``,
    tested on the scored ``answers`` where they cover a metric."""
    short = int(r["short_ctx"])
    min_effect = float((r.get("inference") or {}).get("min_effect") or inference.MIN_EFFECT)
    covariates = tuple(c for c in covariates if c and c != "seed")  # seeds are what effects are averaged over
    metrics = list(dict.fromkeys([r["target"], *[t for t in targets if t]]))
    d0 = _usable(df, r["target"])
    f0 = features(d0, short)
    varying = [f for f in FEATURES if f0[f].nunique() > 1]
    per_target = []
    for m in metrics:
        if m not in df.columns:
            per_target.append(
                {"metric": m, "missing": True, "axes": [], "sentences": [f"{m}: not a column of the results table; no findings."]}
            )
            continue
        d = _usable(df, m)
        if len(d) < 2:
            per_target.append(
                {"metric": m, "missing": True, "axes": [], "sentences": [f"{m}: fewer than 2 runs have a value; no findings."]}
            )
            continue
        c = fx.cells(d, m, short, covariates)
        seed_sd = fx.spread(d, m, c)["seed_sd"]
        axes = [
            classify(a, seed_sd, m)
            for a in _tested((axis_effect(d, m, short, f, covariates, answers) for f in varying), min_effect)
        ]
        per_target.append(
            {
                "metric": m,
                "n": len(d),
                "seed_sd": seed_sd,
                "lower_is_better": lower_is_better(m),
                "axes": axes,
                "sentences": [a["sentence"] for a in axes],
            }
        )
    n_metric_preds = sum(1 for p in r["predictors"].values() if p.get("kind") == "metric")
    return {
        "targets": per_target,
        "count_fit": count_fit(r),
        "before_extension": before_extension(r),
        "extension": extension_sentences(r),
        "factorial": bool(r.get("factorial", True)),
        "small_n": small_n(int(r["n"]), len(varying), n_metric_preds),
        "varying": varying,
        "not_varying": [FEATURE_NAMES[f] for f in FEATURES if f not in varying],
        "n": int(r["n"]),
    }


def merge_identical(df: pd.DataFrame, keep: Iterable[str] = ()) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Drop metric columns identical to an earlier one (same value, or both empty, in every row).

    Returns the table without the duplicates and ``{kept: [dropped, ...]}``; a column in ``keep`` (the targets)
    is never dropped in favour of another."""
    keep = [k for k in keep if k in df.columns]
    cols = metric_columns(df)
    order = keep + [c for c in cols if c not in keep]
    values = {c: pd.to_numeric(df[c], errors="coerce").to_numpy(float) for c in order if c in cols}
    aliases: dict[str, list[str]] = {}
    dropped: set[str] = set()
    for i, a in enumerate(order):
        if a in dropped or a not in values:
            continue
        for b in order[i + 1 :]:
            if b in dropped or b in keep or b not in values:
                continue
            if np.array_equal(values[a], values[b], equal_nan=True):
                aliases.setdefault(a, []).append(b)
                dropped.add(b)
    out = df.drop(columns=sorted(dropped))
    out.attrs = dict(df.attrs)
    return out, aliases
