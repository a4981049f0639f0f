"""``analyze``: every statistic of the study (docs/paper.md §4) and those its critics asked for (§5), as one dict.

Models (all OLS with an intercept, 95% CIs from statsmodels, LOO R² from scikit-learn):

- ``feature_count``: target ~ count, count = [QK-norm] + [GQA] + [SWA] + [pretrain_ctx ≤ short_ctx];
- ``four_axes``: target ~ the four 0/1 indicators (qk_norm, gqa, swa, short_ctx);
- ``four_axes_kv_ratio``: the same with the KV-head ratio n_kv_heads / n_heads in place of the GQA indicator;
- ``swa_x_gqa``: ``four_axes`` plus the swa·gqa product (the regression form of the paper's interaction);
- every other numeric metric column as a single predictor (the paper's table 2), on the runs that have it.

Constant predictors are dropped from a model (listed in ``dropped_constant``). When the distinct
configurations are not a full factorial over the varying features (``factorial`` false), the four-axis
fits are kept as predictors (R²) only and marked ``not factorial: pairwise effects only``.

Extension (:mod:`archpool.analysis.extension`, :mod:`archpool.analysis.mastery`): ``mastery`` (per run
flags, per arm mean mastery accuracy with a t-interval and mastered fraction with a Wilson interval),
``extension_effects`` (pre, post and difference-in-differences effects per single-feature arm) and
``remedy`` (other extension recipes against the primary one); None / empty without their columns.

The result is data; :mod:`archpool.analysis.summary_text` renders it as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis import agreement, carry, compound, headroom, inference, stats
from archpool.analysis import effects as fx
from archpool.analysis import extension as ext
from archpool.analysis.answers import Answers
from archpool.analysis.mastery import MASTERY_COLUMNS, MASTERY_METRIC, mastery_metric
from archpool.analysis.table import (
    ENTROPY_COLUMNS,
    SINK_COLUMNS,
    ConstantTargetError,
    TableError,
    default_short_ctx,
    features,
    find_column,
    is_design,
    metric_columns,
)
from archpool.axes import FEATURES, GQA, N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SHORT_CTX, SWA
from archpool.columns import LENGTH_RE, ColumnKey, is_pre_extension, lower_is_better, rung_budget, split_rung
from archpool.study import HEADROOM

DEFAULT_TARGETS = ("helmet@32768", "helmet_32k", "helmet", "long_score", "ruler@32768", "ruler")
MIN_RUNS = 3


# measured on the pretrained model (or during pretraining) whatever their names say
PRE_COLUMNS = ("pretrain_loss", "stability", *MASTERY_COLUMNS)


def phase(column: str) -> str:
    """``pre`` for pre-extension metrics (``base_`` prefix, ``_pre`` suffix, or a pretraining
    measurement such as ``pretrain_loss``), else ``post``."""
    return "pre" if is_pre_extension(column) or column in PRE_COLUMNS else "post"


def pre_extension(predictors: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Pre-extension single predictors of the (post-extension) target, best leave-one-out R² first:
    "can I tell before paying for extension?"."""
    rows = [
        {
            "predictor": k,
            "n": p["n"],
            "n_groups": p.get("n_groups"),
            "r2": p.get("r2"),
            "loo_r2": p.get("loo_r2"),
            "r2_without": p.get("r2_without"),
            "coef": p.get("coef"),
            "ci95": p.get("ci95"),
            "p": p.get("p"),
        }
        for k, p in predictors.items()
        if p.get("kind") == "metric" and p.get("phase") == "pre"
    ]
    return sorted(rows, key=lambda r: -(r["loo_r2"] if r["loo_r2"] is not None else float("-inf")))


