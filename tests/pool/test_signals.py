"""Process hygiene at the CLI boundary: SIGINT / SIGTERM to `archpool run --jobs 2` (local and
submitit-local executors) end it promptly with one line on stderr and exit code 130 / 143, no process
of the pool survives it, its lock is released, and running it again gives the results of an
uninterrupted pool. A closed or full stdout / stderr ends any command quietly (141 / 1, no traceback).

A process "of the pool" is any descendant the coordinator had when it was signalled, or any process of
the session it was started in (each test starts it in its own session); zombies (dead, waiting to be
reaped by an init that may never do it in a container) do not count."""

from __future__ import annotations

import csv
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from archpool.io import directory_lock
from archpool.pool.executor import descendants, signals_deferred
from archpool.pool.graph import read_events
from tests.helpers.pool import REPO, child_env, pool_cmd, real_synthetic_pool, run_cli

LINUX_PROC = Path("/proc/self/stat").is_file()
needs_proc = pytest.mark.skipif(not LINUX_PROC, reason="walks /proc for the pool's processes")


def _state(pid: int) -> str | None:
    """The process's state letter (``Z`` for a zombie), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def _session(sid: int) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getsid(int(name)) == sid:
                    found.add(int(name))
            except OSError:
                continue
    return found


def _survivors(pids: set[int], timeout: float = 5.0) -> list[tuple[int, str]]:
    """The processes of ``pids`` still alive (not zombies) after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [(p, _state(p)) for p in sorted(pids) if _state(p) not in (None, "Z")]
        if not alive or time.monotonic() > deadline:
            return [(p, Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:80].decode("replace")) for p, _ in alive]
        time.sleep(0.1)


def _toy(tmp_path: Path, steps: int, step_seconds: float) -> Path:
    """Two runs (qk_norm none / layerwise), one seed, slow pretraining steps so the workers can be caught."""
    spec = dict(
        name="sig",
        backend="toy_backend",
        seeds=[0],
        milestones=[],
        train=dict(steps=steps, step_seconds=step_seconds),
        extension=[dict(name="ntk", steps=2)],
        factorial=dict(axes=dict(qk_norm=["none", "layerwise"])),
    )
    path = tmp_path / "sig.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _steps(out: Path) -> list[str]:
    log = out / "toy_steps.log"
    return log.read_text().splitlines() if log.is_file() else []


def _interruptible() -> None:
    """In the child before exec: SIGINT at its default, as in a terminal. A shell starts background jobs
    (``make test &``) with SIGINT ignored, every child inherits that, and a program started with SIGINT
    ignored keeps it ignored (as it should under ``nohup``), so the test sets it back for its pool."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(pool: Path, out: Path, executor: str, stderr: Path) -> subprocess.Popen:
    cmd = pool_cmd("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress", "--executor", executor)
    with open(stderr, "wb") as err:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            preexec_fn=_interruptible,
        )


def _wait_both_running(proc: subprocess.Popen, out: Path, timeout: float = 90.0) -> None:
    """Until both runs' pretraining has taken a step (two workers busy at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the pool ended before it was signalled (exit code {proc.returncode})"
        if len({line.split()[1] for line in _steps(out)}) >= 2:
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the two runs never ran at once")


def _interrupt(tmp_path: Path, pool: Path, out: Path, executor: str, sig: int, group: bool = False) -> dict:
    """Start the pool, signal the coordinator mid-run (with ``group``, its whole process group, as a
    terminal's Ctrl-C does); what happened."""
    stderr = tmp_path / f"stderr-{out.name}.txt"
    proc = _start(pool, out, executor, stderr)
    try:
        _wait_both_running(proc, out)
        family = set(descendants(proc.pid))
        t0 = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    survivors = _survivors((family | _session(proc.pid)) - {proc.pid})
    return dict(rc=rc, seconds=seconds, stderr=stderr.read_text(), family=family, survivors=survivors)


def _assert_stopped_cleanly(r: dict, sig: int, out: Path) -> None:
    assert len(r["family"]) >= 2, "the workers were not seen"
    assert r["rc"] == 128 + sig, r["stderr"]
    assert "Traceback" not in r["stderr"]
    lines = r["stderr"].strip().splitlines()
    assert len(lines) == 1 and f"interrupted by {signal.Signals(sig).name}" in lines[0], r["stderr"]
    assert r["seconds"] < 15, f"took {r['seconds']:.1f}s to stop"
    assert r["survivors"] == [], f"processes outlived the pool: {r['survivors']}"
    before = len(_steps(out))
    time.sleep(0.5)
    assert len(_steps(out)) == before, "a stage went on after the pool stopped"
    with directory_lock(out, "pool directory"):  # released: a LockError here would name the dead coordinator
        pass


