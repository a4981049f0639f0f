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
from scipy import stats as sps

from archpool.analysis import effects as fx
from archpool.analysis import inference, stats
from archpool.analysis.extension import NOT_FACTORIAL, is_factorial, summarise
from archpool.analysis.table import FEATURES, features, metric_columns
from archpool.columns import lower_is_better

FEATURE_NAMES = {"qk_norm": "QK-norm", "gqa": "GQA", "swa": "SWA", "short_ctx": "short pretraining context"}
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


def axis_effect(d: pd.DataFrame, target: str, short_ctx: int, feature: str, covariates: tuple[str, ...] = ()) -> dict[str, Any]:
    """Effect of switching ``feature`` on, with its 95% CI over seeds (see the module docstring)."""
    per_seed: list[float] = []
    n_pairs = 0
    if "seed" in d.columns and d["seed"].nunique() > 1:
        for _, g in d.groupby("seed", sort=True):
            eff = _pair_effects(g.reset_index(drop=True), target, short_ctx, covariates).get(feature)
            if eff:
                per_seed.append(float(np.mean(eff)))
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
        m, s = float(np.mean(per_seed)), float(np.std(per_seed, ddof=1))
        h = float(sps.t.ppf(0.975, len(per_seed) - 1)) * s / math.sqrt(len(per_seed))
        out.update(effect=m, ci95=[m - h, m + h], ci_from="seeds", per_seed=per_seed)
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


def _fmt(v: float | None, signed: bool = True) -> str:
    if v is None:
        return "—"
    a = abs(v)
    s = f"{v:+.3g}" if (0 < a < 0.01) or a >= 1000 else f"{v:+.3f}"
    return s if signed else s.lstrip("+")


def _ci(ci: Sequence[float | None]) -> str:
    return "—" if ci[0] is None else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"


def classify(e: dict[str, Any], seed_sd: float | None, metric: str) -> dict[str, Any]:
    """Adds ``above_noise``, ``paper_direction`` ('same' | 'opposite' | None) and ``sentence``."""
    eff, (lo, hi) = e["effect"], e["ci95"]
    excludes = lo is not None and hi is not None and (lo > 0 or hi < 0)
    big = seed_sd is None or (eff is not None and abs(eff) >= seed_sd)
    holm = e.get("p_holm")
    if holm is not None:  # seed replicates: the paired test, Holm-corrected over the metric's axes
        excludes = holm < inference.ALPHA
        e["above_noise"] = bool(eff is not None and excludes)
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
    ci_txt = (
        f"95% CI {_ci(e['ci95'])} over {e['n_seeds']} seeds"
        if e["ci_from"] == "seeds"
        else f"95% CI {_ci(e['ci95'])} from the four-axis regression"
        if e["ci_from"] == "regression"
        else "no CI: no replicates"
    )
    if seed_sd:
        ci_txt += f"; {abs(eff) / seed_sd:.1f}× the seed sd of {_fmt(seed_sd, False)}"
    if holm is not None:
        ci_txt += f"; paired t-test p = {holm:.2g} after Holm's correction over {e.get('family_size', 1)} axes"
    if e["above_noise"]:
        verdict = "above seed noise"
    elif holm is not None:
        verdict = "not distinguishable from seed noise after the correction"
    elif not excludes:
        verdict = "not distinguishable from seed noise (the CI contains 0)"
    else:
        verdict = "below seed noise (smaller than the seed sd)"
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


def count_fit(r: dict[str, Any]) -> dict[str, Any]:
    """The feature-count model's R², LOO R², slope and a sentence on whether it generalises."""
    fc = r["predictors"]["feature_count"]
    r2, loo, coef = _num(fc.get("r2")), _num(fc.get("loo_r2")), _num(fc.get("coef"))
    out = {"r2": r2, "loo_r2": loo, "coef": coef, "ci95": fc.get("ci95") or [None, None]}
    metric = r["target"]
    if r2 is None:
        out["generalises"] = None
        out["sentence"] = (
            f"The feature count does not vary (or there are too few runs), so its fit to {metric} cannot be estimated."
        )
        return out
    if loo is None or loo <= 0:
        out["generalises"] = False
        gen = "it does not generalise: leave-one-out it predicts held-out runs no better than their mean"
    elif loo < 0.5 * r2:
        out["generalises"] = "weakly"
        gen = "it generalises only weakly (leave-one-out R² well below in-sample)"
    else:
        out["generalises"] = True
        gen = "it generalises (leave-one-out R² close to in-sample)"
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
        f"The feature count explains {metric} with R² {r2:.2f} in-sample and {loo_txt} leave-one-out: {gen}.{direction}"
    )
    return out