def length_columns(df: pd.DataFrame) -> dict[str, dict[str, dict[int, str]]]:
    """Score-by-context-length columns: ``{metric: {"pre" | "post": {length: column}}}``.

    An extension ladder's rung columns (``<metric>@<length>#ext<N>``) are not length columns; where a metric
    has no plain post-extension column at a length, its final rung (the largest ``N``) stands for "post"."""
    out: dict[str, dict[str, dict[int, str]]] = {}
    final: dict[str, dict[int, tuple[int, str]]] = {}
    for c in metric_columns(df):
        stem, rung = split_rung(c)
        m = LENGTH_RE.match(stem)
        if not m:
            continue
        if rung:
            budget = rung_budget(rung)
            if budget is not None and not m["base"] and m["phase"] is None:
                at = final.setdefault(m["metric"], {})
                length = int(m["length"])
                if length not in at or budget > at[length][0]:
                    at[length] = (budget, c)
            continue
        ph = m["phase"] or ("pre" if m["base"] else "post")
        out.setdefault(m["metric"], {}).setdefault(ph, {})[int(m["length"])] = c
    for metric, cols in final.items():
        post = out.setdefault(metric, {}).setdefault("post", {})
        for length, (_, c) in cols.items():
            post.setdefault(length, c)
    return {k: {p: dict(sorted(v.items())) for p, v in d.items()} for k, d in sorted(out.items())}


def choose_target(df: pd.DataFrame, target: str | None) -> str:
    """The requested target (validated), else a default long-context column, else the only metric."""
    metrics = metric_columns(df)
    if target is not None:
        if target not in df.columns:
            raise TableError(
                f"column {target!r}: target not in the table; metric columns: {', '.join(metrics) or '(none)'}", column=target
            )
        if is_design(target):
            raise TableError(
                f"column {target!r}: a design column, not a metric; choose one of: {', '.join(metrics) or '(none)'}",
                column=target,
            )
        if target not in metrics:
            raise TableError(f"column {target!r}: target is not numeric", column=target)
        return target
    for t in DEFAULT_TARGETS:
        if t in metrics:
            return t
    if len(metrics) == 1:
        return metrics[0]
    raise TableError(
        f"no default target column ({', '.join(DEFAULT_TARGETS)}); pass --target one of: "
        f"{', '.join(metrics) or '(no metric columns)'}",
        column="target",
    )


def _usable(df: pd.DataFrame, target: str) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    failed = df["state"] == "failed"
    missing = df[target].isna() & ~failed
    excluded = [
        {"run": r, "reason": f"failed: {e}" if e else "failed"} for r, e in zip(df.loc[failed, "run"], df.loc[failed, "error"])
    ]
    excluded += [
        {"run": r, "reason": f"no value in {target!r} (state {s})"}
        for r, s in zip(df.loc[missing, "run"], df.loc[missing, "state"])
    ]
    return df[~failed & ~missing].reset_index(drop=True), excluded


