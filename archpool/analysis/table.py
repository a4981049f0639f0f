"""Load and validate a results table: a CSV file or a pool directory.

Table format (one row per run)::

    run            unique run name (``name`` is accepted, as in olmpool-architectures.csv)
    swa            0 | 1 (true/false accepted): any sliding-window layer
    qk_norm        none | layerwise | headwise  (aliases: hw, hqk -> headwise; lqk -> layerwise; off -> none)
    norm           pre | post
    n_kv_heads     KV heads
    n_heads        query heads (32 if the column is absent, the paper's 7B shape)
    pretrain_ctx   pretraining context in tokens
    seed, init, fp8, n_layers, d_ff, window, d_model, params_b, arch, paper_*  design / confound columns
    feature_count, state, error                                              written by pools (recomputed / used for exclusion)
    anything else  a numeric metric (empty cells allowed, e.g. for failed runs)

Metric naming conventions the analysis understands:

- pre-extension metrics carry a ``base_`` prefix or a ``_pre`` suffix; everything else is post-extension;
- score by context length: ``<metric>@<length>`` with an integer length of two or more digits, optionally
  ``_pre`` / ``_post`` (e.g. ``ruler_ll@256_pre``; ``base_<metric>@<length>`` also reads as pre). A
  ``@0.5``-style suffix is a pretraining-milestone fraction, not a length;
- attention statistics: sink strength in ``attn_sink_rate`` (aliases ``attn_first_token_mass``,
  ``sink_strength``, ``sink_rate``, ``first_token_mass``), attention entropy in ``attn_entropy``
  (alias ``entropy``).

Pool directory contract (what ``archpool pool`` writes and this module reads)::

    POOL/results.csv                 the table above, one row per run (failed runs included, ``state`` = failed)
    POOL/runs/<run>/status.json      optional: {"state": "done" | "failed" | "running", "error": "...", "stage": "..."}

A run whose status.json says ``failed`` is marked failed (``state``/``error`` columns) even when its row
says otherwise; a failed run without a row is kept in ``df.attrs["failed"]`` so the report still lists it.
Failed runs are never fitted.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archpool.axes import AXES, AXIS, FEATURES, N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SWA, Axis
from archpool.columns import DESIGN_COLUMNS, RESULTS_FILE
from archpool.csvsafe import restore_cell
from archpool.errors import ConfigError, DataError
from archpool.rundir import pool_plan_path, pool_runs_dir
from archpool.safeload import read_record, read_run_status
from archpool.study import feature_flags, table_short_ctx

REQUIRED = ("run", *AXES)
# Columns that describe a run rather than measure it; never used as single predictors.
DESIGN = {*DESIGN_COLUMNS, "name", "params_b", "d_ff_ratio", "stage", "node"}
TEXT_OK = {"run", "name", "arch", *(a for a in AXES if AXIS[a].categorical), "init", "state", "error", "stage", "node"}
# Confounds that must match for two runs to count as a matched pair (docs/paper.md §5: init, fp8, depth).
MATCH_CONFOUNDS = ("init", "fp8", "n_layers")
SINK_COLUMNS = ("attn_sink_rate", "attn_first_token_mass", "sink_strength", "sink_rate", "first_token_mass")
ENTROPY_COLUMNS = ("attn_entropy", "entropy")
MAX_TABLE_INT = 2**53  # the integer columns (heads, contexts) hold counts a float64 stores exactly
_TRUE = {"1", "true", "yes", "on", "1.0"}
_FALSE = {"0", "false", "no", "off", "0.0"}


class TableError(DataError):
    """A results table that cannot be analysed; the message names the column (and row)."""

    def __init__(self, message: str, column: str | None = None, row: int | None = None):
        self.column, self.row = column, row
        super().__init__(message)


class ConstantTargetError(TableError):
    """Every run has the same target value: a finding (no effect to explain), not a broken table."""


def _where(column: str, i: int, run: object) -> str:
    return f"column {column!r}, row {i + 1} (run {run!r})"


def is_design(column: str) -> bool:
    return column in DESIGN or column.startswith("paper_")


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Numeric measurement columns, in table order."""
    return [c for c in df.columns if not is_design(c) and pd.api.types.is_numeric_dtype(df[c])]


