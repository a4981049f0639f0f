"""Extension-only effects: what a feature costs in extension, net of what it costs in pretraining.

Per single-feature arm (a cell that differs from an all-features-off baseline cell in exactly one axis,
see :func:`archpool.analysis.effects.pairs`), paired by ``seed`` (same seed: same data order and init):

- own-length effect (``pre``): the target's metric (same task and mode, all distances) before extension at
  each arm's own pretraining length, ``base_<metric>@<pretrain_ctx>``, arm − base: what a short-context
  evaluation of the pretrained models shows;
- post effect at each evaluation length ``L``: the target's family at ``L`` after extension (same task,
  same distance filter when that column exists at ``L``, else the all-distance ``<task>@L``, same ``#``
  rung suffix), arm − base;
- extension-only effect, a difference in differences on one metric: ``d_s = (post_arm_s − post_base_s) −
  (before_arm_s − before_base_s)``, where "before" is the *same column* measured on the pretrained model
  (``base_<column>``, same task, length and distance filter) when the pool evaluated it, else the own-length
  value above (``did_from`` says which); mean, 95% t-interval over seeds, seed sd, n.

With an extension ladder the same is computed at every rung (``#ext<N>``), on ``#ladder_mean`` and on
``#ladder_auc``. A run with ``mastered == 0`` is excluded from the post effects and the differences in
differences (its seed's pair is dropped) and listed in ``not_mastered``: its long-context numbers measure
pretraining.

Remedy (a treatment such as a lower softmax temperature): for each extension recipe other than the primary
one (``<recipe>_<target>`` columns), the paired difference ``<recipe>_<target> − <target>`` per run (what the
treatment does to each arm), and for a single-feature arm its gap to the baseline with both untreated
(``target(arm) − target(base)``) and with both treated (``<recipe>_target(arm) − <recipe>_target(base)``),
per seed. A treated arm is never compared with an untreated baseline: without the baseline's treated
runs there is no treated gap.

Factorial: a design is a full factorial when its distinct configurations of the varying features number
``2^k`` (k varying features); otherwise regression coefficients over the four axes are not effects.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis import crossed, inference
from archpool.analysis import effects as fx
from archpool.analysis.answers import Answers, clipped, from_seeds
from archpool.analysis.mastery import MASTERY_METRIC, MASTERY_THRESHOLD, finite, mastery_frame, mastery_metric
from archpool.analysis.table import features
from archpool.axes import FEATURE_AXIS, FEATURES
from archpool.columns import BASE_PREFIX, LADDER_MEAN, RUNG_SEP, ColumnKey, keyed_columns, rung_budget, split_rung

NOT_MASTERED = "did not master before extension: its long-context numbers measure pretraining, not extension"
NOT_FACTORIAL = "not factorial: pairwise effects only"


def summarise(per_seed: dict[Any, float]) -> dict[str, Any]:
    """Mean, 95% t-interval over seeds, seed sd, n, the paired t-test's p (with its standard error and
    degrees of freedom) of per-seed values (``per_seed`` kept): an effect without its answers."""
    return from_seeds(per_seed)


def effect(
    answers: Answers | None,
    terms: list[tuple[str, list[str], float]],
    per_seed: dict[Any, float],
    pooled: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The effect ``Σ c · column(runs)`` (terms: column, runs, coefficient) on the seeds of ``per_seed``:
    from the scored answers with both sources of noise when ``answers`` cover every term, else from the
    per-seed values (:func:`summarise`). With ``pooled`` (:func:`pooled_seed`, from the same answers or the
    same per-seed values) the seed variance is the one pooled over every arm, for a contrast of one arm
    against another (``Σ c² = 2``)."""
    if answers is not None and per_seed:
        est = answers.contrast(terms, seeds=per_seed)
        if est is not None and set(est["per_seed"]) == set(per_seed):
            if pooled is not None and pooled.get("source") == "answers":
                comp = {"mean": est["mean"], "n_seeds": est["n"], "n_docs": est["n_docs"], **est["components"]}
                return _repooled(est, crossed.with_pooled_seed(comp, 2 * pooled["var_arm_seed"], pooled["df"]))
            return est
    est = summarise(per_seed)
    if pooled is not None and pooled.get("source") == "seeds" and est["n"] > 1:
        return _repooled(est, {"mean": est["mean"], "se": math.sqrt(2 * pooled["var_arm_seed"] / est["n"]), "df": pooled["df"]})
    return est


