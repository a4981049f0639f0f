"""``results.csv``: one row per run (design columns, state, metrics), the analysis's input.

Design columns come from the run's spec and the study's definitions (:mod:`archpool.study`); metric
columns are the stages' metrics under the names of :mod:`archpool.columns`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from archpool.columns import DESIGN_COLUMNS, RESULTS_FILE
from archpool.pool.graph import Node, is_done, read_result
from archpool.pool.job import read_status
from archpool.pool.plan import read_plan, result_columns
from archpool.pool.spec import PoolSpec

RESULTS = RESULTS_FILE


def run_metrics(out: Path, pool: PoolSpec, nodes: list[Node], run: str) -> dict[str, Any]:
    primary = pool.extension[0]["name"] if pool.extension else ""
    metrics: dict[str, Any] = {}
    for n in nodes:
        if n.run != run or not is_done(out, n):
            continue
        result = read_result(out, n)
        if n.stage == "pretrain":
            prefix, suffix = "", ""
        else:
            prefix, suffix = result_columns(n, primary)
        for k, v in (result.get("metrics") or {}).items():
            if isinstance(v, (int, float, str)) or v is None:
                metrics[f"{prefix}{k}{suffix}"] = v
    return metrics


def results_rows(out: Path, pool: PoolSpec | None = None, nodes: list[Node] | None = None) -> list[dict[str, Any]]:
    if pool is None or nodes is None:
        pool, nodes = read_plan(out)
    short = pool.short_ctx
    rows = []
    for spec in pool.runs:
        status = read_status(out, spec.name)
        row = spec.row()
        row["short_ctx"] = short
        row["feature_count"] = spec.feature_count(short)
        row["state"] = status.get("state", "pending")
        row["error"] = status.get("error", "") if row["state"] == "failed" else ""
        row.update(run_metrics(out, pool, nodes, spec.name))
        rows.append(row)
    return rows


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    columns = [c for c in DESIGN_COLUMNS if any(c in r for r in rows)]
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt(r.get(k, "")) for k in columns})
    return buf.getvalue()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return repr(round(v, 10))
    return v
