"""``archpool run``: plan a pool, run the pool-level stages here, every run's stage chain in workers
(cached, resumable, failure-isolated), then write ``results.csv`` and the report.

Layout of a pool directory (``out/<pool>`` by default)::

    plan.json               the expanded pool and its stage graph (node ids, references, content keys)
    events.jsonl            one line per stage start / skip / done / error (progress, status, tests)
    stages/<stage>/<key>/   content-addressed stage outputs; DONE marks a finished one
    runs/<run>/status.json  {"state": "done" | "failed" | "running" | "interrupted", "error": ..., "stage": ...}
    runs/<run>/log.txt      the run's log (its worker's stdout and stderr)
    results.csv             one row per run: design columns, state, metrics (analysis contract)
    report/                 report.md, and the analysis report (report.html, figures, analysis.json)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from archpool.columns import ANSWERS_FILE
from archpool.io import atomic_write_text, directory_lock, remove_stale_temporaries
from archpool.pool.answers import write_answers
from archpool.pool.calibrate import calibration_path, run_calibration
from archpool.pool.executor import LocalExecutor, SubmititExecutor, split_threads
from archpool.pool.graph import Execution, Node, format_exception, log_event
from archpool.pool.job import read_status, run_complete, run_nodes, write_status
from archpool.pool.plan import build_plan, write_plan
from archpool.pool.progress import Progress
from archpool.pool.provenance import report_context
from archpool.pool.results import RESULTS, results_rows, rows_to_csv
from archpool.pool.spec import PoolSpec
from archpool.pool.stages import stage_function
from archpool.report.context import ReportContext
from archpool.report.pool import PoolReport, write_pool_report
from archpool.rundir import pool_report_dir


def default_out(pool: PoolSpec, size_overridden: bool = False) -> Path:
    root = Path(os.environ.get("ARCHPOOL_OUT", "out"))
    return root / (f"{pool.name}-{pool.size}" if size_overridden else pool.name)


def run_pool(
    pool: PoolSpec,
    out: Path,
    jobs: int = 1,
    executor: str = "local",
    only: list[str] | None = None,
    progress: bool = True,
    executor_params: dict[str, Any] | None = None,
    threads: int | None = None,
) -> int:
    """Run the pool; 0 if every selected run finished and the report was written, else 1 (the other
    runs still ran, and results.csv holds whatever finished). A second ``archpool run`` on the same
    pool directory while this one runs gets a ``LockError`` naming this process. An interrupt
    (``KeyboardInterrupt``: Ctrl-C, or SIGTERM through the CLI) stops every worker, releases the lock
    and goes on; finished stages stay cached, so running the pool again resumes it."""
    out = Path(out)
    for name in only or ():
        pool.run(name)  # a name the pool lacks is refused before anything is written
    check_pool_directory(out, pool)
    with directory_lock(out, "pool directory"):
        remove_stale_temporaries(out)
        return _run_locked(pool, out, jobs, executor, only, progress, executor_params, threads)


def check_pool_directory(out: Path, pool: PoolSpec) -> None:
    """``ConfigError`` when ``out`` holds another pool's plan: running would replace it."""
    from archpool.errors import ConfigError, StateError
    from archpool.rundir import pool_plan_path
    from archpool.safeload import read_record

    path = pool_plan_path(out)
    if not path.is_file():
        return
    try:
        recorded = read_record(path).get("pool") or {}
    except (StateError, ConfigError, OSError, ValueError):
        return  # a damaged plan is the run's to report and replace
    other = recorded.get("name") if isinstance(recorded, dict) else None
    if isinstance(other, str) and other != pool.name:
        raise ConfigError("--out", f"{out} holds the runs of pool {other!r}, not {pool.name!r}; give this pool its own directory")


