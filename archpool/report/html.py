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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from archpool.analysis import archs
from archpool.analysis.report_data import Answers, analysis_json, report_data
from archpool.analysis.results import (
    BELOW_INTEREST,
    EFFECT,
    EQUIVALENT,
    UNRESOLVED,
    UNTESTED,
    ReportData,
    fmt,
    fmt_ci,
)
from archpool.columns import ColumnKey, lower_is_better
from archpool.csvsafe import safe_frame
from archpool.errors import DataError
from archpool.io import atomic_write_bytes, atomic_write_text, disk_error, fresh_directory, owned_dir, refuse_symlink
from archpool.report import figures as figs
from archpool.report import scale
from archpool.report import verdict as vd
from archpool.report.context import ReportContext, duration, environment
from archpool.report.sections import CAPTIONS, sections
from archpool.report.tables import arch_table, present
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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def build_figures(data: ReportData, context: ReportContext) -> dict[str, bytes]:
    """Every figure of the page as PNG bytes (figures without data left out)."""
    r, df = data.analysis, data.table
    target = r["target"]
    unit = "accuracy" if "_acc" in target else target
    used = df[df["run"].isin({q["run"] for q in r["runs"]})]
    p = ColumnKey.parse(target)
    chance = context.chance.get(p.metric.rsplit("_", 1)[0]) if p else None
    a = r.get("attention") or {}
    arch_by_run = dict(zip(used["run"], archs.arch_of(used)))
    long_ctx = int(used["pretrain_ctx"].max()) if "pretrain_ctx" in used and used["pretrain_ctx"].notna().any() else None
    out = {
        "verdict_effects": figs.verdict_effects(data.verdicts, (r.get("spread") or {}).get("seed_sd"), unit),
        "accuracy_by_length": _by_length(r, used, chance, long_ctx),
        "accuracy_by_distance": figs.accuracy_by_distance(used, target, chance),
        "extension_curves": figs.extension_curves(used, target, chance),
        "loss_curves": figs.loss_curves({k: v for k, v in context.curves.items() if k in arch_by_run}, arch_by_run),
        "attention": figs.attention_by_arch(used, a.get("sink_column"), a.get("entropy_column")) if a else None,
        "scores_by_run": figs.scores_by_run(r),
        "target_vs_count": figs.target_vs_count(r),
        "predictor_r2": figs.predictor_r2(_design_and_pre(data)),
        "effects": figs.effects(_with_data(r)) if r.get("factorial", True) else None,
        "calibration": figs.calibration(context.calibration) if context.calibration else None,
    }
    return {k: figs.png(f) for k, f in out.items() if f is not None}


def _by_length(r: Mapping[str, Any], df: pd.DataFrame, chance: float | None, long_ctx: int | None) -> Figure | None:
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


def _with_data(r: Mapping[str, Any]) -> dict[str, Any]:
    """The analysis with only the interactions measured on both sides (with and without the other feature)."""
    inter = [i for i in r["interactions"] if i.get("n_with") and i.get("n_without")]
    return {**r, "interactions": inter}


def _design_and_pre(data: ReportData) -> dict[str, Any]:
    """Only predictors one has before extension: the design and pre-extension measurements."""
    keep = {p.name: p.to_dict() for p in data.predictors if p.known_before_extension}
    return {**data.analysis, "predictors": keep}


CLAIM_SHORT = {  # the verdict table's words for each claim (X: the smallest effect of interest)
    EFFECT: "an effect (beyond noise, ≥ ±X)",
    BELOW_INTEREST: "beyond noise, below ±X",
    EQUIVALENT: "no effect larger than ±X",
    UNRESOLVED: "not resolved",
    UNTESTED: "not tested",
}
MAIN_FIGURES = ("verdict_effects", "accuracy_by_length", "accuracy_by_distance", "extension_curves", "loss_curves", "attention")
_ENV = None


def _template():
    global _ENV
    if _ENV is None:
        from jinja2 import Environment, PackageLoader, select_autoescape

        _ENV = Environment(loader=PackageLoader("archpool.report", "templates"), autoescape=select_autoescape(["j2", "html"]))
        _ENV.filters.update(eff=lambda v: fmt(v), ci=lambda c: fmt_ci(c), num=lambda v: fmt(v, signed=False))
    return _ENV.get_template("report.html.j2")


