"""A self-contained HTML report of an analysis (a jinja2 template with autoescape): figures embedded as base64
PNG, every text HTML-escaped.

``write_report`` writes::

    DIR/report.html      the page (opens offline: no scripts, no external files)
    DIR/figures/*.png    each figure
    DIR/tables/*.csv     each table
    DIR/analysis.json    the full analysis result
"""

from __future__ import annotations

import base64
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from archpool.analysis import inference
from archpool.analysis.answers import Answers, load_answers
from archpool.analysis.summary import analyze, to_json
from archpool.analysis.table import load_results
from archpool.columns import ColumnKey
from archpool.csvsafe import safe_frame
from archpool.errors import DataError
from archpool.io import atomic_write_bytes, atomic_write_text, owned_dir
from archpool.report import archs, scale, transfer
from archpool.report import figures as figs
from archpool.report import findings as fnd
from archpool.report import verdict as vd
from archpool.report.context import ReportContext, duration, environment
from archpool.report.findings import FEATURE_NAMES, lower_is_better
from archpool.report.verdict import AxisVerdict
from archpool.study import MIN_EFFECT

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.flag td{background:#fff3cd}
td,th{overflow-wrap:break-word;max-width:22em}td.n{white-space:nowrap}table{max-width:100%}
img{max-width:100%;height:auto;border:1px solid #eee}.scroll{overflow-x:auto;max-width:100%}.note{color:#555;font-size:.9em}.fail{color:#b00}
section.findings{background:#f7f9fc;border:1px solid #dde3ee;padding:.2em 1em .6em}section.findings li{margin:.35em 0}
.warn{background:#fff3cd;border:1px solid #e8d08a;padding:.4em .6em}
.sub{color:#444;margin-top:-.5em}section.verdict{background:#f7f9fc;border:1px solid #dde3ee;padding:.2em 1em .8em}
ul.headline{font-size:1.05em}ul.headline li{margin:.3em 0}table.verdict-table{font-size:.9em}table.verdict-table td{vertical-align:top}
td.meaning{min-width:11em;max-width:22em}.wrap{white-space:normal}details{margin:.4em 0}summary{cursor:pointer;color:#235}dl.repro{display:grid;
grid-template-columns:max-content 1fr;gap:.15em 1em}dl.repro dt{font-weight:600}dl.repro dd{margin:0}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.8em}figure{margin:1em 0}
"""


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, (bool, np.bool_))


def _ci(ci: list | None) -> list:
    return ci if ci else [None, None]


def _alias(name: str, aliases: dict[str, list[str]]) -> str:
    """A metric name with the identical columns merged into it: ``a (= b = c)``."""
    return f"{name} (= {' = '.join(aliases[name])})" if aliases.get(name) else name


def tables(r: dict[str, Any], aliases: dict[str, list[str]] | None = None) -> dict[str, pd.DataFrame]:
    """Every table of the report, as DataFrames (also written as CSV)."""
    aliases = aliases or {}
    t: dict[str, pd.DataFrame] = {}
    t["runs"] = pd.DataFrame(r["runs"]).rename(columns={"target": r["target"]})
    t["predictors"] = pd.DataFrame(
        [
            {
                "predictor": _alias(k, aliases),
                "kind": p["kind"],
                "phase": p.get("phase", ""),
                "n": p["n"],
                "n_groups": p.get("n_groups"),
                "r2": p.get("r2"),
                "loo_r2": p.get("loo_r2"),
                "coef": p.get("coef"),
                "ci95_lo": _ci(p.get("ci95"))[0],
                "ci95_hi": _ci(p.get("ci95"))[1],
                "p": p.get("p"),
                "note": p.get("note", ""),
            }
            for k, p in r["predictors"].items()
        ]
    )
    coef_rows = []
    for model in ("feature_count", "four_axes", "four_axes_kv_ratio"):
        p = r["predictors"][model]
        if model != "feature_count" and not r.get("factorial", True):
            continue  # not a factorial design: the four-axis fit is a predictor (R²), not effects
        if model == "feature_count" and p.get("coef") is not None:
            coef_rows.append(
                dict(
                    model=model,
                    term="const",
                    coef=p["intercept"],
                    se=None,
                    ci95_lo=p["intercept_ci95"][0],
                    ci95_hi=p["intercept_ci95"][1],
                    p=None,
                )
            )
            coef_rows.append(
                dict(
                    model=model,
                    term="feature_count",
                    coef=p["coef"],
                    se=p["se"],
                    ci95_lo=p["ci95"][0],
                    ci95_hi=p["ci95"][1],
                    p=p["p"],
                )
            )
        for term, v in (p.get("coefs") or {}).items():
            coef_rows.append(
                dict(model=model, term=term, coef=v["coef"], se=v["se"], ci95_lo=v["ci95"][0], ci95_hi=v["ci95"][1], p=v["p"])
            )
    for term, v in (r["interaction_model"].get("coefs") or {}).items():
        coef_rows.append(
            dict(model="swa_x_gqa", term=term, coef=v["coef"], se=v["se"], ci95_lo=v["ci95"][0], ci95_hi=v["ci95"][1], p=v["p"])
        )
    pre = r.get("pre_extension") or []
    t["pre_extension"] = pd.DataFrame(
        [
            {
                "pre-extension predictor": _alias(p["predictor"], aliases),
                "n": p["n"],
                "n_groups": p.get("n_groups"),
                "r2": p["r2"],
                "loo_r2": p["loo_r2"],
                "coef": p["coef"],
                "ci95_lo": _ci(p["ci95"])[0],
                "ci95_hi": _ci(p["ci95"])[1],
                "p": p.get("p"),
                "p_holm": adj,
            }
            for p, adj in zip(pre, inference.holm([p.get("p") for p in pre]))
        ]
    )
    known = t["predictors"][(t["predictors"]["kind"] != "metric") | (t["predictors"]["phase"] == "pre")].copy()
    known["p_holm"] = inference.holm([None if pd.isna(x) else float(x) for x in known["p"]])
    t["predictors_before_extension"] = known.reset_index(drop=True)
    t["coefficients"] = pd.DataFrame(coef_rows)
    t["axis_effects"] = pd.DataFrame(r["axis_effects"])
    t["feature_effects"] = pd.DataFrame(r["feature_effects"])
    t["interactions"] = pd.DataFrame([{k: v for k, v in i.items() if k != "regression"} for i in r["interactions"]])
    t["pairs"] = pd.DataFrame(
        [
            {
                **{k: v for k, v in p.items() if k not in ("context", "runs_from", "runs_to")},
                "runs_from": " ".join(p["runs_from"]),
                "runs_to": " ".join(p["runs_to"]),
            }
            for p in r["pairs"]
        ]
    )
    if r["confounds"]:
        c = r["confounds"]
        t["confounds"] = pd.DataFrame(
            [
                {
                    "model": f"{k} covariates",
                    "coef": c[k]["coef"],
                    "ci95_lo": c[k]["ci95"][0],
                    "ci95_hi": c[k]["ci95"][1],
                    "p": c[k]["p"],
                    "r2": c[k]["r2"],
                    "loo_r2": c[k]["loo_r2"],
                }
                for k in ("without", "with")
            ]
        )
    t.update(extension_tables(r))
    if r["failed"] or r["excluded"]:
        failed = {f["run"]: f for f in r["failed"]}
        rows = [
            {"run": f["run"], "reason": f"failed{' in ' + f['stage'] if f.get('stage') else ''}: {f['error']}"}
            for f in r["failed"]
        ]
        rows += [e for e in r["excluded"] if e["run"] not in failed]
        t["excluded"] = pd.DataFrame(rows)
    return {k: v for k, v in t.items() if len(v)}


def _summary_cols(prefix: str, s: dict[str, Any] | None) -> dict[str, Any]:
    s = s or {}
    ci = _ci(s.get("ci95"))
    return {
        f"{prefix}": s.get("mean"),
        f"{prefix}_ci95_lo": ci[0],
        f"{prefix}_ci95_hi": ci[1],
        f"{prefix}_sd": s.get("sd"),
        f"{prefix}_n": s.get("n"),
    }


def extension_tables(r: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """Mastery per arm, extension-only effects, runs that did not master, remedies (absent without their columns)."""
    t: dict[str, pd.DataFrame] = {}
    m = r.get("mastery")
    if m:
        t["mastery"] = pd.DataFrame(
            [
                {
                    "arm": a["arm"],
                    "n": a["n"],
                    "mastery_acc": a["mean"],
                    "ci95_lo": _ci(a["ci95"])[0],
                    "ci95_hi": _ci(a["ci95"])[1],
                    "mastered": f"{a['n_mastered']}/{a['n_judged']}",
                    "mastered_wilson_lo": a["mastered_ci95"][0],
                    "mastered_wilson_hi": a["mastered_ci95"][1],
                }
                for a in m["arms"]
            ]
        )
    e = r.get("extension_effects")
    if e:
        rows = []
        for a in e["axes"]:
            for x in a["effects"]:
                rows.append(
                    {
                        "axis": f"{a['axis']} {a['from']} → {a['to']}" + (f" ({a['arm']})" if a.get("arm") else ""),
                        "length": x["length"],
                        "rung": x["rung"],
                        "column": x["column"] + (" (target)" if x["is_target"] else ""),
                        **_summary_cols("pre", a["pre"]),
                        **_summary_cols("post", x["post"]),
                        **_summary_cols("did", x["did"]),
                        "dropped_seeds": " ".join(map(str, a["dropped_seeds"])),
                    }
                )
        t["extension_effects"] = pd.DataFrame(rows)
        if e["not_mastered"]:
            t["not_mastered"] = pd.DataFrame(e["not_mastered"])
    rows = []
    for rec in r.get("remedy") or []:
        for a in rec["arms"]:
            rows.append(
                {
                    "recipe": rec["recipe"],
                    "arm": a["arm"],
                    **_summary_cols("remedy_minus_primary", a["paired"]),
                    **(_summary_cols("gap_primary", a["gap_primary"]) if "gap_primary" in a else {}),
                    **(_summary_cols("gap_remedy", a["gap_recipe"]) if "gap_recipe" in a else {}),
                    "closed_fraction": a.get("closed_fraction"),
                }
            )
    if rows:
        t["remedy"] = pd.DataFrame(rows)
    return t


def findings_table(f: dict[str, Any]) -> pd.DataFrame:
    """One row per (target, axis): the numbers behind the findings' sentences."""
    rows = []
    for t in f["targets"]:
        for a in t["axes"]:
            rows.append(
                {
                    "metric": t["metric"],
                    "axis": a["name"],
                    "effect": a["effect"],
                    "ci95_lo": a["ci95"][0],
                    "ci95_hi": a["ci95"][1],
                    "ci_from": a["ci_from"],
                    "seeds": a["n_seeds"],
                    "seed_sd": t["seed_sd"],
                    "above_seed_noise": a["above_noise"],
                    "vs_paper": a["paper_direction"] or "",
                    "lower_is_better": t["lower_is_better"],
                }
            )
    return pd.DataFrame(rows)


HEADERS = {
    "run": "Run",
    "arm": "Architecture",
    "arch": "Architecture",
    "n": "n",
    "r2": "R²",
    "loo_r2": "Leave-one-architecture-out R²",
    "n_groups": "Architectures",
    "p_equivalent_holm": "Equivalence p, Holm-corrected",
    "coef": "Coefficient",
    "se": "SE",
    "ci95_lo": "95% CI low",
    "ci95_hi": "95% CI high",
    "p": "p",
    "p_holm": "p, Holm-corrected",
    "mde": "Detectable (MDE)",
    "multiple": "× pretraining context",
    "kind": "Kind",
    "phase": "Measured",
    "note": "Note",
    "predictor": "Predictor",
    "pre-extension predictor": "Predictor (before extension)",
    "model": "Model",
    "term": "Term",
    "mastery_acc": "Accuracy at own length",
    "mastered": "Mastered",
    "mastered_wilson_lo": "Mastered, Wilson 95% low",
    "mastered_wilson_hi": "Mastered, Wilson 95% high",
    "metric": "Metric",
    "axis": "Axis",
    "effect": "Effect",
    "seeds": "Seeds",
    "seed_sd": "Seed sd",
    "above_seed_noise": "Beyond seed noise",
    "vs_paper": "Direction vs paper",
    "recipe": "Recipe",
    "closed_fraction": "Share of the gap closed",
    "reason": "Reason",
    "length": "Length",
    "rung": "Rung",
    "column": "Column",
    "effect_of": "Effect of",
    "given": "Given",
    "n_with": "n with",
    "n_without": "n without",
    "with": "With",
    "without": "Without",
    "difference": "Difference",
    "target": "Target, mean",
    "runs": "Runs",
    "pretrain_loss": "Pretraining loss",
}
R2_COLUMNS = {"r2", "loo_r2", "residualised_r2", "closed_fraction"}


def _header(c: str) -> str:
    if c in HEADERS:
        return HEADERS[c]
    for suffix, words in (("_ci95_lo", " 95% CI low"), ("_ci95_hi", " 95% CI high"), ("_sd", " seed sd"), ("_n", " n")):
        if c.endswith(suffix):
            return _header(c[: -len(suffix)]) + words
    return c.replace("_", " ").capitalize()


def cell_text(column: str, v: Any) -> str:
    """One precision per kind: R² two decimals, p-values two significant digits, everything else three decimals."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}" if abs(int(v)) >= 10000 else str(int(v))
    if isinstance(v, numbers.Real):
        x = float(v)
        if column in ("p", "p_holm"):
            return "<0.001" if x < 0.001 else f"{x:.2g}"
        if column in R2_COLUMNS:
            return f"{x:.2f}"
        if x.is_integer() and abs(x) < 1e6 and (column in ("n", "seed", "length", "seeds", "runs") or column.endswith("_n")):
            return str(int(x))
        return f"{x:.1f}" if abs(x) >= 100 else f"{x:.3f}"
    if isinstance(v, (list, tuple)):
        return ", ".join(cell_text(column, x) for x in v)
    return str(v)


def present(df: pd.DataFrame, title: str = "", collapsed: bool = False, flag: str | None = None) -> dict[str, Any]:
    """A table for the template: human headers, consistent precision, flagged rows."""
    rows = []
    for _, r in df.iterrows():
        cells = [{"text": cell_text(c, r[c]), "num": _is_number(r[c])} for c in df.columns if c != flag]
        rows.append({"cells": cells, "flag": bool(flag and r.get(flag))})
    return {"title": title, "collapsed": collapsed, "header": [_header(c) for c in df.columns if c != flag], "rows": rows}


def _mean_ci_text(s: dict[str, Any] | None) -> str:
    if not s or s.get("mean") is None:
        return "—"
    return f"{vd.fmt(s['mean'])} {vd.fmt_ci(s.get('ci95'))}".strip()


def remedy_table(remedy: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per remedy recipe and arm, each effect as ``mean [CI]`` text."""
    rows = []
    for rec in remedy:
        for a in rec["arms"]:
            rows.append(
                {
                    "recipe": rec["recipe"],
                    "arm": a["arm"],
                    "seeds": (a.get("paired") or {}).get("n"),
                    "change with the treatment": _mean_ci_text(a.get("paired")),
                    "gap to the baseline, both untreated": _mean_ci_text(a.get("gap_primary")),
                    "gap to the baseline, both treated": _mean_ci_text(a.get("gap_recipe"))
                    if a.get("base_treated", True)
                    else "— (baseline not treated)",
                    "closed_fraction": a.get("closed_fraction"),
                    "note": a.get("closed_note", ""),
                }
            )
    return pd.DataFrame(rows)


def transfer_table(cells: Sequence[transfer.TransferCell]) -> pd.DataFrame:
    """The transfer cells as a table (effects as text with their CI)."""
    return pd.DataFrame(
        [
            {
                "axis": FEATURE_NAMES[c.feature],
                "multiple": f"{c.multiple}×",
                "seeds": c.n,
                "effect": f"{vd.fmt(c.effect)} {vd.fmt_ci(c.ci95)}".strip(),
                "relative": f"{c.relative:+.0%}" if c.relative is not None else "—",
                "p_holm": c.p_holm,
                "p_equivalent_holm": c.p_equivalent_holm,
                "mde": c.mde,
                "paper (HELMET points)": f"{c.paper_points:+.1f}" if c.paper_points is not None else "—",
                "paper relative": f"{c.paper_relative:+.0%}" if c.paper_relative is not None else "—",
                "this pool": c.verdict,
            }
            for c in cells
        ]
    )


def arch_table(df: pd.DataFrame, r: dict[str, Any]) -> pd.DataFrame:
    """Per architecture: runs, mastery, the target (mean and 95% CI over seeds), pretraining loss."""
    used = df[df["run"].isin({q["run"] for q in r["runs"]})]
    target = r["target"]
    rows = []
    arch = archs.arch_of(used)
    for a in archs.arch_order(used):
        d = used[arch == a]
        m = archs.mean_ci(d[target]) if target in d else None
        row: dict[str, Any] = {"arch": a, "runs": len(d)}
        if "mastered" in d and d["mastered"].notna().any():
            row["mastered"] = f"{int((d['mastered'] == 1).sum())}/{int(d['mastered'].notna().sum())}"
        if "mastery_acc" in d:
            row["mastery_acc"] = archs.mean_ci(d["mastery_acc"]).mean if d["mastery_acc"].notna().any() else None
        if m is not None:
            row.update({"target": m.mean, "target_ci95_lo": m.lo, "target_ci95_hi": m.hi})
        vs = next((x["effect"] for x in r.get("versus_baseline") or [] if set(x["runs"]) == set(d["run"])), None)
        if vs is not None:
            row["vs baseline"] = _mean_ci_text(vs)
        if "pretrain_loss" in d and d["pretrain_loss"].notna().any():
            row["pretrain_loss"] = float(d["pretrain_loss"].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CAPTIONS = {
    "verdict_effects": "Effect of each feature before extension (each arm's own length) and after it (the target), "
    "95% CI over seeds; grey band: ± one seed sd.",
    "accuracy_by_length": "Accuracy vs evaluation length per architecture (mean over seeds, 95% CI); solid: after "
    "extension, dashed: before; dotted vertical line: the pretraining context; dotted horizontal: chance.",
    "accuracy_by_distance": "Accuracy per key–query distance bucket after extension, per architecture (mean over seeds, "
    "95% CI); dotted: chance.",
    "extension_curves": "Accuracy after each extension budget of the ladder (0: the RoPE change alone), per "
    "architecture; dotted: chance.",
    "loss_curves": "Training loss per architecture, mean over seeds.",
    "attention": "Attention sink strength and entropy after extension, per architecture (mean, 95% CI over seeds).",
    "scores_by_run": "The target per run, sorted, coloured by feature count.",
    "target_vs_count": "Target vs feature count with the OLS fit (the paper's predictor); right: leave-one-out predictions.",
    "effects": "Matched-pair effects per axis (dots: pairs; bars: their mean) and interactions (effect of A with B "
    "on, red, vs off, blue); grey band: ± seed standard deviation; ★ marks the paper's stressed interaction, SWA "
    "with vs without GQA.",
    "predictor_r2": "In-sample and leave-one-architecture-out R² of the strongest predictors measured before extension "
    "or fixed by the design (the target's own metric after extension is left out).",
    "calibration": "The scored task's difficulty knob against the baseline at the target (mean over seeds, dots: "
    "seeds); shaded: the headroom window; open circles: a run did not master that variant at its own length; "
    "star: the point the rule picks; ring: the point the pool scores.",
}


def build_figures(
    r: dict[str, Any], df: pd.DataFrame, verdicts: Sequence[AxisVerdict], context: ReportContext, unit: str
) -> dict[str, bytes]:
    target = r["target"]
    used = df[df["run"].isin({q["run"] for q in r["runs"]})]
    p = ColumnKey.parse(target)
    chance = context.chance.get(p.metric.rsplit("_", 1)[0]) if p else None
    a = r.get("attention") or {}
    arch_by_run = dict(zip(used["run"], archs.arch_of(used)))
    long_ctx = int(used["pretrain_ctx"].max()) if "pretrain_ctx" in used and used["pretrain_ctx"].notna().any() else None
    out = {
        "verdict_effects": figs.verdict_effects(verdicts, (r.get("spread") or {}).get("seed_sd"), unit),
        "accuracy_by_length": _by_length(r, used, chance, long_ctx),
        "accuracy_by_distance": figs.accuracy_by_distance(used, target, chance),
        "extension_curves": figs.extension_curves(used, target, chance),
        "loss_curves": figs.loss_curves({k: v for k, v in context.curves.items() if k in arch_by_run}, arch_by_run),
        "attention": figs.attention_by_arch(used, a.get("sink_column"), a.get("entropy_column")) if a else None,
        "scores_by_run": figs.scores_by_run(r),
        "target_vs_count": figs.target_vs_count(r),
        "predictor_r2": figs.predictor_r2(_design_and_pre(r)),
        "effects": figs.effects(_with_data(r)) if r.get("factorial", True) else None,
        "calibration": figs.calibration(context.calibration) if context.calibration else None,
    }
    return {k: figs.png(f) for k, f in out.items() if f is not None}


def _by_length(r: dict[str, Any], df: pd.DataFrame, chance: float | None, long_ctx: int | None) -> Figure | None:
    """The target's own family by length; without one, the first metric the analysis found at several lengths."""
    after = archs.length_columns(df, r["target"])
    if len(after) >= 2:
        return figs.accuracy_by_length(df, after, archs.base_length_columns(df, r["target"]), chance, long_ctx)
    for metric, phases in (r.get("by_length") or {}).items():
        post = {int(n): c for n, c in (phases.get("post") or {}).items()}
        if len(post) >= 2:
            pre = {int(n): c for n, c in (phases.get("pre") or {}).items()}
            return figs.accuracy_by_length(df, post, pre, None, long_ctx, label=metric)
    return None


def _with_data(r: dict[str, Any]) -> dict[str, Any]:
    """The analysis with only the interactions measured on both sides (with and without the other feature)."""
    inter = [i for i in r["interactions"] if i.get("n_with") and i.get("n_without")]
    return {**r, "interactions": inter}


def _design_and_pre(r: dict[str, Any]) -> dict[str, Any]:
    """Only predictors one has before extension: the design and pre-extension measurements."""
    keep = {k: p for k, p in r["predictors"].items() if p.get("kind") != "metric" or p.get("phase") == "pre"}
    return {**r, "predictors": keep}


def design_note(r: dict[str, Any]) -> str:
    if r.get("factorial", True):
        return (
            "The pool is a full factorial design: the four-axis regression and the matched pairs estimate the same "
            "effects; where they differ, the interactions below are the reason."
        )
    return (
        "The pool changes one axis at a time (not every combination), so a regression on the four axes together "
        "mixes effects with the combinations that happen to be present; the effects above come from matched "
        "pairs (runs that differ in exactly one axis, paired by seed), and the four-axis fit is shown only as a "
        "predictor (R²), without coefficients."
    )


def transfer_sections(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The rank agreement with the paper (for a pool that carries its scores) and the transfer table."""
    out: list[dict[str, Any]] = []
    if r.get("agreement"):
        out.append(
            {
                "id": "agreement",
                "title": "Transfer as one number: the paper's ranking",
                "paragraphs": scale.agreement_words(r["agreement"]),
                "figures": [],
                "tables": [present(scale.agreement_table(r["agreement"]))],
            }
        )
    cells = transfer.transfer_cells(r, vd.long_ctx_of(r))
    if cells:
        out.append(
            {
                "id": "transfer",
                "title": "Transfer to the paper",
                "paragraphs": [
                    "Each axis's effect after extension at 1×, 2×, 4× and 8× the pretraining context (the target's rung), "
                    "relative to the baseline's mean, beside the paper's 7B HELMET effect relative to its Llama 3 "
                    "replica. A cell reproduces or contradicts the paper's sign only when its test, Holm-corrected over "
                    "every cell of the table, rejects no effect and the effect is at least the smallest effect of interest "
                    f"(±{transfer.min_effect_of(r):g}). Otherwise it is at the ceiling when the baseline and the arm both "
                    "score within that of 1 (no difference can show); 'no effect larger than' it when the equivalence "
                    "test rejects one; smaller than the paper's when the equivalence test against the paper's relative "
                    "size rejects; and unresolved when none holds (the MDE says how large an effect could hide).",
                    *transfer.statements(cells),
                ],
                "figures": [],
                "tables": [present(transfer_table(cells))],
            }
        )
    return out


def scale_sections(
    r: dict[str, Any], tabs: dict[str, pd.DataFrame], figures: dict[str, str], context: ReportContext
) -> list[dict[str, Any]]:
    """The untrained rung, compounding and the calibration of the scored task, where the pool has them."""
    out: list[dict[str, Any]] = []
    if "rung_zero" in tabs:
        out.append(
            {
                "id": "rung-zero",
                "title": "After the RoPE change alone (zero-shot extensibility)",
                "paragraphs": [
                    "The same target at the ladder's rung 0: the pretrained model with the extension's RoPE, before any "
                    "extension training. A finding of its own (how well an architecture extends zero-shot), tested as a "
                    "family over the axes and never mixed into the primary target."
                ],
                "figures": [],
                "tables": [present(tabs["rung_zero"])],
            }
        )
    if "compounding" in tabs:
        out.append(
            {
                "id": "compounding",
                "title": "Compounding: a pair of features against the sum of its parts",
                "paragraphs": [
                    "Per seed, the pair's effect minus the two single effects (pair − A − B + baseline), on the same "
                    "answers; Holm-corrected over the pairs, with the equivalence test against the smallest effect of "
                    f"interest. The paper: {scale.PAPER_COMPOUND}."
                ],
                "figures": [],
                "tables": [present(tabs["compounding"])],
            }
        )
    cal = context.calibration
    if cal:
        name = "calibration"
        out.append(
            {
                "id": "calibration",
                "title": "Calibration of the scored task",
                "paragraphs": scale.calibration_words(cal),
                "figures": [{"name": name, "b64": figures[name], "caption": CAPTIONS[name]}] if name in figures else [],
                "tables": [],
            }
        )
    return out


def _sections(
    r: dict[str, Any],
    tabs: dict[str, pd.DataFrame],
    found: dict[str, Any],
    figures: dict[str, str],
    df: pd.DataFrame,
    context: ReportContext,
) -> list[dict[str, Any]]:
    def fig(name: str) -> list[dict[str, str]]:
        return [{"name": name, "b64": figures[name], "caption": CAPTIONS[name]}] if name in figures else []

    out: list[dict[str, Any]] = []
    at = arch_table(df, r)
    if len(at):
        out.append(
            {
                "id": "architectures",
                "title": "Per architecture",
                "paragraphs": [
                    "Mean over seeds with a 95% t-interval; mastery before extension at each architecture's own length; "
                    "the difference to the baseline, paired by seed, with its 95% interval from the same estimator as the "
                    "verdict's (seeds where either run did not master its own length left out)."
                ],
                "figures": [],
                "tables": [present(at)],
            }
        )
    out += transfer_sections(r)
    out += scale_sections(r, tabs, figures, context)
    if r.get("remedy"):
        out.append(
            {
                "id": "remedy",
                "title": "Treatment",
                "paragraphs": [
                    "Each arm extended again with a second recipe (a treatment such as a lower softmax temperature): "
                    "its change, paired by seed, and its gap to the baseline with both untreated and with both treated "
                    "(mean [95% CI]), on "
                    + "; ".join(f"{rec['column']} against {rec.get('column_untreated', r['target'])}" for rec in r["remedy"])
                    + ". A treated arm is only compared with a treated baseline."
                ],
                "figures": [],
                "tables": [present(remedy_table(r["remedy"]))],
            }
        )
    if "not_mastered" in tabs:
        out.append(
            {
                "id": "not-mastered",
                "title": "Runs that did not master their own length",
                "paragraphs": [
                    "Their long-context numbers measure pretraining, not extension, so the effects above leave them out."
                ],
                "figures": [],
                "tables": [present(tabs["not_mastered"])],
            }
        )
    stats_tables = []
    if "pre_extension" in tabs:
        stats_tables.append(present(tabs["pre_extension"].head(10), "Best predictors measured before extension"))
    if "predictors_before_extension" in tabs:
        title = "Every predictor known before extension (p Holm-corrected over this table)"
        stats_tables.append(present(tabs["predictors_before_extension"], title, collapsed=True))
    if "coefficients" in tabs:
        stats_tables.append(present(tabs["coefficients"], "Regression coefficients", collapsed=True))
    if "interactions" in tabs:
        it = tabs["interactions"]
        it = it[(it.get("n_with", 1) > 0) & (it.get("n_without", 1) > 0)] if {"n_with", "n_without"} <= set(it.columns) else it
        if len(it):
            stats_tables.append(present(it, "Interactions (effect of A with and without B)", collapsed=True))
    for name, title in (
        ("axis_effects", "Matched-pair effects by axis"),
        ("pairs", "Every matched pair"),
        ("confounds", "Declared confounds"),
        ("findings", "Every metric the pool names, by axis"),
        ("mastery", "Mastery per architecture"),
        ("extension_effects", "Extension-only effects at every length and rung"),
    ):
        if name in tabs:
            flag = "below_seed_sd" if "below_seed_sd" in tabs[name] else None
            stats_tables.append(present(tabs[name], title, collapsed=True, flag=flag))
    paragraphs = [found["count_fit"]["sentence"]]
    if found.get("before_extension"):
        paragraphs.append(found["before_extension"])
    paragraphs.append(design_note(r))
    out.append(
        {
            "id": "statistics",
            "title": "What predicts the target, and how the statistics fit together",
            "paragraphs": paragraphs,
            "figures": fig("effects") + fig("target_vs_count") + fig("predictor_r2") + fig("scores_by_run"),
            "tables": stats_tables,
        }
    )
    if "excluded" in tabs:
        out.append(
            {
                "id": "excluded",
                "title": "Failed and excluded runs",
                "paragraphs": [],
                "figures": [],
                "tables": [present(tabs["excluded"])],
            }
        )
    return out


CLAIM_SHORT = {  # the verdict table's words for each claim (X: the smallest effect of interest)
    inference.EFFECT: "an effect (beyond noise, ≥ ±X)",
    inference.BELOW_INTEREST: "beyond noise, below ±X",
    inference.EQUIVALENT: "no effect larger than ±X",
    inference.UNRESOLVED: "not resolved",
    inference.UNTESTED: "not tested",
}
MAIN_FIGURES = ("verdict_effects", "accuracy_by_length", "accuracy_by_distance", "extension_curves", "loss_curves", "attention")
_ENV = None


def _template():
    global _ENV
    if _ENV is None:
        from jinja2 import Environment, PackageLoader, select_autoescape

        _ENV = Environment(loader=PackageLoader("archpool.report", "templates"), autoescape=select_autoescape(["j2", "html"]))
        _ENV.filters.update(eff=lambda v: vd.fmt(v), ci=lambda c: vd.fmt_ci(c), num=lambda v: vd.fmt(v, signed=False))
    return _ENV.get_template("report.html.j2")


def _repro(context: ReportContext, r: dict[str, Any]) -> dict[str, Any]:
    facts = list(environment())
    facts.append(("runs", f"{r['n']} analysed" + (f", {len(r['failed'])} failed" if r.get("failed") else "")))
    basis = r.get("inference") or {}
    if basis:
        facts.append(("intervals and tests", f"{basis['words']}; smallest effect of interest ±{basis['min_effect']:g}"))
        facts.append(("cross-validation", basis["cross_validation"]))
    facts += list(context.budgets)
    if context.stage_seconds:
        total = sum(context.stage_seconds.values())
        per = ", ".join(f"{k} {duration(v)}" for k, v in context.stage_seconds.items())
        facts.append(("compute time (summed over nodes)", f"{duration(total)} ({per})"))
    if context.hardware:
        facts.append(
            (
                "computed on",
                f"{context.hardware}. Re-running on the same machine gives the same numbers bit for bit; a CPU with "
                "another vector unit (or another GPU) rounds differently and the numbers differ in their last digits, "
                "so results from two machines agree through the intervals above, not digit for digit",
            )
        )
    return {"facts": facts, "pool_yaml": context.pool_yaml, "pool_source": context.pool_source}


def render(
    r: dict[str, Any],
    figures: dict[str, bytes],
    tabs: dict[str, pd.DataFrame],
    found: dict[str, Any],
    df: pd.DataFrame,
    context: ReportContext | None = None,
    aliases: dict[str, list[str]] | None = None,
    pool_name: str = "",
) -> str:
    """The report page: the question and verdict first, then figures, per-architecture numbers, statistics
    (details collapsed) and how the numbers were made."""
    context = context or ReportContext()
    verdicts = vd.axis_verdicts(r, found)
    long_ctx = vd.long_ctx_of(r)
    words = vd.describe_metric(r["target"], long_ctx)
    b64 = {k: _b64(v) for k, v in figures.items()}
    warnings_ = []
    if found.get("small_n"):
        warnings_.append({"id": "small-n-warning", "text": found["small_n"]})
    if (r.get("extension_effects") or {}).get("not_mastered"):
        names = ", ".join(x["run"] for x in r["extension_effects"]["not_mastered"])
        text = f"Left out of the extension effects because they did not master their own length: {names}."
        warnings_.append({"id": "not-mastered-warning", "text": text})
    notes = [n for n in r["notes"] if not n.startswith("not factorial")]  # the design note says it
    merged = [f"{k} = {' = '.join(v)}" for k, v in (aliases or {}).items()]
    lower = "lower is better" if lower_is_better(r["target"]) else "higher is better"
    return _template().render(
        css=CSS,
        question="Which architecture choices cost long-context ability after extension?",
        pool_name=pool_name,
        n_runs=r["n"],
        target=r["target"],
        target_words=f"{words} ({lower})",
        headline=vd.headline(verdicts, words, (r.get("inference") or {}).get("words")),
        basis=(r.get("inference") or {}).get("words") or "seed means",
        min_effect=transfer.min_effect_of(r),
        claim_words=CLAIM_SHORT,
        verdicts=verdicts,
        paper_multiple=next((v.paper_multiple for v in verdicts if v.paper_multiple), None),
        treated_recipe=next((v.treated_recipe for v in verdicts if v.treated_recipe), None),
        co_column=next((v.co_column for v in verdicts if v.co_column), None),
        unit="accuracy (fraction of answers)" if "_acc" in r["target"] else r["target"],
        seed_sd=(r.get("spread") or {}).get("seed_sd"),
        warnings=warnings_,
        figures=[{"name": n, "b64": b64[n], "caption": CAPTIONS[n]} for n in MAIN_FIGURES if n in b64],
        sections=_sections(r, tabs, found, b64, df, context),
        resolves=present(tabs["resolves"], "What this scale resolves") if "resolves" in tabs else None,
        headroom=scale.headroom_words(r.get("headroom")),
        repro=_repro(context, r),
        notes=notes,
        merged=merged,
    )


REPORT_FILES = ("report.html", "analysis.json", "summary.md")


def write_report(  # noqa: PLR0913 — the analysis's options as `archpool report` names them, then keyword-only report options
    source: str | Path | pd.DataFrame,
    out: str | Path,
    target: str | None = None,
    short_ctx: int | None = None,
    covariates: Iterable[str] = (),
    *,
    findings_targets: Sequence[str] = (),
    context: ReportContext | None = None,
    pool_name: str = "",
    answers: Answers | None = None,
    min_effect: float = MIN_EFFECT,
) -> Path:
    """Analyse ``source`` (CSV, pool dir or loaded table) and write the report to ``out``; returns report.html.
    ``answers``: the scored answers (default: the answers table beside a CSV or in a pool directory);
    ``min_effect``: the smallest effect of interest.

    ``findings_targets``: metrics reported in the Findings in addition to ``target`` (e.g. retrieval accuracy
    beyond the window, multi-hop accuracy); metric columns identical to another are merged first.
    ``context``: how the numbers were made (pool file, budgets, wall time, loss curves, chance levels)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory (the report is a directory: report.html, figures/, tables/)")
    for name in REPORT_FILES:  # a failed analysis never leaves an older report looking current
        (out / name).unlink(missing_ok=True)
    context = context or ReportContext()
    df = source if isinstance(source, pd.DataFrame) else load_results(source)
    if answers is None and not isinstance(source, pd.DataFrame):
        answers = load_answers(source)
    covariates = list(covariates)
    findings_targets = [t for t in findings_targets if t and t in df.columns]  # a pool's list may name unmeasured columns
    keep = [t for t in (target, *findings_targets, *covariates) if t]
    df, aliases = fnd.merge_identical(df, keep=keep)
    r = analyze(df, target, short_ctx, covariates, answers, min_effect, context.headroom)
    found = fnd.findings(df, r, findings_targets, covariates, answers)
    figures_dir, tables_dir = owned_dir(out, "figures"), owned_dir(out, "tables")  # a linked entry is refused
    for old in figures_dir.glob("*.png"):
        old.unlink()
    verdicts = vd.axis_verdicts(r, found)
    unit = "accuracy" if "_acc" in r["target"] else r["target"]
    figures = build_figures(r, df, verdicts, context, unit)
    tabs = tables(r, aliases)
    ft = findings_table(found)
    if len(ft):
        tabs = {"findings": ft, **tabs}
    verdict_rows = pd.DataFrame([asdict(v) for v in verdicts])
    if len(verdict_rows):
        tabs = {"verdict": verdict_rows, **tabs}
    cells = transfer.transfer_cells(r, vd.long_ctx_of(r))
    transfer_rows = [asdict(c) for c in cells]
    if transfer_rows:
        tabs = {**tabs, "transfer": pd.DataFrame(transfer_rows)}
    zero = scale.rung_zero(r)
    extra = {
        "architectures": arch_table(df, r),
        "agreement": scale.agreement_table(r["agreement"]) if r.get("agreement") else pd.DataFrame(),
        "resolves": scale.resolves_table(cells, vd.target_multiple(r["target"], vd.long_ctx_of(r)), r),
        "rung_zero": scale.rung_zero_table(zero),
        "compounding": scale.compounding_table(r),
    }
    tabs = {**tabs, **{k: t for k, t in extra.items() if len(t)}}
    for name, data in figures.items():
        atomic_write_bytes(figures_dir / f"{name}.png", data)
    for name, t in tabs.items():
        atomic_write_text(tables_dir / f"{name}.csv", safe_frame(t).to_csv(index=False))
    analysis_json = to_json(
        {
            **r,
            "findings": found,
            "merged_columns": aliases,
            "verdict": [asdict(v) for v in verdicts],
            "transfer": transfer_rows,
        }
    )
    atomic_write_text(out / "analysis.json", analysis_json + "\n")
    words = vd.describe_metric(r["target"], vd.long_ctx_of(r))
    summary = scale.summary_markdown(r, verdicts, tabs.get("resolves", pd.DataFrame()), vd.headline(verdicts, words, None))
    atomic_write_text(out / "summary.md", summary)
    page = out / "report.html"
    atomic_write_text(page, render(r, figures, tabs, found, df, context, aliases, pool_name))
    return page
