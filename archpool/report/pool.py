"""A pool directory's report: ``report/report.md`` (every run, failures listed) and, with three or more
finished runs, the analysis (``report/report.html`` + figures, tables, ``analysis.json``, ``analysis.txt``).

Takes plain values, not the pool's own types: the report sits above the analysis, below the pool.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.analysis.report_data import ConstantTargetError, analysis_text, load
from archpool.axes import AXES
from archpool.io import atomic_write_text
from archpool.report.context import ReportContext
from archpool.report.html import REPORT_FILES, write_report
from archpool.rundir import pool_report_dir
from archpool.study import MIN_EFFECT

HEADLINE = ("mastery_acc", "mastered", "pretrain_loss", "extension_loss", "attn_sink_rate", "attn_entropy")
# files a previous analysis left; removed before a new one so a failure never leaves them looking current
ANALYSIS_FILES = (*REPORT_FILES, "analysis.txt")
MIN_RUNS = 3


@dataclass
class PoolReport:
    """What the pool's ``report:`` section and header say about it."""

    name: str
    size: str
    description: str = ""
    target: str | None = None
    short_ctx: int | None = None
    covariates: Sequence[str] = ()
    findings: Sequence[str] = field(default_factory=tuple)
    context: ReportContext = field(default_factory=ReportContext)
    min_effect: float = MIN_EFFECT


def write_pool_report(out: Path, settings: PoolReport, rows: list[dict[str, Any]]) -> Path:
    """The report's entry page: report.html when the analysis ran, else report.md (which says why not)."""
    out = Path(out)
    report_dir = pool_report_dir(out)
    plain = _plain_report(out, settings, rows)
    for name in ANALYSIS_FILES:
        (report_dir / name).unlink(missing_ok=True)
    done = [r for r in rows if r.get("state") == "done"]
    if len(done) < MIN_RUNS:
        _append(plain, f"\n(analysis skipped: {len(done)} finished run(s); it needs at least {MIN_RUNS})\n")
        return plain
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df, answers = load(out)
            text = analysis_text(
                df,
                settings.target,
                settings.short_ctx,
                settings.covariates,
                answers,
                settings.min_effect,
                settings.context.headroom,
            )
            atomic_write_text(report_dir / "analysis.txt", text + "\n")
            page = write_report(
                df,
                report_dir,
                settings.target,
                settings.short_ctx,
                settings.covariates,
                findings_targets=settings.findings,
                context=settings.context,
                pool_name=settings.name,
                answers=answers,
                min_effect=settings.min_effect,
            )
    except ConstantTargetError as e:  # every run scored the same: nothing to explain, and not an error of the pool
        for name in ANALYSIS_FILES:
            (report_dir / name).unlink(missing_ok=True)
        _append(plain, f"\n## No analysis\n\n{e}: every run scored the same, so there is no effect to explain.\n")
        return plain
    except Exception as e:  # keep the plain report; show why the analysis did not run
        for name in ANALYSIS_FILES:
            (report_dir / name).unlink(missing_ok=True)
        _append(plain, f"\n## Analysis failed\n\n`{type(e).__name__}: {e}`\n")
        raise
    _append(plain, "\n## Analysis\n\n```\n" + text + "\n```\n\nHTML report: report.html\n")
    return page


def _append(path: Path, text: str) -> None:
    atomic_write_text(path, path.read_text() + text)


def _plain_report(out: Path, settings: PoolReport, rows: list[dict[str, Any]]) -> Path:
    """Every run with its axes, state and headline metrics (results.csv has them all)."""
    target = settings.target
    metrics = [m for m in (target, *HEADLINE) if m and any(m in r for r in rows)]
    cols = ["run", "feature_count", *AXES, "state", *metrics]
    lines = [
        f"# Pool `{settings.name}` ({settings.size}, {len(rows)} runs)",
        "",
        md_escape(settings.description),
        "",
        f"All metrics: `{out / 'results.csv'}`" + (f"; target `{target}`." if target else "."),
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in rows:
        lines.append("| " + " | ".join(md_escape(_cell(r.get(c, ""))) for c in cols) + " |")
    failed = [r for r in rows if r.get("state") == "failed"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- {md_escape(r['run'])}: {md_escape(r.get('error', ''))} (log: runs/{r['run']}/log.txt)" for r in failed]
    path = pool_report_dir(out) / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def md_escape(text: str) -> str:
    """Text shown literally in markdown: no HTML, links, emphasis, code or table breaks."""
    text = _MD_SPECIAL.sub(r"\\\1", str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(text.splitlines())


def _cell(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
