"""Where a run's stage chain executes: local worker processes or SLURM jobs through submitit.

Both call ``archpool.pool.job.run_job(out, run)``, which never raises: it records the run's
outcome in ``runs/<run>/status.json``. A worker that dies outright (killed, out of memory) is
detected by the executor and recorded as a failure of that run only.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.io import open_append
from archpool.rundir import pool_run_log


def split_threads(jobs: int, cores: int | None = None) -> int:
    """Threads per worker so that ``jobs`` workers do not oversubscribe the cores."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def _die_with_parent(parent_pid: int) -> None:
    """Linux: the worker gets SIGKILL when the `archpool run` process dies, so a killed pool leaves
    no orphan computing a stage behind the re-run's back. A parent that died while this interpreter
    was starting (before the request) sends no signal: the worker then exits at once."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent_pid:
        os._exit(1)


def worker_main(out: str, run: str, threads: int, parent_pid: int) -> None:
    """Entry point of a local worker process (spawned: a fresh interpreter per run)."""
    _die_with_parent(parent_pid)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    # the run's log gets everything its stages print (progress bars, warnings, tracebacks)
    log = pool_run_log(out, run)
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = open_append(log)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from archpool.pool.job import run_job

    status = run_job(out, run, threads=threads)
    raise SystemExit(0 if status.get("state") == "done" else 1)


@dataclass
class _Handle:
    run: str
    proc: Any = None
    job: Any = None
    finished: bool = False
    exitcode: int | None = None
    error: str | None = None


@dataclass
class LocalExecutor:
    """At most ``jobs`` runs at once, each in its own spawned process with ``threads`` threads."""

    jobs: int = 1
    threads: int | None = None
    name: str = "local"
    _pending: list[str] = field(default_factory=list)
    _active: list[_Handle] = field(default_factory=list)

    def run_all(self, out: Path, runs: list[str], poll: Callable[[], None], interval: float = 0.2) -> dict[str, _Handle]:
        threads = self.threads or split_threads(self.jobs)
        ctx = mp.get_context("spawn")
        pending, active, finished = list(runs), [], {}
        while pending or active:
            while pending and len(active) < self.jobs:
                run = pending.pop(0)
                proc = ctx.Process(target=worker_main, args=(str(out), run, threads, os.getpid()), name=f"archpool-{run}")
                proc.start()
                active.append(_Handle(run=run, proc=proc))
            for h in list(active):
                if not h.proc.is_alive():
                    h.proc.join()
                    h.exitcode = h.proc.exitcode
                    if h.exitcode not in (0, 1):  # 0 done, 1 failed and recorded by run_job itself
                        h.error = f"worker process died (exit code {h.exitcode})"
                    h.finished = True
                    finished[h.run] = h
                    active.remove(h)
            poll()
            time.sleep(interval)
        poll()
        return finished


@dataclass
class SubmititExecutor:
    """One submitit job per run: ``cluster="slurm"`` on a cluster, ``"local"`` to test it here."""

    cluster: str = "slurm"
    folder: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    name: str = "slurm"

    def run_all(self, out: Path, runs: list[str], poll: Callable[[], None], interval: float = 2.0) -> dict[str, _Handle]:
        import submitit

        folder = Path(self.folder or Path(out) / "submitit")
        executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=self.cluster)
        params = dict(self.params)
        gpus = int(params.pop("gpus_per_run", 0) or 0)
        cpus = int(params.pop("cpus_per_run", 0) or 0) or self.threads or 1
        mapped: dict[str, Any] = {"name": f"archpool-{Path(out).name}", "timeout_min": params.pop("timeout_min", 24 * 60)}
        if self.cluster == "slurm":
            mapped.update(cpus_per_task=cpus, tasks_per_node=1, nodes=1)
            if gpus:
                mapped["gpus_per_node"] = gpus
            for k, v in params.items():
                if v is not None:
                    mapped[k if k.startswith("slurm_") else f"slurm_{k}"] = v
        elif self.cluster == "local":
            mapped.update(cpus_per_task=cpus)
            if gpus:
                mapped["gpus_per_node"] = gpus
        executor.update_parameters(**mapped)
        handles: dict[str, _Handle] = {}
        fn = _slurm_job if gpus <= 1 else _torchrun_job(gpus)
        with executor.batch():
            jobs = {run: executor.submit(fn, str(out), run, cpus) for run in runs}
        for run, job in jobs.items():
            handles[run] = _Handle(run=run, job=job)
        finished: dict[str, _Handle] = {}
        while len(finished) < len(handles):
            for run, h in handles.items():
                if run in finished or not h.job.done():
                    continue
                try:
                    status = h.job.result()
                    h.exitcode = 0 if status.get("state") == "done" else 1
                except Exception as e:  # the job died (time limit, node failure, preemption)
                    h.exitcode, h.error = 2, f"job {h.job.job_id} died: {e}"
                h.finished = True
                finished[run] = h
            poll()
            time.sleep(interval)
        poll()
        return finished


def _slurm_job(out: str, run: str, threads: int) -> dict[str, Any]:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    from archpool.pool.job import run_job

    return run_job(out, run, threads=threads)


def _torchrun_job(gpus: int):
    """A job that runs the run's stages under torchrun with ``gpus`` processes on its node."""
    import submitit

    def command(out: str, run: str, threads: int) -> dict[str, Any]:
        submitit.helpers.CommandFunction(
            ["torchrun", "--standalone", f"--nproc-per-node={gpus}", "-m", "archpool.pool.worker", out, run, str(threads)]
        )()
        from archpool.pool.job import read_status

        return read_status(Path(out), run)

    return command
