"""Where a run's stage chain executes: local worker processes or SLURM jobs through submitit.

Both call ``archpool.pool.job.run_job(out, run)``, which never raises: it records the run's
outcome in ``runs/<run>/status.json``. A worker that dies outright (killed, out of memory) is
detected by the executor and recorded as a failure of that run only.

An executor interrupted (Ctrl-C, SIGTERM: any exception out of its loop) stops its workers before
the exception goes on: each local worker is the leader of its own process group, which gets SIGTERM,
then SIGKILL after ``STOP_GRACE_S``; a ``submitit-local`` job's process tree gets SIGINT (its tasks
ignore SIGTERM), then SIGKILL; SLURM jobs are cancelled. Finished stages keep their ``DONE``
markers, so a re-run resumes, recomputing only the interrupted stages.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.io import open_append
from archpool.rundir import pool_run_log

STOP_GRACE_S = 5.0  # seconds a stopped worker gets to exit on SIGTERM / SIGINT before SIGKILL
STOP_SIGNALS = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))


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

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent_pid:
        os._exit(1)


def _own_process_group(pid: int = 0) -> None:
    """Make ``pid`` (0: this process) the leader of its own process group: a terminal's Ctrl-C then
    reaches only the coordinator, which stops the worker and everything it started as one group.
    Both sides call it (the race between the worker's start and a stop); a refusal is harmless."""
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)


def worker_main(out: str, run: str, threads: int, parent_pid: int) -> None:
    """Entry point of a local worker process (spawned: a fresh interpreter per run)."""
    _own_process_group()
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


@contextlib.contextmanager
def signals_deferred(redeliver: bool = True) -> Iterator[list[int]]:
    """Hold SIGINT / SIGTERM / SIGHUP for the block (a worker started and recorded, workers being
    stopped), so an interrupt never lands between the two. With ``redeliver`` the first signal held is
    raised again after the block, to the handler in place before it; without, held signals are dropped.
    Handlers can be set only in the main thread: elsewhere (and for a signal ignored, e.g. under
    ``nohup``) the block runs unguarded."""
    held: list[int] = []
    saved: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            if signal.getsignal(s) not in (signal.SIG_IGN, None):
                saved[s] = signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        if redeliver and held:
            signal.raise_signal(held[0])