@needs_proc
@pytest.mark.parametrize(
    ("sig", "group"),
    [
        (signal.SIGINT, False),
        pytest.param(signal.SIGTERM, False, marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, True, marks=pytest.mark.slow),
    ],
    ids=["SIGINT", "SIGTERM", "ctrl-c-to-the-group"],
)
def test_signal_stops_the_local_pool_and_every_worker(tmp_path, sig, group):
    out = tmp_path / "out"
    r = _interrupt(tmp_path, _toy(tmp_path, steps=400, step_seconds=0.05), out, "local", sig, group)
    _assert_stopped_cleanly(r, sig, out)
    assert any(e["kind"] == "pool_interrupted" for e in read_events(out))
    assert any(e["kind"] == "run_interrupted" for e in read_events(out))


@needs_proc
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_submitit_local_pool_and_its_job_trees(tmp_path, sig):
    pytest.importorskip("submitit")
    out = tmp_path / "out"
    r = _interrupt(tmp_path, _toy(tmp_path, steps=400, step_seconds=0.05), out, "submitit-local", sig)
    _assert_stopped_cleanly(r, sig, out)


@needs_proc
@pytest.mark.slow
def test_submitit_local_runs_at_most_jobs_runs_at_once(tmp_path):
    pytest.importorskip("submitit")
    pool = _toy(tmp_path, steps=6, step_seconds=0.05)
    r = run_cli(
        "run",
        str(pool),
        "--executor",
        "submitit-local",
        "--jobs",
        "1",
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    spans = {}
    for e in read_events(tmp_path / "o"):
        if e["kind"] in ("start", "done") and e.get("run") not in (None, "pool"):
            first, last = spans.get(e["run"], (e["t"], e["t"]))
            spans[e["run"]] = (min(first, e["t"]), max(last, e["t"]))
    (a0, a1), (b0, b1) = sorted(spans.values())
    assert a1 <= b0, f"the two runs overlapped under --jobs 1: {spans}"


def _results(out: Path) -> list[dict]:
    return list(csv.DictReader(open(out / "results.csv")))


@needs_proc
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["local", "submitit-local"])
def test_rerun_after_sigterm_gives_the_uninterrupted_results(tmp_path, executor):
    if executor != "local":
        pytest.importorskip("submitit")
    pool = _toy(tmp_path, steps=60, step_seconds=0.05)
    out, ref = tmp_path / "out", tmp_path / "ref"
    r = _interrupt(tmp_path, pool, out, executor, signal.SIGTERM)
    _assert_stopped_cleanly(r, signal.SIGTERM, out)
    before = read_events(out)
    finished = {e["key"] for e in before if e["kind"] == "done"}
    cut = {e["key"] for e in before if e["kind"] == "start"} - finished  # in flight at the signal
    assert cut, "no stage was in flight at the signal"
    again = run_cli("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress", "--executor", executor, timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    after = read_events(out)[len(before) :]
    assert not {e["key"] for e in after if e["kind"] == "start"} & finished, "a finished stage was computed again"
    assert cut <= {e["key"] for e in after if e["kind"] == "done"}, "an interrupted stage was not finished"
    assert run_cli("run", str(pool), "--jobs", "2", "--out", str(ref), "--no-progress", timeout=180).returncode == 0
    assert (out / "results.csv").read_text() == (ref / "results.csv").read_text()
    assert {row["state"] for row in _results(out)} == {"done"}


@needs_proc
@pytest.mark.slow
def test_real_trainer_interrupted_by_sigint_resumes_to_the_same_results(tmp_path):
    """The real stages (tiny model, synthetic data): SIGINT mid-pretraining with two workers, run again."""
    pool = real_synthetic_pool(tmp_path, "sigreal", max_steps=40, extension_tokens=4096)
    out, ref = tmp_path / "out", tmp_path / "ref"
    stderr = tmp_path / "stderr.txt"
    proc = _start(pool, out, "local", stderr)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # both pretrainings started, at least one checkpoint written
            assert proc.poll() is None, stderr.read_text()[-2000:]
            started = {e["key"] for e in read_events(out) if e["kind"] == "start" and e["stage"] == "pretrain"}
            if len(started) == 2 and list((out / "stages" / "pretrain").glob("*/ckpt/step_*")):
                break
            time.sleep(0.1)
        family = set(descendants(proc.pid))
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130 and "Traceback" not in stderr.read_text(), stderr.read_text()
    assert _survivors((family | _session(proc.pid)) - {proc.pid}) == []
    assert not [e for e in read_events(out) if e["kind"] == "done" and e["stage"] == "extend"], "signalled too late"
    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(ref), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "results.csv").read_text() == (ref / "results.csv").read_text()


