"""One run's stage chain inside a worker process (local, SLURM, or every rank under torchrun).

``run_job`` never raises: the run's outcome goes to ``runs/<run>/status.json``, so one failed run
never takes the pool down. An interrupt (``KeyboardInterrupt``) is recorded as ``interrupted`` and
goes on: the process stops, and a re-run resumes the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from archpool.errors import StateError
from archpool.io import atomic_write_json, open_append_text
from archpool.pool.graph import Execution, Node, format_exception, is_done, log_event
from archpool.pool.plan import read_plan
from archpool.rundir import pool_run_dir, pool_run_log, pool_run_status
from archpool.runtime import process_rank
from archpool.safeload import read_run_status


def run_nodes(nodes: list[Node], run: str) -> list[Node]:
    """The run's own nodes plus the pool-level nodes they depend on, in dependency order."""
    by_id = {n.id: n for n in nodes}
    wanted: set[str] = set()

    def visit(i: str) -> None:
        if i not in wanted:
            wanted.add(i)
            for d in by_id[i].deps.values():
                visit(d)

    for n in nodes:
        if n.run == run:
            visit(n.id)
    return [n for n in nodes if n.id in wanted]


def run_complete(out: Path, nodes: list[Node], run: str) -> bool:
    return all(is_done(out, n) for n in run_nodes(nodes, run))


def status_path(out: Path, run: str) -> Path:
    return pool_run_status(out, run)


def read_status(out: Path, run: str) -> dict[str, Any]:
    """The run's recorded status for running the pool; a missing, linked or damaged ``status.json``
    (:func:`~archpool.safeload.read_run_status`) reads as pending (the run's stages are then re-checked
    against their ``DONE`` markers and the status rewritten)."""
    try:
        return read_run_status(status_path(out, run)) or {"state": "pending"}
    except StateError:
        return {"state": "pending"}


def write_status(out: Path, run: str, status: dict[str, Any]) -> None:
    atomic_write_json(status_path(out, run), status)


def run_job(out: str | Path, run: str, threads: int = 1) -> dict[str, Any]:
    """Execute every stage of ``run`` that is not done. Never raises: the outcome goes to status.json."""
    from archpool.pool.stages import stage_function

    out = Path(out)
    pool, nodes = read_plan(out, run)  # this run's nodes and the data node they read
    spec = pool.run(run)
    run_dir = pool_run_dir(out, run)
    run_dir.mkdir(parents=True, exist_ok=True)
    rank = process_rank()  # under torchrun only rank 0 keeps the books
    log_file = open_append_text(pool_run_log(out, run) if rank == 0 else run_dir / f"log.rank{rank}.txt", buffering=1)

    def record(status: dict[str, Any]) -> None:
        if rank == 0:
            write_status(out, run, status)

    def log(msg: str) -> None:
        log_file.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    if pool.backend == "real":
        import torch

        torch.set_num_threads(max(1, threads))
    execution = Execution(out, {n.id: n for n in nodes}, pool, threads, log)
    t0 = time.time()
    current = None
    try:
        for node in run_nodes(nodes, run):
            current = node
            if node.run is not None and not is_done(out, node):
                record(dict(state="running", stage=node.stage, node=node.id, since=t0))
            execution.execute(node, stage_function(pool.backend, node.stage), spec, label=run)
    except BaseException as e:  # isolate: record it, let the other runs go on
        interrupted = isinstance(e, KeyboardInterrupt)  # stopped (Ctrl-C, a cancelled job), not broken
        status = dict(
            state="interrupted" if interrupted else "failed",
            stage=current.stage if current else None,
            node=current.id if current else None,
            error=f"{type(e).__name__}: {e}",
            traceback=format_exception(e),
            seconds=round(time.time() - t0, 2),
        )
        log(f"{'INTERRUPTED' if interrupted else 'FAILED'} in {status['node']}: {status['error']}\n{status['traceback']}")
        record(status)
        if rank == 0:
            kind = "run_interrupted" if interrupted else "run_failed"
            log_event(out, kind=kind, run=run, node=status["node"], error=status["error"])
        log_file.close()
        if interrupted:
            raise
        return status
    status = dict(state="done", seconds=round(time.time() - t0, 2))
    record(status)
    if rank == 0:
        log_event(out, kind="run_done", run=run)
    log("run done")
    log_file.close()
    return status