def _run_locked(
    pool: PoolSpec,
    out: Path,
    jobs: int,
    executor: str,
    only: list[str] | None,
    progress: bool,
    executor_params: dict[str, Any] | None,
    threads: int | None,
) -> int:
    nodes = build_plan(pool)
    write_plan(out, pool, nodes)
    selected = [pool.run(r).name for r in only] if only else [r.name for r in pool.runs]
    chosen = list({n.id: n for r in selected for n in run_nodes(nodes, r)}.values())
    bar = Progress(out, chosen, enabled=progress)
    log_event(out, kind="pool_start", runs=selected, jobs=jobs, executor=executor)
    t0 = time.time()
    try:
        if _run_shared_nodes(out, pool, nodes, chosen, selected, threads or split_threads(1), bar):
            todo = [r for r in selected if not (run_complete(out, nodes, r) and read_status(out, r).get("state") == "done")]
            for r in selected:
                if r not in todo:
                    log_event(out, kind="run_cached", run=r)
            handles = make_executor(executor, jobs, threads, executor_params).run_all(out, todo, bar.poll) if todo else {}
            for run, h in handles.items():
                if h.error and read_status(out, run).get("state") != "failed":
                    write_status(out, run, dict(state="failed", error=h.error, stage=None, node=None))
        bar.poll()
    except KeyboardInterrupt as e:  # the executor has stopped its workers; the CLI reports the interrupt
        with contextlib.suppress(Exception):
            log_event(out, kind="pool_interrupted", signal=str(e) or "SIGINT", seconds=round(time.time() - t0, 2))
        raise
    finally:
        bar.close()

    report_path = finalize(out, pool, nodes)
    failed = [r for r in selected if read_status(out, r).get("state") != "done"]
    minutes = (time.time() - t0) / 60
    print(
        f"pool {pool.name}: {len(selected) - len(failed)}/{len(selected)} runs done in {minutes:.1f} min; results: {out / RESULTS}"
    )
    for r in failed:
        print(f"  FAILED {r}: {read_status(out, r).get('error', '?')}  (log: {out / 'runs' / r / 'log.txt'})")
    if report_path:
        print(f"report: {report_path}")
    log_event(out, kind="pool_end", failed=failed, seconds=round(time.time() - t0, 2))
    return 1 if failed or report_path is None else 0


def _run_shared_nodes(
    out: Path, pool: PoolSpec, nodes: list[Node], chosen: list[Node], selected: list[str], threads: int, bar: Progress
) -> bool:
    """The pool-level inputs (the data) first, once, here: every run needs them. On failure every
    selected run is marked failed with the shared stage's error; returns whether all succeeded."""
    execution = Execution(out, {n.id: n for n in nodes}, pool, threads, lambda m: None)
    for node in [n for n in chosen if n.run is None]:
        try:
            execution.execute(node, stage_function(pool.backend, node.stage), None, label="pool")
        except Exception as e:
            error = f"stage {node.id} failed: {type(e).__name__}: {e}"
            for r in selected:
                write_status(
                    out, r, dict(state="failed", stage=node.stage, node=node.id, error=error, traceback=format_exception(e))
                )
            return False
        bar.poll()
    return True


EXECUTORS = ("local", "slurm", "submitit-local", "debug")


def make_executor(name: str, jobs: int, threads: int | None, params: dict[str, Any] | None) -> LocalExecutor | SubmititExecutor:
    """Local worker processes, or submitit jobs (``slurm``; ``submitit-local`` / ``debug`` to test them here)."""
    if name == "local":
        return LocalExecutor(jobs=jobs, threads=threads)
    if name in EXECUTORS:
        cluster = {"slurm": "slurm", "submitit-local": "local", "debug": "debug"}[name]
        return SubmititExecutor(cluster=cluster, params=dict(params or {}), threads=threads, jobs=jobs)
    raise ValueError(f"unknown executor {name!r}; allowed: {', '.join(EXECUTORS)}")


def report_settings(pool: PoolSpec, context: ReportContext | None = None) -> PoolReport:
    return PoolReport(
        context=context or ReportContext(),
        name=pool.name,
        size=pool.size,
        description=pool.description,
        target=pool.report.target,
        short_ctx=pool.short_ctx,
        covariates=tuple(pool.report.covariates),
        findings=tuple(pool.report.findings),
        min_effect=float(pool.report.min_effect),
    )


REPORT_ERROR = "report_error.txt"  # the traceback of a pool report that failed


def finalize(out: Path, pool: PoolSpec, nodes: list[Node]) -> Path | None:
    """Write results.csv from whatever finished, then the report (failed runs are listed in it).
    A report that fails leaves results.csv, report.md with the error, and ``report_error.txt``; one that
    succeeds removes an earlier failure's ``report_error.txt``."""
    try:
        run_calibration(Path(out), pool, nodes, log=lambda m: print(m, file=sys.stderr))
    except Exception as e:  # the report then says the calibration is missing; the pool's results stand
        calibration_path(out).unlink(missing_ok=True)
        print(f"calibration failed ({type(e).__name__}: {e})", file=sys.stderr)
    rows = results_rows(out, pool, nodes)
    atomic_write_text(Path(out) / RESULTS, rows_to_csv(rows))
    try:
        write_answers(Path(out), pool, nodes)
    except Exception as e:  # the analysis then falls back to seed means; a stale table must not stay beside results.csv
        (Path(out) / ANSWERS_FILE).unlink(missing_ok=True)
        print(f"answers table not written ({type(e).__name__}: {e}); the analysis uses seed means", file=sys.stderr)
    error = pool_report_dir(out) / REPORT_ERROR
    try:
        written = write_pool_report(Path(out), report_settings(pool, report_context(Path(out), pool, nodes)), rows)
    except Exception as e:
        print(f"report failed: {type(e).__name__}: {e}", file=sys.stderr)
        atomic_write_text(error, format_exception(e))
        return None
    error.unlink(missing_ok=True)
    return written