# ---- closed and full outputs


def _planned_pool_dir(tmp_path: Path) -> Path:
    """A pool directory with a plan and nothing run: enough for `archpool status`."""
    from archpool.pool.plan import build_plan, write_plan
    from archpool.pool.spec import load_pool

    spec = load_pool(str(_toy(tmp_path, steps=2, step_seconds=0.0)))
    out = tmp_path / "pooldir"
    out.mkdir()
    write_plan(out, spec, build_plan(spec))
    return out


def _cli(args: list[str], stdout, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(pool_cmd(*args), cwd=REPO, env=child_env(), stdout=stdout, stderr=stderr, timeout=60)


@pytest.mark.parametrize("command", ["status", "pool list", "--help"])
def test_a_closed_stdout_is_a_quiet_exit_141(tmp_path, command):
    """`archpool status | head -0`: the reader is gone before the first write (EPIPE)."""
    args = [
        str(_planned_pool_dir(tmp_path)) if a == "POOL" else a
        for a in (command + (" POOL" if command == "status" else "")).split()
    ]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = _cli(args, stdout=write_end)
    finally:
        os.close(write_end)
    assert r.returncode == 141, r.stderr.decode()
    assert r.stderr == b""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("command", ["status", "pool list", "--help"])
def test_a_full_stdout_is_one_line_and_exit_1(tmp_path, command):
    args = [
        str(_planned_pool_dir(tmp_path)) if a == "POOL" else a
        for a in (command + (" POOL" if command == "status" else "")).split()
    ]
    with open("/dev/full", "wb") as full:
        r = _cli(args, stdout=full)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "cannot write to stdout" in err and os.strerror(errno.ENOSPC) in err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stderr_is_a_quiet_exit(tmp_path):
    """The one-line error itself cannot be written: exit 1, nothing else tried."""
    with open("/dev/full", "wb") as full:
        r = _cli(["status", str(tmp_path / "no-such-pool/")], stdout=subprocess.PIPE, stderr=full)
    assert r.returncode == 1 and r.stdout == b""


# ---- the boundary in process


class _Broken:
    def __init__(self, error: int):
        self.error = error

    def write(self, text):
        raise OSError(self.error, os.strerror(self.error))

    def flush(self):
        pass


@pytest.mark.parametrize(("error", "code"), [(errno.EPIPE, 141), (errno.ENOSPC, 1), (errno.EIO, 1)])
def test_main_turns_an_output_error_into_its_exit_code(monkeypatch, capsys, error, code):
    from archpool.cli import main

    monkeypatch.setattr(sys, "stdout", _Broken(error))
    assert main(["pool", "list"]) == code
    assert "Traceback" not in capsys.readouterr().err


def test_main_keeps_the_traceback_of_an_os_error_that_is_not_the_output(monkeypatch):
    import archpool.cli.pool as cli_pool
    from archpool.cli import main

    def disk_full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "results.csv")

    monkeypatch.setattr(cli_pool, "cmd_pool_list", disk_full)
    with pytest.raises(OSError, match="results.csv"):
        main(["pool", "list"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_main_ends_a_signalled_command_with_one_line_and_128_plus_the_signal(monkeypatch, capsys, sig):
    import archpool.cli.pool as cli_pool
    from archpool.cli import main

    cleaned = []

    def slow(args):
        try:
            signal.raise_signal(sig)
            time.sleep(30)
        finally:
            cleaned.append(True)
        return 0

    monkeypatch.setattr(cli_pool, "cmd_pool_list", slow)
    handler = signal.getsignal(signal.SIGTERM)
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (see _interruptible)
    try:
        assert main(["pool", "list"]) == 128 + sig
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert cleaned == [True]
    err = capsys.readouterr().err
    assert err == f"archpool pool list: interrupted by {signal.Signals(sig).name}\n"
    assert signal.getsignal(signal.SIGTERM) is handler  # restored after the command


def test_signals_are_held_while_a_worker_is_started_and_recorded():
    got = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(("handler", s)))
    try:
        with signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            got.append("inside")  # the block goes on to its end
        assert got == ["inside", ("handler", signal.SIGTERM)]  # then the signal reaches its handler
        got.clear()
        with signals_deferred(redeliver=False):
            signal.raise_signal(signal.SIGTERM)
        assert got == []
    finally:
        signal.signal(signal.SIGTERM, old)
