"""A self-contained HTML report of an analysis: figures embedded as base64 PNG, every text HTML-escaped.

``write_report`` writes::

    DIR/report.html      the page (opens offline: no scripts, no external files)
    DIR/figures/*.png    each figure
    DIR/tables/*.csv     each table
    DIR/analysis.json    the full analysis result
"""

from __future__ import annotations

import base64
import numbers
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis.summary import analyze, to_json
from archpool.analysis.table import load_results
from archpool.csvsafe import safe_frame
from archpool.errors import DataError
from archpool.io import atomic_write_text
from archpool.report import figures as figs
from archpool.report import findings as fnd

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.flag td{background:#fff3cd}
td,th{overflow-wrap:break-word;max-width:22em}td.n{white-space:nowrap}table{max-width:100%}
img{max-width:100%;height:auto;border:1px solid #eee}.scroll{overflow-x:auto;max-width:100%}.note{color:#555;font-size:.9em}.fail{color:#b00}
section.findings{background:#f7f9fc;border:1px solid #dde3ee;padding:.2em 1em .6em}section.findings li{margin:.35em 0}
.warn{background:#fff3cd;border:1px solid #e8d08a;padding:.4em .6em}
"""


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, (bool, np.bool_))


def _wrap(text: str) -> str:
    """Escaped text that may break after ``_`` and ``@`` (long names wrap instead of widening the table)."""
    out = escape(text)
    for ch in ("_", "@"):
        out = out.replace(ch, ch + "<wbr>")
    return out


def html_table(df: pd.DataFrame, flag: str | None = None) -> str:
    """An escaped HTML table; rows whose ``flag`` column is true are highlighted."""
    head = "".join(f"<th>{_wrap(str(c))}</th>" for c in df.columns)
    rows = []
    for _, r in df.iterrows():
        cls = ' class="flag"' if flag and bool(r.get(flag)) else ""
        cells = "".join(f'<td class="n">{escape(_fmt(v))}</td>' if _is_number(v) else f"<td>{_wrap(_fmt(v))}</td>" for v in r)
        rows.append(f"<tr{cls}>{cells}</tr>")
    return f"<div class=scroll><table><tr>{head}</tr>{''.join(rows)}</table></div>"


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
    t["pre_extension"] = pd.DataFrame(
        [
            {
                "pre-extension predictor": _alias(p["predictor"], aliases),
                "n": p["n"],
                "r2": p["r2"],
                "loo_r2": p["loo_r2"],
                "coef": p["coef"],
                "ci95_lo": _ci(p["ci95"])[0],
                "ci95_hi": _ci(p["ci95"])[1],
            }
            for p in r.get("pre_extension") or []
        ]
    )
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


def render_findings(f: dict[str, Any]) -> str:
    """The Findings section: plain sentences per target and axis, the count fit, the small-n warning."""
    parts = ["<section class=findings id=findings><h2>Findings</h2>"]
    if f["small_n"]:
        parts.append(f"<p class=warn id=small-n-warning>⚠ {escape(f['small_n'])}</p>")
    for t in f["targets"]:
        parts.append(f"<h3>{escape(t['metric'])}</h3><ul>")
        parts += [f"<li>{escape(s)}</li>" for s in t["sentences"]]
        parts.append("</ul>")
    if f.get("extension"):
        parts.append("<h3>Extension-only effects</h3><ul id=extension-findings>")
        parts += [f"<li>{escape(s)}</li>" for s in f["extension"]]
        parts.append("</ul>")
    if not f.get("factorial", True):
        parts.append(
            "<p class=warn id=not-factorial>⚠ Not a full factorial design: pairwise effects only; the "
            "four-axis regression is reported as a predictor (R²), not as effects.</p>"
        )
    parts.append(f"<p>{escape(f['count_fit']['sentence'])}</p>")
    if f.get("before_extension"):
        parts.append(f"<p id=before-extension>{escape(f['before_extension'])}</p>")
    if f["not_varying"]:
        parts.append(f"<p class=note>Not varied in this pool, so not measured: {escape(', '.join(f['not_varying']))}.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def build_figures(r: dict[str, Any], df: pd.DataFrame) -> dict[str, bytes]:
    out = {
        "scores_by_run": figs.scores_by_run(r),
        "predictor_r2": figs.predictor_r2(r),
        "target_vs_count": figs.target_vs_count(r),
        "effects": figs.effects(r),
        "by_length": figs.by_length(r, df),
        "attention": figs.attention(r, df),
    }
    return {k: figs.png(f) for k, f in out.items() if f is not None}


def _img(name: str, data: bytes, caption: str) -> str:
    b64 = base64.b64encode(data).decode()
    return (
        f'<figure id="fig-{escape(name)}"><img alt="{escape(name)}" src="data:image/png;base64,{b64}">'
        f"<figcaption class=note>{escape(caption)}</figcaption></figure>"
    )


CAPTIONS = {
    "scores_by_run": "Target per run, sorted, coloured by feature count (paper fig. 1); dots, since the axis need not contain 0.",
    "predictor_r2": "In-sample and leave-one-out R² of the strongest predictors of the target (paper table 2).",
    "target_vs_count": "Target vs feature count with the OLS fit; right: leave-one-out predictions.",
    "effects": "Matched-pair effects per axis (dots: pairs; bars: their mean) and interactions (effect of A with B "
    "on, red, vs off, blue); grey band: ± seed standard deviation; ★ marks the paper's stressed "
    "interaction, SWA with vs without GQA.",
    "by_length": "Score vs context length, before (dashed) and after (solid) extension (with an extension ladder: "
    "the mean over its rungs).",
    "attention": "Attention sink strength vs score; attention entropy vs sink strength by QK-norm.",
}


def render(
    r: dict[str, Any],
    figures: dict[str, bytes],
    tabs: dict[str, pd.DataFrame],
    found: dict[str, Any] | None = None,
    aliases: dict[str, list[str]] | None = None,
) -> str:
    """The report page as one HTML string: Findings first, then figures and tables."""
    fc = r["predictors"]["feature_count"]
    fa = r["predictors"]["four_axes"]
    sd = r["spread"]
    parts = [f"<h1>archpool analysis: {escape(r['target'])}</h1>"]
    if found is not None:
        parts.append(render_findings(found))
    parts += [
        f"<p>{r['n']} runs; source <code>{escape(str(r.get('source') or ''))}</code>; short pretraining "
        f"context ≤ {r['short_ctx']} tokens. Feature count = [QK-norm] + [GQA] + [SWA] + [short context].</p>",
        f"<p>Feature count → target: R² {escape(_fmt(fc.get('r2')))}, leave-one-out R² {escape(_fmt(fc.get('loo_r2')))}, "
        f"slope {escape(_fmt(fc.get('coef')))} per feature (95% CI {escape(_fmt(fc.get('ci95')))}). Four-axis "
        f"regression: R² {escape(_fmt(fa.get('r2')))}, LOO R² {escape(_fmt(fa.get('loo_r2')))}.</p>",
    ]
    if aliases:
        merged = "; ".join(f"{k} = {' = '.join(v)}" for k, v in aliases.items())
        parts.append(f"<p class=note>Identical metric columns merged (same value in every run): {escape(merged)}.</p>")
    if "excluded" in tabs:
        parts += ["<h2>Failed and excluded runs</h2>", '<div class="fail">', html_table(tabs["excluded"]), "</div>"]
    sections = [
        ("Findings in numbers", [], ["findings"]),
        ("Before extension: can you tell?", [], ["pre_extension"]),
        ("Scores by run", ["scores_by_run"], ["runs"]),
        ("Predictors of the target", ["predictor_r2"], ["predictors"]),
        ("Feature count", ["target_vs_count"], ["coefficients"]),
        ("Effects, interactions and seed spread", ["effects"], ["axis_effects", "feature_effects", "interactions", "pairs"]),
        ("Confounds", [], ["confounds"]),
        ("Mastery before extension", [], ["mastery"]),
        ("Extension-only effects", [], ["extension_effects"]),
        ("Did not master before extension", [], ["not_mastered"]),
        ("Remedy", [], ["remedy"]),
        ("Score by context length", ["by_length"], []),
        ("Attention", ["attention"], []),
    ]
    for title, fig_names, tab_names in sections:
        body = [_img(f, figures[f], CAPTIONS[f]) for f in fig_names if f in figures]
        if title.startswith("Predictors") and found is not None and found["small_n"]:
            body.insert(0, f"<p class=warn>⚠ {escape(found['small_n'])}</p>")
        if title.startswith("Effects"):
            body.insert(
                0,
                f"<p>Seed sd {escape(_fmt(sd['seed_sd']))} (df {sd['seed_df']}, {sd['replicated_configs']} "
                f"replicated configurations)"
                + (f"; init sd {escape(_fmt(sd.get('init_sd')))}" if "init_sd" in sd else "")
                + ". Highlighted rows: effect smaller than the seed sd.</p>",
            )
        if title == "Extension-only effects" and "extension_effects" in tabs:
            body.insert(
                0,
                "<p>Per axis, paired by seed: pre = effect on mastery accuracy at each arm's own pretraining length "
                "before extension; post = effect after extension at each length (and ladder rung); did = post − pre "
                "per seed, mean with 95% t-interval, seed sd and n. Runs that did not master their own length are "
                "left out of post and did.</p>",
            )
        if title == "Did not master before extension" and "not_mastered" in tabs:
            body.insert(
                0,
                "<p>These runs did not master their own length before extension: their long-context "
                "numbers measure pretraining, not extension.</p>",
            )
        if title == "Confounds" and r["confounds"]:
            c = r["confounds"]
            body.append(
                f"<p>Covariates {escape(', '.join(c['covariates']))}: the count effect "
                f"{'survives' if c['survives'] else 'does not survive'} (CI excludes 0 with and without); "
                f"R² of count on the residualised target {escape(_fmt(c['residualised_r2']))}.</p>"
            )
        for name in tab_names:
            if name in tabs:
                body.append(
                    ("" if name == "findings" else f"<h3>{escape(name.replace('_', ' '))}</h3>")
                    + html_table(tabs[name], flag="below_seed_sd" if "below_seed_sd" in tabs[name] else None)
                )
        if title == "Attention" and r["attention"]:
            a = r["attention"]
            fit = a.get("sink_vs_target") or {}
            body.insert(0, f"<p>Sink strength ({escape(str(a['sink_column']))}) vs target: R² {escape(_fmt(fit.get('r2')))}.</p>")
        if body:
            parts += [f"<h2>{escape(title)}</h2>", *body]
    parts += [f'<p class="note">{escape(n)}</p>' for n in r["notes"]]
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>archpool analysis: {escape(r['target'])}</title><style>{CSS}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


REPORT_FILES = ("report.html", "analysis.json")


def write_report(
    source: str | Path | pd.DataFrame,
    out: str | Path,
    target: str | None = None,
    short_ctx: int | None = None,
    covariates: Iterable[str] = (),
    *,
    findings_targets: Sequence[str] = (),
) -> Path:
    """Analyse ``source`` (CSV, pool dir or loaded table) and write the report to ``out``; returns report.html.

    ``findings_targets``: metrics reported in the Findings in addition to ``target`` (e.g. retrieval accuracy
    beyond the window, multi-hop accuracy); metric columns identical to another are merged first."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory (the report is a directory: report.html, figures/, tables/)")
    for name in REPORT_FILES:  # a failed analysis never leaves an older report looking current
        (out / name).unlink(missing_ok=True)
    df = source if isinstance(source, pd.DataFrame) else load_results(source)
    covariates = list(covariates)
    findings_targets = [t for t in findings_targets if t and t in df.columns]  # a pool's list may name unmeasured columns
    keep = [t for t in (target, *findings_targets, *covariates) if t]
    df, aliases = fnd.merge_identical(df, keep=keep)
    r = analyze(df, target, short_ctx, covariates)
    found = fnd.findings(df, r, findings_targets, covariates)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    figures = build_figures(r, df)
    tabs = tables(r, aliases)
    ft = findings_table(found)
    if len(ft):
        tabs = {"findings": ft, **tabs}
    for name, data in figures.items():
        (out / "figures" / f"{name}.png").write_bytes(data)
    for name, t in tabs.items():
        safe_frame(t).to_csv(out / "tables" / f"{name}.csv", index=False)
    atomic_write_text(out / "analysis.json", to_json({**r, "findings": found, "merged_columns": aliases}) + "\n")
    page = out / "report.html"
    atomic_write_text(page, render(r, figures, tabs, found, aliases))
    return page
