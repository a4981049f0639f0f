"""The report's one entry into the analysis: load a results table (and its scored answers), analyse it and
return everything the report lays out as a :class:`archpool.analysis.results.ReportData`: the typed
verdict, transfer cells, predictors and effects, the findings, and the tables as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from archpool.analysis import findings as fnd
from archpool.analysis import frames
from archpool.analysis.answers import Answers, load_answers
from archpool.analysis.results import AxisVerdict, Predictor, ReportData, TransferCell, typed_effects, typed_predictors
from archpool.analysis.summary import analyze, to_json
from archpool.analysis.summary_text import format_text
from archpool.analysis.table import ConstantTargetError, load_results
from archpool.analysis.transfer import min_effect_of, rung_zero, transfer_cells
from archpool.analysis.verdict import axis_verdicts, long_ctx_of, target_multiple
from archpool.study import HEADROOM, MIN_EFFECT

__all__ = ["Answers", "ConstantTargetError", "analysis_json", "analysis_text", "load", "report_data"]


def load(source: str | Path) -> tuple[pd.DataFrame, Answers | None]:
    """A pool directory's or CSV's results table and its scored answers (None without an answers table)."""
    return load_results(source), load_answers(source)


def analysis_text(
    df: pd.DataFrame,
    target: str | None,
    short_ctx: int | None,
    covariates: Iterable[str],
    answers: Answers | None,
    min_effect: float = MIN_EFFECT,
    window: tuple[float, float] = HEADROOM,
) -> str:
    """The analysis of ``df`` as plain text (``analysis.txt``)."""
    return format_text(analyze(df, target, short_ctx, covariates, answers, min_effect, window))


def analysis_json(data: ReportData) -> str:
    """``analysis.json``: the report's analysis as strict JSON (NaN and infinities become null)."""
    return to_json(data.to_dict())


def report_data(
    source: str | Path | pd.DataFrame,
    target: str | None = None,
    short_ctx: int | None = None,
    covariates: Iterable[str] = (),
    *,
    findings_targets: Sequence[str] = (),
    answers: Answers | None = None,
    min_effect: float = MIN_EFFECT,
    window: tuple[float, float] = HEADROOM,
) -> ReportData:
    """Analyse ``source`` (CSV, pool dir or loaded table) for the report. ``answers``: the scored answers
    (default: the answers table beside a CSV or in a pool directory); ``findings_targets``: metrics the
    findings report besides the target (metric columns identical to another are merged first);
    ``window``: the headroom rule's window."""
    df = source if isinstance(source, pd.DataFrame) else load_results(source)
    if answers is None and not isinstance(source, pd.DataFrame):
        answers = load_answers(source)
    covariates = list(covariates)
    findings_targets = [t for t in findings_targets if t and t in df.columns]  # a pool's list may name unmeasured columns
    keep = [t for t in (target, *findings_targets, *covariates) if t]
    df, aliases = fnd.merge_identical(df, keep=keep)
    r = analyze(df, target, short_ctx, covariates, answers, min_effect, window)
    found = fnd.findings(df, r, findings_targets, covariates, answers)
    verdicts = axis_verdicts(r, found)
    long_ctx = long_ctx_of(r)
    cells = transfer_cells(r, long_ctx)
    predictors = typed_predictors(r["predictors"])
    return ReportData(
        analysis=r,
        table=df,
        findings=found,
        aliases=aliases,
        predictors=predictors,
        axis_effects=typed_effects(r["axis_effects"]),
        feature_effects=typed_effects(r["feature_effects"]),
        verdicts=tuple(verdicts),
        transfer=tuple(cells),
        rung_zero=tuple(rung_zero(r)),
        tables=_tables(r, df, found, aliases, predictors, verdicts, cells),
        min_effect=min_effect_of(r),
        long_ctx=long_ctx,
        target_multiple=target_multiple(r["target"], long_ctx),
    )


def _tables(
    r: Mapping[str, Any],
    df: pd.DataFrame,
    found: Mapping[str, Any],
    aliases: Mapping[str, list[str]],
    predictors: Sequence[Predictor],
    verdicts: Sequence[AxisVerdict],
    cells: Sequence[TransferCell],
) -> dict[str, pd.DataFrame]:
    """The analysis's tables that are data (the report adds those it lays out as text), empty ones left out."""
    tabs = frames.tables(r, predictors, aliases)
    ft = frames.findings_table(found)
    if len(ft):
        tabs = {"findings": ft, **tabs}
    verdict_rows = pd.DataFrame([v.to_dict() for v in verdicts])
    if len(verdict_rows):
        tabs = {"verdict": verdict_rows, **tabs}
    if cells:
        tabs["transfer"] = pd.DataFrame([c.to_dict() for c in cells])
    at = frames.arch_table(df, r)
    if len(at):
        tabs["architectures"] = at
    return tabs