def analyze(
    df: pd.DataFrame,
    target: str | None = None,
    short_ctx: int | None = None,
    covariates: Iterable[str] = (),
    answers: Answers | None = None,
    min_effect: float = inference.MIN_EFFECT,
    window: tuple[float, float] = HEADROOM,
) -> dict[str, Any]:
    """The full analysis of a validated results table (see :func:`archpool.analysis.table.load_results`);
    with its scored ``answers`` (:mod:`archpool.analysis.answers`) the extension effects carry both
    sources of noise, else they fall back to seed means. ``min_effect``: the smallest effect of interest;
    ``window``: the headroom rule's window for the baseline at the target."""
    target = choose_target(df, target)
    covariates = _covariates(df, target, covariates)
    short = int(short_ctx) if short_ctx is not None else default_short_ctx(df)
    if answers is not None:
        answers.check(df, [target])
    d, excluded = _usable(df, target)
    y = _fit_target(d, target, excluded, covariates)
    f = features(d, short)
    groups = fx.arch_labels(d)
    predictors, skipped = _predictors(d, f, y, target, covariates, groups)

    inter_X = f[list(FEATURES)].assign(swa_x_gqa=f[SWA] * f[GQA])
    interaction_fit = stats.fit_multi(inter_X, y, groups)

    factorial = ext.is_factorial(d, short)
    if not factorial:
        for name in ("four_axes", "four_axes_kv_ratio"):
            predictors[name]["note"] = ext.NOT_FACTORIAL
    mmetric = mastery_metric(target, df.columns) or MASTERY_METRIC

    c = fx.cells(d, target, short, tuple(covariates))
    noise = fx.spread(d, target, c)
    sd = noise["seed_sd"]
    ps = fx.pairs(c, sd)
    inter = fx.interactions(ps, sd)
    for it in inter:
        if it["stressed"]:
            it["regression"] = (interaction_fit.get("coefs") or {}).get("swa_x_gqa")

    result: dict[str, Any] = {
        "n": len(d),
        "target": target,
        "short_ctx": short,
        "source": df.attrs.get("source"),
        "predictors": predictors,
        "skipped_predictors": skipped,
        "pre_extension": pre_extension(predictors),
        "interaction_model": interaction_fit,
        "pairs": ps,
        "axis_effects": fx.axis_effects(ps, sd),
        "feature_effects": fx.feature_effects(ps, sd),
        "interactions": inter,
        "spread": noise,
        "runs": _run_rows(d, f, target, predictors["feature_count"], groups),
        "excluded": excluded,
        "failed": list(df.attrs.get("failed", [])),
        "confounds": None,
        "attention": _attention(d, f, y, target),
        "by_length": length_columns(df),
        "factorial": factorial,
        "mastery": ext.mastery_summary(d, short, mmetric),
        "extension_effects": ext.extension_effects(df, target, short, mmetric, answers=answers),
        "remedy": ext.remedy(df, target, short, mmetric, answers=answers, min_effect=min_effect),
        "co_target": _co_target(df, target, short, mmetric, answers),
        "headroom": headroom.check(df, target, window),
        "agreement": agreement.agreement(df, target, short),
        "carry": carry.carry_summary(df, target, short),
        "compounding": compound.compounding(df, target, short, answers, min_effect, lower_is_better(target)),
        "versus_baseline": compound.versus_baseline(df, target, short, answers),
        "inference": inference_basis(d, answers, groups, min_effect),
        "notes": _notes(d, f, noise, ps),
    }
    if not factorial:
        result["notes"].append(
            f"{ext.NOT_FACTORIAL}: the distinct configurations are not a full factorial over the varying features, "
            "so the four-axis regression is kept as a predictor (R²) only, not read as effects"
        )
    if covariates:
        covars = stats.design_with_covariates(d, covariates)
        result["confounds"] = stats.confound_check(f["feature_count"], y, covars)
    return result


def _covariates(df: pd.DataFrame, target: str, covariates: Iterable[str]) -> list[str]:
    """The covariate columns asked for, each in the table and none the target or one of its rungs."""
    covariates = [c.strip() for c in covariates if c.strip()]
    for c in covariates:
        if c not in df.columns:
            raise TableError(f"column {c!r}: covariate not in the table; columns: {', '.join(df.columns)}", column=c)
        if split_rung(c)[0] == split_rung(target)[0]:  # "survives: no" would be reported as a finding
            raise TableError(f"column {c!r}: the target (or one of its ladder rungs) cannot be its own covariate", column=c)
    return covariates


def _fit_target(d: pd.DataFrame, target: str, excluded: list[dict[str, str]], covariates: list[str]) -> pd.Series:
    """The target over the usable runs; TableError unless there are enough runs, it varies and every
    covariate has a value."""
    if len(d) < MIN_RUNS:
        raise TableError(
            f"column {target!r}: need at least {MIN_RUNS} runs with a value to fit, got {len(d)}"
            + (f" (excluded: {', '.join(e['run'] for e in excluded)})" if excluded else ""),
            column=target,
        )
    y = d[target].astype(float)
    if y.nunique() < 2:
        raise ConstantTargetError(f"column {target!r}: the target is constant over the {len(d)} runs", column=target)
    for c in covariates:
        if d[c].isna().any():
            i = int(np.flatnonzero(d[c].isna())[0])
            raise TableError(f"column {c!r}, run {d['run'][i]!r}: covariate is empty", column=c)
    return y