def _process_table() -> dict[int, list[int]]:
    """Linux: each live process's children (from /proc); empty where there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid ...
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    return children


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from /proc; ``[]`` where there is none."""
    table, found, todo = _process_table(), [], [pid]
    while todo:
        for child in table.get(todo.pop(0), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to the process group ``pid`` leads; to the process alone while it has no group yet."""
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _note_stopped(out: Path, runs: list[str]) -> None:
    """A line in each stopped run's log and the event log: the run was interrupted, not failed."""
    from archpool.pool.graph import log_event

    for run in runs:
        with contextlib.suppress(OSError):
            fd = open_append(pool_run_log(out, run))
            try:
                os.write(fd, f"{time.strftime('%H:%M:%S')} stopped: the pool was interrupted; run it again to resume\n".encode())
            finally:
                os.close(fd)
        with contextlib.suppress(Exception):
            log_event(out, kind="run_interrupted", run=run)


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
    stop_grace_s: float = STOP_GRACE_S

    def run_all(self, out: Path, runs: list[str], poll: Callable[[], None], interval: float = 0.2) -> dict[str, _Handle]:
        threads = self.threads or split_threads(self.jobs)
        ctx = mp.get_context("spawn")
        pending = list(runs)
        active: list[_Handle] = []
        finished: dict[str, _Handle] = {}
        try:
            while pending or active:
                while pending and len(active) < self.jobs:
                    run = pending.pop(0)
                    with signals_deferred():  # started and recorded, or neither
                        proc = ctx.Process(target=worker_main, args=(str(out), run, threads, os.getpid()), name=f"archpool-{run}")
                        proc.start()
                        assert proc.pid is not None  # started
                        _own_process_group(proc.pid)
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
        finally:
            if active:  # interrupted: stop what runs before the interrupt goes on
                self.stop(out, active)
        poll()
        return finished

    def stop(self, out: Path, active: list[_Handle]) -> None:
        """SIGTERM to each worker's process group, SIGKILL to what is left after the grace period, reap."""
        with signals_deferred(redeliver=False):
            for h in active:
                _signal_group(h.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_grace_s
            for h in active:
                h.proc.join(max(0.0, deadline - time.monotonic()))
            for h in active:
                _signal_group(h.proc.pid, signal.SIGKILL)  # the group: the worker and whatever it started
                h.proc.join(5.0)
            _note_stopped(out, [h.run for h in active])


@dataclass
class SubmititExecutor:
    """One submitit job per run: ``cluster="slurm"`` on a cluster, ``"local"`` to test it here.
    SLURM jobs go in one array (``array_parallelism`` bounds it); the local cluster keeps at most
    ``jobs`` jobs running and submits the next as one finishes."""

    cluster: str = "slurm"
    folder: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    name: str = "slurm"
    jobs: int = 1
    stop_grace_s: float = STOP_GRACE_S

    def _executor(self, out: Path) -> tuple[Any, Callable[[str, str, int], dict[str, Any]], int]:
        """The submitit executor and the job function, with the pool's parameters mapped to submitit's."""
        import submitit

        folder = Path(self.folder or Path(out) / "submitit")
        executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=self.cluster)
        params = dict(self.params)
        gpus = int(params.pop("gpus_per_run", 0) or 0)
        default_cpus = self.threads or (1 if self.cluster == "slurm" else split_threads(self.jobs))
        cpus = int(params.pop("cpus_per_run", 0) or 0) or default_cpus
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
        return executor, (_slurm_job if gpus <= 1 else _torchrun_job(gpus)), cpus

    def run_all(self, out: Path, runs: list[str], poll: Callable[[], None], interval: float = 2.0) -> dict[str, _Handle]:
        executor, fn, cpus = self._executor(out)
        handles: dict[str, _Handle] = {}
        pending = list(runs)
        if self.cluster == "slurm":
            with signals_deferred(), executor.batch():
                jobs = {run: executor.submit(fn, str(out), run, cpus) for run in pending}
            handles.update({run: _Handle(run=run, job=job) for run, job in jobs.items()})
            pending = []
        finished: dict[str, _Handle] = {}
        try:
            while pending or len(finished) < len(handles):
                while pending and len(handles) - len(finished) < max(1, self.jobs):
                    run = pending.pop(0)
                    with signals_deferred():
                        handles[run] = _Handle(run=run, job=executor.submit(fn, str(out), run, cpus))
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
                time.sleep(interval if self.cluster == "slurm" else min(interval, 0.2))
        finally:
            active = [h for run, h in handles.items() if run not in finished]
            if active:
                self.stop(out, active)
        poll()
        return finished

    def stop(self, out: Path, active: list[_Handle]) -> None:
        """Cancel SLURM jobs; on the local cluster, SIGINT to each job's tasks (submitit's tasks ignore
        SIGTERM), SIGKILL to the job's whole process tree after the grace period, reap its controller."""
        with signals_deferred(redeliver=False):
            if self.cluster == "slurm":
                for h in active:
                    with contextlib.suppress(Exception):
                        h.job.cancel(check=False)
                _note_stopped(out, [h.run for h in active])
                return
            roots = {h.run: _job_pid(h) for h in active}
            for pid in filter(None, roots.values()):
                _signal_pids(descendants(pid), signal.SIGINT)
            deadline = time.monotonic() + self.stop_grace_s
            while time.monotonic() < deadline and any(_job_alive(h) for h in active):
                time.sleep(0.05)
            for pid in filter(None, roots.values()):
                _signal_pids([pid, *descendants(pid)], signal.SIGKILL)
            for h in active:
                _job_alive(h, wait=5.0)
            _note_stopped(out, [h.run for h in active])


def _job_pid(h: _Handle) -> int | None:
    """The pid of a local submitit job's controller (its job id), or None."""
    try:
        return int(h.job.job_id)
    except (TypeError, ValueError, AttributeError):
        return None


def _job_alive(h: _Handle, wait: float = 0.0) -> bool:
    """Whether a local submitit job's controller still runs (reaping it once it has exited)."""
    proc = vars(h.job).get("_process")  # submitit's LocalJob: the controller's Popen (other jobs have none)
    if proc is None:
        pid = _job_pid(h)
        return bool(pid) and os.path.exists(f"/proc/{pid}")
    if wait:
        with contextlib.suppress(Exception):
            proc.wait(wait)
    return proc.poll() is None


def _slurm_job(out: str, run: str, threads: int) -> dict[str, Any]:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    from archpool.pool.job import run_job

    return run_job(out, run, threads=threads)


def _torchrun_job(gpus: int) -> Callable[[str, str, int], dict[str, Any]]:
    """A job that runs the run's stages under torchrun with ``gpus`` processes on its node."""
    import submitit

    def command(out: str, run: str, threads: int) -> dict[str, Any]:
        submitit.helpers.CommandFunction(
            ["torchrun", "--standalone", f"--nproc-per-node={gpus}", "-m", "archpool.pool.worker", out, run, str(threads)]
        )()
        from archpool.pool.job import read_status

        return read_status(Path(out), run)

    return command