def _repro(context: ReportContext, r: Mapping[str, Any]) -> dict[str, Any]:
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
    data: ReportData, figures: dict[str, bytes], tabs: dict[str, pd.DataFrame], context: ReportContext, pool_name: str = ""
) -> str:
    """The report page: the question and verdict first, then figures, per-architecture numbers, statistics
    (details collapsed) and how the numbers were made."""
    r, found, verdicts = data.analysis, data.findings, list(data.verdicts)
    words = vd.describe_metric(r["target"], data.long_ctx)
    b64 = {k: _b64(v) for k, v in figures.items()}
    warnings_ = []
    if found.get("small_n"):
        warnings_.append({"id": "small-n-warning", "text": found["small_n"]})
    if (r.get("extension_effects") or {}).get("not_mastered"):
        names = ", ".join(x["run"] for x in r["extension_effects"]["not_mastered"])
        text = f"Left out of the extension effects because they did not master their own length: {names}."
        warnings_.append({"id": "not-mastered-warning", "text": text})
    notes = [n for n in r["notes"] if not n.startswith("not factorial")]  # the design note says it
    merged = [f"{k} = {' = '.join(v)}" for k, v in data.aliases.items()]
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
        min_effect=data.min_effect,
        claim_words=CLAIM_SHORT,
        verdicts=verdicts,
        paper_multiple=next((v.paper_multiple for v in verdicts if v.paper_multiple), None),
        treated_recipe=next((v.treated_recipe for v in verdicts if v.treated_recipe), None),
        co_column=next((v.co_column for v in verdicts if v.co_column), None),
        unit="accuracy (fraction of answers)" if "_acc" in r["target"] else r["target"],
        seed_sd=(r.get("spread") or {}).get("seed_sd"),
        warnings=warnings_,
        figures=[{"name": n, "b64": b64[n], "caption": CAPTIONS[n]} for n in MAIN_FIGURES if n in b64],
        sections=sections(data, tabs, b64, context),
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
    try:
        return _write_report(
            source, out, target, short_ctx, covariates, findings_targets, context, pool_name, answers, min_effect
        )
    except OSError as e:  # a read-only or full destination: one line naming it
        raise disk_error(getattr(e, "filename", None) or out, e) from None


def _write_report(  # noqa: PLR0913 — write_report's arguments, passed on
    source: str | Path | pd.DataFrame,
    out: Path,
    target: str | None,
    short_ctx: int | None,
    covariates: Iterable[str],
    findings_targets: Sequence[str],
    context: ReportContext | None,
    pool_name: str,
    answers: Answers | None,
    min_effect: float,
) -> Path:
    for name in REPORT_FILES:  # a failed analysis never leaves an older report looking current
        refuse_symlink(out / name).unlink(missing_ok=True)
    context = context or ReportContext()
    data = report_data(
        source,
        target,
        short_ctx,
        covariates,
        findings_targets=findings_targets,
        answers=answers,
        min_effect=min_effect,
        window=context.headroom,
    )
    owned_dir(out)
    figures = build_figures(data, context)
    tabs = layout_tables(data)
    # figures/ and tables/ are replaced whole: nothing of an earlier report stays beside this one
    with fresh_directory(out / "figures", replace=True, replaceable=_only(".png"), flag="a report") as figures_dir:
        for name, fig in figures.items():
            atomic_write_bytes(figures_dir / f"{name}.png", fig)
    with fresh_directory(out / "tables", replace=True, replaceable=_only(".csv"), flag="a report") as tables_dir:
        for name, t in tabs.items():
            atomic_write_text(tables_dir / f"{name}.csv", safe_frame(t).to_csv(index=False))
    atomic_write_text(out / "analysis.json", analysis_json(data) + "\n")
    words = vd.describe_metric(data.target, data.long_ctx)
    headline = vd.headline(list(data.verdicts), words, None)
    summary = scale.summary_markdown(data.analysis, data.verdicts, tabs.get("resolves", pd.DataFrame()), headline)
    atomic_write_text(out / "summary.md", summary)
    page = out / "report.html"
    atomic_write_text(page, render(data, figures, tabs, context, pool_name))
    return page


def _only(suffix: str):
    """Why a directory is not a report's own figures or tables (an entry other than a ``suffix`` file)."""

    def reason(directory: Path) -> str | None:
        other = next((p for p in directory.iterdir() if p.suffix != suffix or not p.is_file() or p.is_symlink()), None)
        return None if other is None else f"holds {other.name!r}, which no report writes"

    return reason


def layout_tables(data: ReportData) -> dict[str, pd.DataFrame]:
    """The analysis's tables, with those the report lays out as text (each also a CSV); empty ones left out."""
    r = data.analysis
    tabs = dict(data.tables)
    if "architectures" in tabs:
        tabs["architectures"] = arch_table(tabs["architectures"])
    laid_out = {
        "agreement": scale.agreement_table(r["agreement"]) if r.get("agreement") else pd.DataFrame(),
        "resolves": scale.resolves_table(data),
        "rung_zero": scale.rung_zero_table(data.rung_zero),
        "compounding": scale.compounding_table(r),
    }
    return {**tabs, **{k: t for k, t in laid_out.items() if len(t)}}