DIAGNOSTIC_MARKERS = ("attn", "ppl", "loss", "stability", "entropy", "sink")


def before_extension(r: dict[str, Any]) -> str | None:
    """Sentences on the best pre-extension predictor of the (post-extension) target, and on the best
    generic diagnostic (attention statistics, perplexity, losses), which needs no task of its own."""
    pre = [p for p in r.get("pre_extension") or [] if _num(p.get("loo_r2")) is not None]
    if not pre:
        return None

    def verdict(loo: float) -> str:
        return (
            "it tells the outcome before extension is paid for"
            if loo >= 0.5
            else "a weak signal"
            if loo > 0
            else "it does not predict held-out runs"
        )

    best = pre[0]
    out = (
        f"Before extension, the best predictor of {r['target']} is {best['predictor']} (pre-extension): "
        f"R² {_num(best['r2']):.2f}, leave-one-out {_num(best['loo_r2']):.2f} — {verdict(_num(best['loo_r2']))}."
    )
    diag = [p for p in pre if any(m in p["predictor"] for m in DIAGNOSTIC_MARKERS)]
    if diag and diag[0] is not best:
        d = diag[0]
        out += (
            f" The best task-free diagnostic is {d['predictor']}: R² {_num(d['r2']):.2f}, leave-one-out "
            f"{_num(d['loo_r2']):.2f} — {verdict(_num(d['loo_r2']))}."
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
            did, post, pre = x["did"], x["post"], a["pre"]
            if did["mean"] is None:
                out.append(
                    f"{name}: no seed has both pre- and post-extension values for {e['target']}; no extension-only effect."
                )
                continue
            ci = f"95% CI {_ci(did['ci95'])}" if did["ci95"][0] is not None else "no CI"
            excl = " (excludes 0)" if did["ci95"][0] is not None and (did["ci95"][0] > 0 or did["ci95"][1] < 0) else ""
            dropped = (
                f"; seeds {', '.join(map(str, a['dropped_seeds']))} dropped (a run did not master its length)"
                if a["dropped_seeds"]
                else ""
            )
            out.append(
                f"{name}: extension-only effect on {e['target']} {_fmt(did['mean'])} ({ci}{excl}, seed sd "
                f"{_fmt(did['sd'], False)}, n {did['n']} seeds) = post-extension effect {_fmt(post['mean'])} minus "
                f"the pre-extension effect on {e['mastery_metric']} at each arm's own length {_fmt(pre['mean'])}{dropped}."
            )
        for x in e["not_mastered"]:
            out.append(f"{x['run']} ({x['arm']}, mastery_acc {_fmt(x['mastery_acc'], False)}) {x['reason']}.")
    for rec in r.get("remedy") or []:
        for a in rec["arms"]:
            if "gap_primary" not in a or a["gap_primary"]["mean"] is None:
                continue
            frac = a.get("closed_fraction")
            out.append(
                f"Remedy {rec['recipe']!r} on the {FEATURE_NAMES.get(a['feature'], a['feature'])} arm: gap to the "
                f"baseline {_fmt(a['gap_primary']['mean'])} with the primary recipe, {_fmt(a['gap_recipe']['mean'])} "
                f"with the remedy (paired change {_fmt(a['paired']['mean'])}, 95% CI {_ci(a['paired']['ci95'])}, "
                f"n {a['paired']['n']})" + (f"; it closes {frac:.0%} of the gap." if frac is not None else ".")
            )
    return out


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


def _tested(effects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The axis effects with ``p_holm`` (paired t-test over seeds, Holm over the axes that have seeds) and
    ``family_size``; effects without seed replicates keep ``p_holm`` None."""
    effects = list(effects)
    per_seed = [summarise(dict(enumerate(e["per_seed"]))) if len(e.get("per_seed") or ()) > 1 else None for e in effects]
    for e, t in zip(effects, inference.family(per_seed)):
        e["p_holm"] = t["p_holm"] if t else None
        e["family_size"] = t["family_size"] if t else None
    return effects


def findings(df: pd.DataFrame, r: dict[str, Any], targets: Iterable[str] = (), covariates: Iterable[str] = ()) -> dict[str, Any]:
    """Findings for the analysis ``r`` of ``df`` (its ``target``) and for each extra metric in ``targets``."""
    short = int(r["short_ctx"])
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
        axes = [classify(a, seed_sd, m) for a in _tested(axis_effect(d, m, short, f, covariates) for f in varying)]
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