def _predictors(
    d: pd.DataFrame, f: pd.DataFrame, y: pd.Series, target: str, covariates: list[str], groups: list[str]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """The count and four-axis models and every other metric as a single predictor, best R² first,
    cross-validated by architecture (``groups``); with the metric columns skipped (too few runs with a
    value, or constant)."""
    predictors: dict[str, dict[str, Any]] = {
        "feature_count": {"kind": "count", **stats.fit_single(f["feature_count"], y, "feature_count", groups)},
        "four_axes": {"kind": "axes", **stats.fit_multi(f[list(FEATURES)], y, groups)},
        "four_axes_kv_ratio": {"kind": "axes", **stats.fit_multi(f[[QK_NORM, "kv_ratio", SWA, SHORT_CTX]], y, groups)},
    }
    skipped = []
    stem = split_rung(target)[0]
    for c in metric_columns(d):
        if c == target or c in covariates or split_rung(c)[0] == stem:  # the target's own ladder rungs explain nothing
            continue
        x = d[c].astype(float)
        ok = x.notna()
        if ok.sum() < MIN_RUNS or x[ok].nunique() < 2 or y[ok].nunique() < 2:
            skipped.append({"column": c, "reason": f"{int(ok.sum())} runs with a value" if ok.sum() < MIN_RUNS else "constant"})
            continue
        predictors[c] = {"kind": "metric", "phase": phase(c), **stats.fit_single(x, y, c, groups)}

    def by_r2(k: str) -> float:
        r2 = predictors[k].get("r2")
        return -(r2 if r2 is not None else -1)

    order = sorted(predictors, key=by_r2)
    return {k: predictors[k] for k in order}, skipped


def co_target_of(target: str, columns: Iterable[str]) -> str | None:
    """The gold log-probability twin of an accuracy target (``mqar_lp@…`` for ``mqar_acc@…``), when the
    table has it: the same answers, scored by how sure the model is instead of whether it is right."""
    key = ColumnKey.parse(target)
    if key is None or not key.metric.endswith("_acc"):
        return None
    twin = key.but(metric=key.metric[: -len("_acc")] + "_lp").format()
    return twin if twin in set(columns) else None


def _co_target(df: pd.DataFrame, target: str, short: int, mmetric: str, answers: Answers | None) -> dict[str, Any] | None:
    """The extension effects on the target's log-probability twin (None without one)."""
    co = co_target_of(target, df.columns)
    if co is None:
        return None
    return {"column": co, "extension_effects": ext.extension_effects(df, co, short, mmetric, answers=answers)}


def inference_basis(d: pd.DataFrame, answers: Answers | None, groups: list[str], min_effect: float) -> dict[str, Any]:
    """What the effects' intervals and tests rest on, in words the report repeats."""
    seeds = int(d.groupby(pd.Series(groups, index=d.index)).size().max()) if len(d) else 0
    archs = len(set(groups))
    if answers is not None and seeds > 1:
        source, words = (
            "answers",
            (
                f"{answers.n:,} scored answers ({Path(answers.source).name or 'answers'}): each effect's interval and test carry the noise of "
                "the seeds (pooled over the arms) and of the evaluation documents"
            ),
        )
    elif answers is not None:
        source, words = (
            "answers",
            (
                f"{answers.n:,} scored answers ({Path(answers.source).name or 'answers'}), one seed per architecture: each "
                "effect's interval carries the noise of the evaluation documents only; the seeds' is not measured, so "
                "the intervals are too narrow by it"
            ),
        )
    elif seeds > 1:
        source, words = (
            "seeds",
            (
                "seed means: no answers table beside the results (items.parquet), so each effect's interval and test "
                "see only the spread of its per-seed differences, not the answers behind them"
            ),
        )
    else:
        source, words = (
            "single runs",
            (
                "single runs: one run per architecture and no answers table, so a matched-pair effect is one "
                "difference with no noise estimate of its own; the only intervals are the regressions'"
            ),
        )
    cv = (
        f"predictors are cross-validated by architecture ({archs} architectures, {seeds} seed(s) each at most)"
        if seeds > 1
        else f"one run per architecture ({archs}): leave-one-architecture-out is leave-one-run-out"
    )
    return {"source": source, "words": words, "cross_validation": cv, "min_effect": min_effect, "n_archs": archs}


def design_summary(df: pd.DataFrame, short_ctx: int | None = None) -> dict[str, Any]:
    """Feature count per run of a table without metrics (e.g. olmpool-architectures.csv): nothing to fit."""
    short = int(short_ctx) if short_ctx is not None else default_short_ctx(df)
    f = features(df, short)
    runs = [
        {"run": r, **{k: int(f[k][i]) for k in (*FEATURES, "feature_count")}, "kv_ratio": float(f["kv_ratio"][i])}
        for i, r in enumerate(df["run"])
    ]
    return {
        "n": len(df),
        "target": None,
        "short_ctx": short,
        "runs": runs,
        "notes": ["no metric columns: feature counts only, nothing to fit"],
    }


def _run_rows(
    d: pd.DataFrame, f: pd.DataFrame, target: str, count_fit: dict[str, Any], groups: list[str]
) -> list[dict[str, Any]]:
    """Per run: design, feature count, target, and the count model's in-sample and held-out predictions
    (its architecture left out)."""
    count = f[["feature_count"]]
    loo = stats.loo_predictions(count, d[target], groups) if f["feature_count"].nunique() > 1 else [None] * len(d)
    fitted = (
        (count_fit["intercept"] + count_fit["coef"] * f["feature_count"])
        if count_fit.get("coef") is not None
        else [None] * len(d)
    )
    cols = [
        c
        for c in ("run", "arch", SWA, QK_NORM, NORM, N_KV_HEADS, "n_heads", PRETRAIN_CTX, "seed", "init", "fp8")
        if c in d.columns
    ]
    rows = []
    for i in range(len(d)):
        r = {c: _plain(d[c][i]) for c in cols}
        r.update(
            {
                "feature_count": int(f["feature_count"][i]),
                "kv_ratio": float(f["kv_ratio"][i]),
                "target": float(d[target][i]),
                "fit_count": _plain(fitted[i]),
                "loo_count": _plain(loo[i]),
            }
        )
        rows.append(r)
    return rows


def _plain(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    return v


def _attention(d: pd.DataFrame, f: pd.DataFrame, y: pd.Series, target: str) -> dict[str, Any] | None:
    sink, ent = find_column(d, SINK_COLUMNS), find_column(d, ENTROPY_COLUMNS)
    if not sink and not ent:
        return None
    out: dict[str, Any] = {"sink_column": sink, "entropy_column": ent}
    if sink:
        out["sink_vs_target"] = stats.fit_single(d[sink].astype(float), y, sink)
        out["sink_by_qk_norm"] = {k: float(v) for k, v in d.groupby(QK_NORM)[sink].mean().items()}
    if ent:
        out["entropy_vs_target"] = stats.fit_single(d[ent].astype(float), y, ent)
        out["entropy_by_qk_norm"] = {k: float(v) for k, v in d.groupby(QK_NORM)[ent].mean().items()}
    if sink and ent:
        ok = d[sink].notna() & d[ent].notna()
        out["sink_entropy_corr"] = float(np.corrcoef(d[sink][ok], d[ent][ok])[0, 1]) if ok.sum() > 2 else None
    return out


def _notes(d: pd.DataFrame, f: pd.DataFrame, noise: dict[str, Any], ps: list[dict[str, Any]]) -> list[str]:
    notes = []
    if "feature_count" in d.columns:
        differ = int((pd.to_numeric(d["feature_count"], errors="coerce") != f["feature_count"]).sum())
        if differ:
            notes.append(
                f"the table's feature_count differs from the recomputed one for {differ} runs "
                "(different short-context threshold? see --short-ctx); the recomputed count is used"
            )
    if noise["seed_sd"] is None:
        notes.append("no seed replicates: effects have no measured noise floor (give the pool two or more seeds)")
    if not ps:
        notes.append("no matched pairs: no two configurations differ in exactly one axis with equal confounds")
    return notes


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    return v if v is None or isinstance(v, str) else str(v)


def to_json(r: dict[str, Any], indent: int | None = 2) -> str:
    """Strict JSON of an :func:`analyze` result (NaN and infinities become null)."""
    return json.dumps(_clean(r), indent=indent, allow_nan=False)
