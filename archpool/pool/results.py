"""``results.csv``: one row per run (design columns, state, metrics), the analysis's input.

Design columns come from the run's spec and the study's definitions (:mod:`archpool.study`); metric
columns are the stages' metrics under the names of :mod:`archpool.columns`, the means over each
extension ladder (``#ladder_mean``, and ``#ladder_auc``: the area under the curve over extension steps), and whether the run mastered its own length before extension
(``mastery_acc``, ``mastery_min_bucket``, ``mastered``: :mod:`archpool.analysis.mastery`, on the task of
the pool's report target).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from archpool.analysis.mastery import MASTERY_METRIC, mastery, mastery_metric
from archpool.columns import DESIGN_COLUMNS, LADDER_AUC, LADDER_MEAN, RESULTS_FILE, RUNG_SEP
from archpool.csvsafe import csv_cell
from archpool.pool.graph import Node, is_done, read_result
from archpool.pool.job import status_path
from archpool.pool.plan import read_plan, result_columns
from archpool.pool.spec import PoolSpec
from archpool.safeload import read_run_status

RESULTS = RESULTS_FILE


def run_metrics(out: Path, pool: PoolSpec, nodes: list[Node], run: str) -> dict[str, Any]:
    primary = pool.extension[0].name if pool.extension else ""
    metrics: dict[str, Any] = {}
    ladders: dict[tuple[str, str], list[tuple[int, dict[str, Any] | None]]] = {}  # (prefix, suffix) -> (budget, rung)
    for n in nodes:
        if n.run != run:
            continue
        prefix, suffix = ("", "") if n.stage == "pretrain" else result_columns(n, primary)
        done = is_done(out, n)
        values = (read_result(out, n).get("metrics") or {}) if done else {}
        if n.stage == "eval" and n.rung is not None:
            ladders.setdefault((prefix, suffix.rpartition(RUNG_SEP)[0]), []).append((n.rung, values if done else None))
        for k, v in values.items():
            if isinstance(v, (int, float, str)) or v is None:
                metrics[f"{prefix}{k}{suffix}"] = v
    for (prefix, suffix), rungs in ladders.items():
        rung_values = [v for _, v in rungs]
        metrics.update({f"{prefix}{k}{suffix}{RUNG_SEP}{LADDER_MEAN}": v for k, v in ladder_means(rung_values).items()})
        metrics.update({f"{prefix}{k}{suffix}{RUNG_SEP}{LADDER_AUC}": v for k, v in ladder_auc(rungs).items()})
    return metrics


def ladder_auc(rungs: list[tuple[int, dict[str, Any] | None]]) -> dict[str, float]:
    """Each metric's area under its ladder curve over extension steps, divided by the last budget: the mean
    value over steps 0..N with the curve interpolated linearly between rungs (trapezoids), so every
    extension step weighs the same, however the rungs are spaced. Needs every rung and at least two."""
    pts = sorted(((b, v) for b, v in rungs if v is not None), key=lambda r: r[0])
    if len(rungs) < 2 or len(pts) < len(rungs):
        return {}
    span = pts[-1][0] - pts[0][0]
    if span <= 0:
        return {}
    first = pts[0][1]
    names = [k for k, v in first.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    out = {}
    for k in names:
        if not all(isinstance(v.get(k), (int, float)) for _, v in pts):
            continue
        area = sum((b1 - b0) * (float(v0[k]) + float(v1[k])) / 2 for (b0, v0), (b1, v1) in zip(pts, pts[1:]))
        out[k] = round(area / span, 6)
    return out


def ladder_means(rungs: list[dict[str, Any] | None]) -> dict[str, float]:
    """Each metric's mean over the rungs of one ladder, for the metrics every rung has (a mean over
    part of a ladder would not compare across runs; an unfinished rung gives no means)."""
    done = [r for r in rungs if r is not None]
    if not rungs or len(done) < len(rungs):
        return {}
    names = [k for k, v in done[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {
        k: round(sum(float(r[k]) for r in done) / len(done), 6)
        for k in names
        if all(isinstance(r.get(k), (int, float)) for r in done)
    }


def results_rows(out: Path, pool: PoolSpec | None = None, nodes: list[Node] | None = None) -> list[dict[str, Any]]:
    if pool is None or nodes is None:
        pool, nodes = read_plan(out)
    short = pool.short_ctx
    target = pool.report.target_key
    metric = (mastery_metric(target) if target else None) or MASTERY_METRIC  # the task whose mastery is checked
    rows = []
    for spec in pool.runs:
        status = read_run_status(status_path(out, spec.name)) or {"state": "pending"}  # a damaged one: StateError
        row = spec.row()
        row["short_ctx"] = short
        row["feature_count"] = spec.feature_count(short)
        row["state"] = status.get("state", "pending")
        row["error"] = status.get("error", "") if row["state"] == "failed" else ""
        row.update(run_metrics(out, pool, nodes, spec.name))
        row.update({k: v for k, v in mastery(row, metric).items() if v is not None})
        rows.append(row)
    return rows


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    columns = [c for c in DESIGN_COLUMNS if any(c in r for r in rows)]
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[csv_cell(c) for c in columns], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({csv_cell(k): _fmt(csv_cell(r.get(k, ""))) for k in columns})
    return buf.getvalue()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return repr(round(v, 10))
    return v