def find_column(df: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    return next((c for c in names if c in df.columns), None)


def load_results(source: str | Path) -> pd.DataFrame:
    """Read and validate a results CSV or a pool directory (see the module docstring)."""
    source = Path(source)
    failed: list[dict[str, Any]] = []
    if source.is_dir():
        csv_path = source / RESULTS_FILE
        if not csv_path.is_file():
            raise DataError(f"{source}: not a pool directory (no {RESULTS_FILE})")
    elif source.is_file():
        csv_path = source
    else:
        raise DataError(f"{source}: no such results table or pool directory")
    try:
        raw = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{csv_path}: empty file") from None
    except pd.errors.ParserError as e:
        raise DataError(f"{csv_path}: not a readable CSV ({e})") from None
    except UnicodeDecodeError:
        raise DataError(f"{csv_path}: not a UTF-8 text CSV") from None
    _refuse_duplicate_columns(csv_path)
    raw = raw.rename(columns=restore_cell).map(restore_cell)  # the ' that kept spreadsheets from running a cell
    df = validate(raw, str(csv_path))
    if source.is_dir():
        df, failed = _apply_statuses(df, source)
    else:
        failed = _failed_rows(df)
    df.attrs["failed"] = failed
    df.attrs["source"] = str(source)
    return df


def _refuse_duplicate_columns(csv_path: Path) -> None:
    """DataError when the CSV's header names a column twice (pandas would rename the second ``X.1``)."""
    with open(csv_path, newline="", encoding="utf-8", errors="replace") as f:
        try:
            header = [restore_cell(c) for c in next(csv.reader(f), [])]
        except csv.Error:  # pandas already parsed the file; a header csv cannot read is left to validation
            return
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise DataError(f"{csv_path}: column {twice[0]!r} appears more than once in the header; name each column once")


def validate(raw: pd.DataFrame, label: str = "table") -> pd.DataFrame:
    """Typed, validated copy of a string table; raises TableError naming the column and row."""
    raw = _columns(raw, label)
    runs = _run_names(raw, label)
    df = pd.DataFrame({"run": runs})
    df[SWA] = [_flag(v, SWA, i, runs[i], label) for i, v in enumerate(raw[SWA])]
    for axis in (AXIS[QK_NORM], AXIS[NORM]):
        df[axis.name] = [_choice(v, axis, i, runs[i], label) for i, v in enumerate(raw[axis.name])]
    df[N_KV_HEADS] = _ints(raw[N_KV_HEADS], N_KV_HEADS, runs, label)
    df["n_heads"] = _ints(raw["n_heads"], "n_heads", runs, label) if "n_heads" in raw.columns else 32
    df[PRETRAIN_CTX] = _ints(raw[PRETRAIN_CTX], PRETRAIN_CTX, runs, label)
    _check_kv_heads(df, runs, label)
    more = _other_columns(raw, df.columns, runs, label)
    if more:
        df = pd.concat([df, pd.DataFrame(more, index=df.index)], axis=1)
    if "seed" in df.columns:
        _check_seeds(df, runs, label)
    if "state" not in df.columns:
        df["state"] = "done"
    df["state"] = df["state"].replace("", "done")
    if "error" not in df.columns:
        df["error"] = ""
    return df


def _columns(raw: pd.DataFrame, label: str) -> pd.DataFrame:
    """A copy with stripped column names (``name`` read as ``run``), every required column once."""
    raw = raw.copy()
    raw.columns = [str(c).strip() for c in raw.columns]
    if "run" not in raw.columns and "name" in raw.columns:
        raw = raw.rename(columns={"name": "run"})
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise TableError(
            f"{label}: missing column {missing[0]!r}; a results table needs {', '.join(REQUIRED)}", column=missing[0]
        )
    dup = [c for c in raw.columns if list(raw.columns).count(c) > 1]
    if dup:
        raise TableError(f"{label}: column {dup[0]!r} appears twice", column=dup[0])
    return raw


def _run_names(raw: pd.DataFrame, label: str) -> pd.Series:
    """The stripped ``run`` column: every name non-empty and unique."""
    runs = raw["run"].str.strip()
    for i, r in enumerate(runs):
        if not r:
            raise TableError(f"{label}: {_where('run', i, r)}: empty run name", column="run", row=i + 1)
    seen: dict[str, int] = {}
    for i, r in enumerate(runs):
        if r in seen:
            raise TableError(f"{label}: {_where('run', i, r)}: duplicate of row {seen[r] + 1}", column="run", row=i + 1)
        seen[r] = i
    return runs


def _check_seeds(df: pd.DataFrame, runs: pd.Series, label: str) -> None:
    """A seed on every row or on none: a blank seed among labelled ones would silently drop the run from
    every seed-paired effect."""
    seeds = pd.to_numeric(df["seed"], errors="coerce")
    if seeds.notna().any() and seeds.isna().any():
        i = int(np.flatnonzero(seeds.isna())[0])
        raise TableError(
            f"{label}: {_where('seed', i, runs[i])}: no seed where other runs have one (effects pair runs by seed)",
            column="seed",
            row=i + 1,
        )


def _check_kv_heads(df: pd.DataFrame, runs: pd.Series, label: str) -> None:
    """Every row's KV heads in [1, query heads] and evenly sharing them."""
    kv, heads = df[N_KV_HEADS], df["n_heads"]
    for i in np.flatnonzero((kv < 1) | (kv > heads) | (heads % kv.clip(lower=1) != 0)):
        rule = ">" if kv[i] > heads[i] else "do not evenly share"
        raise TableError(
            f"{label}: {_where(N_KV_HEADS, int(i), runs[i])}: {kv[i]} KV heads {rule} {heads[i]} query heads",
            column=N_KV_HEADS,
            row=int(i) + 1,
        )


def _other_columns(raw: pd.DataFrame, typed: pd.Index, runs: pd.Series, label: str) -> dict[str, object]:
    """The columns beyond ``typed``: ``fp8`` a 0/1 flag (empty = 0), text columns as text (``paper_*``
    numeric where every filled cell is a number), every other column numbers. Built apart and joined
    once (a wide pool table has hundreds of metrics)."""
    more: dict[str, object] = {}
    for c in raw.columns:
        if c in typed:
            continue
        col = raw[c].str.strip()
        if c in ("fp8",):
            more[c] = [_flag(v, c, i, runs[i], label) if v else 0 for i, v in enumerate(col)]
        elif c in TEXT_OK or c.startswith("paper_"):
            num = pd.to_numeric(col.replace("", np.nan), errors="coerce")
            more[c] = num if c not in TEXT_OK and num.notna().sum() == (col != "").sum() else col
        else:
            more[c] = _numbers(col, c, runs, label)
    return more


def _flag(v: str, column: str, i: int, run: str, label: str) -> int:
    s = str(v).strip().lower()
    if s in _TRUE:
        return 1
    if s in _FALSE:
        return 0
    raise TableError(f"{label}: {_where(column, i, run)}: {v!r} is not 0/1", column=column, row=i + 1)


def _choice(v: str, axis: Axis, i: int, run: str, label: str) -> str:
    """A categorical axis's value in its canonical spelling."""
    s = str(v).strip().lower()
    s = axis.aliases.get(s, s)
    if s not in axis.values:
        alias = f" (aliases: {', '.join(axis.aliases)})" if axis.aliases else ""
        raise TableError(
            f"{label}: {_where(axis.name, i, run)}: unknown value {v!r}; allowed: {', '.join(axis.values)}{alias}",
            column=axis.name,
            row=i + 1,
        )
    return s


def _count(v: object) -> int | None:
    """``v`` (a cell) as an integer from 1 to ``MAX_TABLE_INT``; None when it is not one."""
    try:
        x = float(str(v).strip())
    except (ValueError, OverflowError):
        return None
    if not 1 <= x <= MAX_TABLE_INT or x != int(x):  # nan and inf fail the range test
        return None
    return int(x)


def _ints(col: pd.Series, column: str, runs: pd.Series, label: str) -> pd.Series:
    out = []
    for i, v in enumerate(col):
        x = _count(v)
        if x is None:
            raise TableError(
                f"{label}: {_where(column, i, runs[i])}: {v!r} is not a positive integer of at most 2**53",
                column=column,
                row=i + 1,
            )
        out.append(x)
    return pd.Series(out, dtype="int64")


def _numbers(col: pd.Series, column: str, runs: pd.Series, label: str) -> pd.Series:
    """A numeric column; empty cells become NaN (a failed or missing measurement)."""
    num = pd.to_numeric(col.replace({"": np.nan, "nan": np.nan, "NaN": np.nan}), errors="coerce")
    bad = np.flatnonzero(num.isna() & ~col.isin(["", "nan", "NaN"]))
    if len(bad):
        i = int(bad[0])
        raise TableError(
            f"{label}: {_where(column, i, runs[i])}: {col[i]!r} is not a number; this column must be "
            f"numeric like every metric column (leave the cell empty for a missing value)",
            column=column,
            row=i + 1,
        )
    inf = np.flatnonzero(np.isinf(num.to_numpy(dtype=float)))
    if len(inf):
        i = int(inf[0])
        raise TableError(
            f"{label}: {_where(column, i, runs[i])}: {col[i]!r} is infinite; a measurement must be finite "
            f"(leave the cell empty for a missing value)",
            column=column,
            row=i + 1,
        )
    return num.astype(float)


def pool_report_settings(source: str | Path) -> dict[str, Any]:
    """A pool directory's ``report:`` settings (``target``, ``findings``, ...) from its ``plan.json``;
    ``{}`` for a CSV or a directory without a plan."""
    plan = pool_plan_path(source)
    if not Path(source).is_dir() or not plan.is_file():
        return {}
    try:
        pool = read_record(plan).get("pool")
    except ConfigError as e:
        raise DataError(f"{plan}: unreadable pool plan ({e.message})") from None
    if not isinstance(pool, dict):
        raise DataError(f"{plan}: unreadable pool plan (no 'pool' mapping)")
    report = pool.get("report")
    return dict(report) if isinstance(report, dict) else {}


def default_short_ctx(df: pd.DataFrame) -> int:
    """The table's short pretraining context: its ``short_ctx`` column (pools write the pool's one
    definition there), else the smallest context when the table has several, else 4096 (the paper's)."""
    if "short_ctx" in df.columns:
        cells = pd.to_numeric(df["short_ctx"], errors="coerce")
        for i, v in enumerate(cells):
            if pd.notna(v) and _count(v) is None:
                raise TableError(
                    f"{df.attrs.get('source', 'table')}: {_where('short_ctx', i, df['run'].iloc[i])}: "
                    f"{v!r} is not a positive integer of at most 2**53",
                    column="short_ctx",
                    row=i + 1,
                )
        values = sorted(set(int(v) for v in cells.dropna()))
        if len(values) > 1:
            raise TableError(
                f"column 'short_ctx' holds several values {values}; one table has one short context", column="short_ctx"
            )
        if values:
            return values[0]
    return table_short_ctx(df[PRETRAIN_CTX])


def features(df: pd.DataFrame, short_ctx: int) -> pd.DataFrame:
    """The four binary features (docs/paper.md §1), their count, and the underlying KV-head ratio."""
    flags = [
        feature_flags(qk_norm=q, n_kv_heads=kv, n_heads=h, swa=s, pretrain_ctx=c, short_ctx=short_ctx)
        for q, kv, h, s, c in zip(df[QK_NORM], df[N_KV_HEADS], df["n_heads"], df[SWA], df[PRETRAIN_CTX])
    ]
    out = pd.DataFrame(flags, index=df.index, columns=list(FEATURES)).astype(int)
    out["feature_count"] = out[list(FEATURES)].sum(axis=1)
    out["kv_ratio"] = df[N_KV_HEADS] / df["n_heads"]
    return out


def _failed_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    rows = df[df["state"] == "failed"]
    return [{"run": r, "error": str(e), "stage": ""} for r, e in zip(rows["run"], rows["error"])]


def _apply_statuses(df: pd.DataFrame, pool: Path) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Mark runs failed from ``runs/<run>/status.json``; collect failed runs that have no row."""
    failed: list[dict[str, Any]] = []
    runs_dir = pool_runs_dir(pool)
    statuses = sorted(runs_dir.glob("*/status.json")) if runs_dir.is_dir() else []
    index = {r: i for i, r in enumerate(df["run"])}
    for path in statuses:
        status = read_run_status(path) or {}  # a damaged status.json: StateError naming it
        if status.get("state") != "failed":
            continue
        run, error, stage = path.parent.name, str(status.get("error") or ""), str(status.get("stage") or "")
        if run in index:
            df.loc[index[run], "state"] = "failed"
            if error:
                df.loc[index[run], "error"] = error
        failed.append(
            {
                "run": run,
                "error": error or str(df["error"][index[run]] if run in index else ""),
                "stage": stage,
                "in_table": run in index,
            }
        )
    listed = {f["run"] for f in failed}
    failed += [dict(f, in_table=True) for f in _failed_rows(df) if f["run"] not in listed]
    return df, failed