def _repooled(est: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """An effect's estimate with the standard error and degrees of freedom of its pooled-seed version."""
    return {
        **est,
        "se": c["se"],
        "df": c["df"],
        "ci95": clipped(crossed.interval(c["mean"], c["se"], c["df"]), est.get("range")),
        "p": crossed.t_test(c["mean"], c["se"], c["df"]),
        "seed_pooled": True,
    }


def pooled_seed(
    d: pd.DataFrame, answers: Answers | None, weights: list[tuple[str, float]], arms: list[list[str]]
) -> dict[str, Any] | None:
    """The seed-by-arm variance of ``Σ w · column`` pooled over ``arms`` (lists of runs, one per
    architecture): from the scored answers when they cover the columns, else from the per-seed values
    (:func:`archpool.analysis.crossed.arm_seed_variance`); None with fewer than three arms or two seeds."""
    if len(arms) < 3 or not weights:
        return None
    y = answers.arm_matrix(weights, arms) if answers is not None else None
    source = "answers"
    if y is None:
        source = "seeds"
        per_arm = [
            {s: sum(w * v[s] for v, (_, w) in zip(vals, weights)) for s in set.intersection(*(set(v) for v in vals))}
            for vals in ([by_seed(d, runs, d[c]) for c, _ in weights] for runs in arms)
        ]
        common = sorted(set.intersection(*(set(a) for a in per_arm))) if per_arm else []
        if len(common) < 2:
            return None
        y = np.array([[[a[s]] for s in common] for a in per_arm])
    r = crossed.arm_seed_variance(y)
    return None if r["var_arm_seed"] is None else {**r, "source": source, "n_seeds": int(y.shape[1])}


def wilson(k: int, n: int, z: float = 1.959963984540054) -> list[float | None]:
    """Wilson 95% interval of a proportion ``k / n``."""
    if n == 0:
        return [None, None]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def is_factorial(df: pd.DataFrame, short_ctx: int) -> bool:
    """True when the distinct configurations of the varying features form a full 2^k factorial."""
    f = features(df, short_ctx)
    varying = [c for c in FEATURES if f[c].nunique() > 1]
    return len(f[varying].drop_duplicates()) == 2 ** len(varying) if varying else True


def seeds_of(df: pd.DataFrame) -> pd.Series:
    return df["seed"] if "seed" in df.columns else pd.Series(0, index=df.index)


def by_seed(d: pd.DataFrame, runs: list[str], values: pd.Series) -> dict[Any, float]:
    """Mean of ``values`` (indexed like ``d``) over the given runs, per seed; seeds without a value left out."""
    sel = d["run"].isin(runs)
    v = pd.to_numeric(values[sel], errors="coerce")
    s = seeds_of(d)[sel]
    ok = v.notna()
    return {seed_key(k): float(x) for k, x in v[ok].groupby(s[ok], sort=True).mean().items()}


def plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return int(v) if float(v).is_integer() else float(v)
    return v


def seed_key(v: Any) -> Any:
    """A seed as a plain number: an integral float (results.csv reads seeds as floats) becomes an int."""
    v = plain(v)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _diff(a: dict[Any, float], b: dict[Any, float], seeds: set[Any] | None = None) -> dict[Any, float]:
    """``a[s] − b[s]`` over the seeds both have (and ``seeds``, when given)."""
    return {s: a[s] - b[s] for s in a if s in b and (seeds is None or s in seeds)}


def _has(df: pd.DataFrame, column: str) -> bool:
    return column in df.columns and pd.to_numeric(df[column], errors="coerce").notna().any()


def family(df: pd.DataFrame, target: str) -> dict[str, Any] | None:
    """The target's family: metric, filter, rung, and per rung suffix the column at each length
    (``{suffix: {length: column}}``); None for a target that is not a post-extension score at a length."""
    p = ColumnKey.parse(target)
    if p is None or p.base:
        return None
    keys = [k for c, k in keyed_columns(df.columns).items() if k.metric == p.metric and not k.base and _has(df, c)]
    lengths = {k.length for k in keys}
    columns: dict[str, dict[int, str]] = {}
    for suf in sorted({k.rung for k in keys}, key=_rung_order):
        at = {}
        for L in sorted(lengths):
            for c in (p.but(length=L, rung=suf).format(), p.but(length=L, rung=suf, filter="").format()):
                if _has(df, c):
                    at[L] = c
                    break
        if at:
            columns[suf] = at
    filt = f"[{p.filter}]" if p.filter else ""
    return {"metric": p.metric, "filter": filt, "rung": p.rung, "columns": columns}


def _rung_order(label: str) -> tuple[int, int]:
    b = rung_budget(label)
    return (0, b) if b is not None else (1, 0) if label == LADDER_MEAN else (2, 0)


def _arm_label(row: pd.Series, arch: dict[str, str] | None = None) -> str:
    """The pool's architecture name of a cell's runs when they share one (``qknorm_hd32``), else its features."""
    names = {arch.get(r) for r in row.get("runs", [])} if arch and isinstance(row.get("runs"), list) else set()
    if len(names) == 1 and None not in names:
        return str(names.pop())
    on = [f for f in FEATURES if row.get(f"f_{f}")]
    return "+".join(on) if on else "baseline"


def _archs(d: pd.DataFrame) -> dict[str, str]:
    """run -> the pool's architecture name (``arch`` column), when the table has one."""
    return dict(zip(d["run"], d["arch"].astype(str))) if "arch" in d.columns else {}


def _arms(d: pd.DataFrame, target: str, short_ctx: int) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The cells of ``d`` and the pairs (baseline cell → single-feature arm)."""
    c = fx.cells(d, target, short_ctx)
    ps = [p for p in fx.pairs(c, None) if p["feature"] is not None and not any(p["context"].values())]
    return c, ps


def own_length_values(d: pd.DataFrame, metric: str, fallback: pd.Series) -> tuple[pd.Series, str]:
    """Per run ``base_<metric>@<its pretraining length>`` (the target's metric before extension at the run's
    own length) and the name pattern it came from; ``fallback`` (the mastery accuracy) for a table without
    those columns."""
    if "pretrain_ctx" not in d.columns:
        return fallback, "mastery_acc"
    values = []
    for i in d.index:
        ctx = pd.to_numeric(pd.Series([d.at[i, "pretrain_ctx"]]), errors="coerce").iloc[0]
        col = f"{BASE_PREFIX}{metric}@{int(ctx)}" if pd.notna(ctx) else None
        values.append(pd.to_numeric(pd.Series([d.at[i, col]]), errors="coerce").iloc[0] if col in d.columns else np.nan)
    own = pd.Series(values, index=d.index, dtype=float)
    if own.notna().any():
        return own, f"{BASE_PREFIX}{metric}@<pretrain_ctx>"
    return fallback, "mastery_acc"


def mastery_summary(
    d: pd.DataFrame, short_ctx: int, metric: str = MASTERY_METRIC, threshold: float = MASTERY_THRESHOLD
) -> dict[str, Any] | None:
    """Per run mastery flags and per arm (configuration) the mean mastery_acc with a t-interval and the
    mastered fraction with a Wilson interval; None when no run has mastery columns."""
    mf = mastery_frame(d, metric, threshold)
    if mf["mastered"].notna().sum() == 0:
        return None
    runs = [
        {"run": r, **{k: plain(mf.at[i, k]) if pd.notna(mf.at[i, k]) else None for k in mf.columns}}
        for i, r in zip(d.index, d["run"])
    ]
    c = fx.cells(pd.concat([d, mf["mastery_acc"].astype(float).rename("_m")], axis=1), "_m", short_ctx)
    arms = []
    for _, row in c.iterrows():
        sel = d["run"].isin(row["runs"])
        acc = mf.loc[sel, "mastery_acc"].dropna().astype(float)
        flags = mf.loc[sel, "mastered"].dropna()
        s = summarise(dict(enumerate(acc)))
        k = int((flags == 1).sum())
        arms.append(
            {
                "arm": _arm_label(row, _archs(d)),
                "runs": list(row["runs"]),
                "n": s["n"],
                "mean": s["mean"],
                "ci95": s["ci95"],
                "n_mastered": k,
                "n_judged": len(flags),
                "mastered_ci95": wilson(k, len(flags)),
            }
        )
    return {"metric": metric, "threshold": threshold, "runs": runs, "arms": arms}


def _own_column(d: pd.DataFrame, runs: list[str], metric: str) -> str | None:
    """``base_<metric>@<ctx>`` when the runs share one pretraining length ``ctx`` and the table has it."""
    ctx = set(pd.to_numeric(d.loc[d["run"].isin(runs), "pretrain_ctx"], errors="coerce").dropna().astype(int))
    col = f"{BASE_PREFIX}{metric}@{ctx.pop()}" if len(ctx) == 1 else None
    return col if col is not None and _has(d, col) else None


def extension_effects(
    df: pd.DataFrame,
    target: str,
    short_ctx: int,
    metric: str | None = None,
    threshold: float = MASTERY_THRESHOLD,
    answers: Answers | None = None,
) -> dict[str, Any] | None:
    """Pre, post and extension-only (difference-in-differences) effects per single-feature arm (see the
    module docstring), each estimated from the scored ``answers`` when they cover it (seeds and
    documents as sources of noise), else from the per-seed values; None when the target is no score at
    a length or no run has mastery values."""
    d = df[df["state"] != "failed"].reset_index(drop=True) if "state" in df.columns else df.reset_index(drop=True)
    fam = family(d, target)
    if fam is None or len(d) < 2:
        return None
    metric = metric or mastery_metric(target, d.columns) or MASTERY_METRIC
    mf = mastery_frame(d, metric, threshold)
    if mf["mastered"].notna().sum() == 0:
        return None
    c, ps = _arms(d, target, short_ctx)
    ps.sort(
        key=lambda p: p["axis"] != FEATURE_AXIS.get(p["feature"])
    )  # a feature's own axis first (QK-norm before QK-norm with post-norm)
    f = features(d, short_ctx).add_prefix("f_")
    not_mastered = [
        {
            "run": d.at[i, "run"],
            "arm": _arm_label(f.loc[i]),
            "mastery_acc": finite(mf.at[i, "mastery_acc"]),
            "mastery_min_bucket": finite(mf.at[i, "mastery_min_bucket"]),
            "reason": NOT_MASTERED,
        }
        for i in d.index
        if mf.at[i, "mastered"] == 0
    ]
    bad = {x["run"] for x in not_mastered}
    own, own_from = own_length_values(d, fam["metric"], mf["mastery_acc"])
    arms = [runs for runs in ([r for r in row if r not in bad] for row in c["runs"]) if runs]
    pooled: dict[str, dict[str, Any] | None] = {}  # per column (or difference of columns): the seed variance over every arm
    axes = []
    for p in ps:
        base, arm = list(p["runs_from"]), list(p["runs_to"])
        pre = _diff(by_seed(d, arm, own), by_seed(d, base, own))
        own_arm, own_base = _own_column(d, arm, fam["metric"]), _own_column(d, base, fam["metric"])
        pre_terms = [(own_arm, arm, 1.0), (own_base, base, -1.0)] if own_arm and own_base else []
        involved = d["run"].isin(base + arm)
        dropped = sorted({seed_key(s) for s in seeds_of(d)[involved & d["run"].isin(bad)]})
        kept = {seed_key(s) for s in seeds_of(d)[involved]} - set(dropped)
        rows = []
        for suf, at in fam["columns"].items():
            for L, col in at.items():
                key = ColumnKey.parse(col)
                assert key is not None  # a column keyed_columns parsed
                before_col = key.but(base=True, rung="").format()
                pool_post = pooled.setdefault(col, pooled_seed(d, answers, [(col, 1.0)], arms))
                base_values = {k: v for k, v in by_seed(d, base, d[col]).items() if k in kept}
                post = _diff(by_seed(d, arm, d[col]), base_values)
                post_terms = [(col, arm, 1.0), (col, base, -1.0)]
                pool_before = pool_did = None
                if _has(d, before_col):
                    pool_before = pooled.setdefault(before_col, pooled_seed(d, answers, [(before_col, 1.0)], arms))
                    pool_did = pooled.setdefault(
                        f"{col}-{before_col}", pooled_seed(d, answers, [(col, 1.0), (before_col, -1.0)], arms)
                    )
                    before, did_from = _diff(by_seed(d, arm, d[before_col]), by_seed(d, base, d[before_col]), kept), before_col
                    before_terms = [(before_col, arm, 1.0), (before_col, base, -1.0)]
                else:
                    before, did_from, before_terms = pre, own_from, pre_terms
                did = {s: post[s] - before[s] for s in post if s in before}
                did_terms = post_terms + [(c, r, -w) for c, r, w in before_terms] if before_terms else []
                rows.append(
                    {
                        "rung": suf,
                        "length": L,
                        "column": col,
                        "is_target": col == target,
                        "base_mean": float(np.mean([base_values[k] for k in post])) if post else None,
                        "post": effect(answers, post_terms, post, pool_post),
                        "before": effect(answers, before_terms, {s: before[s] for s in did}, pool_before)
                        if before_terms
                        else summarise({s: before[s] for s in did}),
                        "did_from": did_from,
                        "did": effect(answers, did_terms, did, pool_did) if did_terms else summarise(did),
                    }
                )
        axes.append(
            {
                "arm": _arm_label(pd.Series({"runs": arm}), _archs(d)),
                "axis": p["axis"],
                "feature": p["feature"],
                "from": p["from"],
                "to": p["to"],
                "runs_base": base,
                "runs_arm": arm,
                "pre": effect(answers, pre_terms, pre) if pre_terms else summarise(pre),
                "dropped_seeds": dropped,
                "effects": rows,
            }
        )
    return {
        "target": target,
        "metric": fam["metric"],
        "filter": fam["filter"],
        "mastery_metric": metric,
        "own_length_from": own_from,
        "threshold": threshold,
        "rungs": list(fam["columns"]),
        "axes": axes,
        "not_mastered": not_mastered,
        "n_cells": len(c),
    }


def remedy(
    df: pd.DataFrame,
    target: str,
    short_ctx: int,
    metric: str | None = None,
    threshold: float = MASTERY_THRESHOLD,
    answers: Answers | None = None,
    min_effect: float = inference.MIN_EFFECT,
) -> list[dict[str, Any]]:
    """Per extension recipe other than the primary one (``<recipe>_<target>`` columns with a value, or the
    target's metric at the recipe's last rung: :func:`recipe_columns`), per configuration that has it: the
    paired difference recipe − primary, and for a single-feature arm its gap to the baseline with both
    untreated and with both treated (see the module docstring). Runs that did not master their own length
    are left out when mastery is known."""
    if target not in df.columns:
        return []
    d = df[df["state"] != "failed"].reset_index(drop=True) if "state" in df.columns else df.reset_index(drop=True)
    pairs = recipe_columns(d, target)
    if not pairs or len(d) < 2:
        return []
    metric = metric or mastery_metric(target, d.columns) or MASTERY_METRIC
    mf = mastery_frame(d, metric, threshold)
    bad = set(d.loc[mf["mastered"] == 0, "run"])
    c, ps = _arms(d, target, short_ctx)
    base_of = {tuple(p["runs_to"]): p for p in ps}
    out = []
    for prefix, (col, untreated) in pairs.items():
        y = d[untreated].where(~d["run"].isin(bad))
        z = d[col].where(~d["run"].isin(bad))
        arms = []
        for _, row in c.iterrows():
            runs = list(row["runs"])
            treated = by_seed(d, runs, z)
            if not treated:
                continue
            primary = by_seed(d, runs, y)
            entry: dict[str, Any] = {
                "arm": _arm_label(row, _archs(d)),
                "runs": runs,
                "paired": effect(answers, [(col, runs, 1.0), (untreated, runs, -1.0)], _diff(treated, primary)),
            }
            p = base_of.get(tuple(runs))
            if p is not None:
                base_runs = list(p["runs_from"])
                gap_primary = _diff(primary, by_seed(d, base_runs, y))
                gap_recipe = _diff(treated, by_seed(d, base_runs, z))  # both treated: a controlled gap
                common = set(gap_primary) & set(gap_recipe) if gap_recipe else set(gap_primary)
                gp = effect(
                    answers,
                    [(untreated, runs, 1.0), (untreated, base_runs, -1.0)],
                    {s: gap_primary[s] for s in gap_primary if s in common},
                )
                gr = effect(
                    answers, [(col, runs, 1.0), (col, base_runs, -1.0)], {s: gap_recipe[s] for s in gap_recipe if s in common}
                )
                entry.update(
                    axis=p["axis"],
                    feature=p["feature"],
                    runs_base=base_runs,
                    base_treated=bool(by_seed(d, base_runs, z)),
                    gap_primary=gp,
                    gap_recipe=gr,
                )
            arms.append(entry)
        if arms:
            _close_gaps(arms, min_effect)
            out.append({"recipe": prefix[:-1], "column": col, "column_untreated": untreated, "arms": arms})
    return out


def _close_gaps(arms: list[dict[str, Any]], min_effect: float) -> None:
    """Each arm's share of its untreated gap that the treatment closes (``1 − treated gap / untreated
    gap``), only where the untreated gap is an effect (beyond noise after Holm over the arms and at
    least ``min_effect``); else None with the reason (``closed_note``): a ratio of a gap that is not
    there is noise."""
    gapped = [a for a in arms if "gap_primary" in a]
    tests = inference.family([a["gap_primary"] for a in gapped], min_effect=min_effect)
    for a, t in zip(gapped, tests):
        gp, gr = a["gap_primary"], a["gap_recipe"]
        a["gap_primary_test"] = t
        claim_ = (t or {}).get("claim")
        if claim_ == inference.EFFECT and gp["mean"] and gr["mean"] is not None and gr["n"]:
            a["closed_fraction"], a["closed_note"] = 1 - gr["mean"] / gp["mean"], ""
        else:
            a["closed_fraction"] = None
            a["closed_note"] = "no share: the untreated gap is " + {
                inference.BELOW_INTEREST: f"beyond noise but smaller than the smallest effect of interest ({min_effect:g})",
                inference.EQUIVALENT: f"no larger than the smallest effect of interest ({min_effect:g})",
                inference.UNRESOLVED: "not beyond noise",
            }.get(claim_ or "", "not tested")


def recipe_columns(d: pd.DataFrame, target: str) -> dict[str, tuple[str, str]]:
    """Per second recipe (``<recipe>_`` prefix) the pair (its column, the primary recipe's column) it is compared
    on: the target itself when the recipe has it, else the target's metric at the recipe's last rung that the
    primary ladder also has (a treatment trained for fewer steps is compared at its own budget)."""
    stem, _ = split_rung(target)
    out: dict[str, tuple[str, str]] = {}
    found: dict[str, list[tuple[int, str, str]]] = {}
    for c in d.columns:
        c_stem, rung = split_rung(c)
        if c == target or not c_stem.endswith(stem):
            continue
        prefix = c_stem[: -len(stem)]
        if not prefix.endswith("_") or prefix == BASE_PREFIX or not _has(d, c):
            continue
        if c == prefix + target:
            out[prefix] = (c, target)
            continue
        budget = rung_budget(rung)
        primary = f"{stem}{RUNG_SEP}{rung}"
        if budget is not None and _has(d, primary):
            found.setdefault(prefix, []).append((budget, c, primary))
    for prefix, cols in found.items():
        if prefix not in out:
            _, c, primary = max(cols)
            out[prefix] = (c, primary)
    return dict(sorted(out.items()))
