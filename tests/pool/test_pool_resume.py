"""Kill `archpool run` with SIGKILL mid-pool and re-run it: nothing finished recomputes, the
interrupted stage resumes from its checkpoint, and the results equal an uninterrupted pool's."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from archpool.pool.graph import read_events
from tests.helpers.pool import REPO, child_env, pool_cmd, run_cli, toy_pool


def _steps_log(out: Path) -> list[tuple[str, str, int]]:
    path = out / "toy_steps.log"
    return [(a, b, int(c)) for a, b, c in (line.split() for line in path.read_text().splitlines())] if path.is_file() else []


def _interrupted(out: Path) -> str | None:
    """Key of a stage that has started, saved at least one step, and not finished."""
    started, done = {}, set()
    for e in read_events(out):
        if e["kind"] == "start":
            started[e["key"]] = e["stage"]
        elif e["kind"] == "done":
            done.add(e["key"])
    for key, stage in started.items():
        if key not in done and stage == "pretrain" and list((out / "stages" / stage / key / "ckpt").glob("step_*.json")):
            return key
    return None


def test_sigkill_mid_pool_then_rerun_resumes_without_recomputing(tmp_path):
    pool = toy_pool(tmp_path, seeds=[0], train=dict(steps=8, step_seconds=0.15))
    out = tmp_path / "out"
    env = child_env()
    proc = subprocess.Popen(
        pool_cmd("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    key = None
    while time.time() < deadline:
        done_pretrain = [e for e in read_events(out) if e["kind"] == "done" and e["stage"] == "pretrain"]
        key = _interrupted(out)
        # kill with at least 3 of its 8 steps (0.45 s) to go, so it cannot finish before the signal lands
        if done_pretrain and key and max((s[2] for s in _steps_log(out) if s[1] == key), default=-1) < 5:
            break
        time.sleep(0.05)
    assert key, "the pool never reached a finished pretrain plus one in progress"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # workers die with their parent (PR_SET_PDEATHSIG); let the kernel reap them
    before = read_events(out)
    finished_before = {e["key"] for e in before if e["kind"] == "done"}
    steps_before = len(_steps_log(out))
    time.sleep(0.5)
    assert len(_steps_log(out)) == steps_before, "a worker outlived the killed pool"
    assert key not in finished_before

    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    after = read_events(out)[len(before) :]
    restarted = {e["key"] for e in after if e["kind"] == "start"}
    assert not (restarted & finished_before), "a finished stage was recomputed"
    resumed = [e for e in after if e["kind"] == "start" and e["key"] == key]
    assert resumed and resumed[0]["resumed"] is True
    # every stage ran to completion once; no step of any stage ran twice
    starts = Counter(e["key"] for e in read_events(out) if e["kind"] == "start")
    cut = {e["key"] for e in before if e["kind"] == "start"} - finished_before  # in flight at the kill
    assert key in cut and all(starts[k] == 2 for k in cut)
    assert all(n == 1 for k, n in starts.items() if k not in cut)
    steps = _steps_log(out)
    assert len(steps) == len(set(steps))
    assert [s for s in steps if s[1] == key] and {s[2] for s in steps if s[1] == key} == set(range(8))

    ref = tmp_path / "ref"
    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(ref), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert (out / "results.csv").read_text() == (ref / "results.csv").read_text()

    # a third run is all cache hits
    n_events = len(read_events(out))
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress")
    assert r.returncode == 0
    assert not [e for e in read_events(out)[n_events:] if e["kind"] == "start"]


def test_a_worker_whose_parent_died_before_it_started_exits_at_once():
    """The death signal is requested only once the spawned interpreter runs; a pool killed before
    that must not leave the worker computing: it sees a different parent and exits."""
    import sys

    code = "import os; from archpool.pool.executor import _die_with_parent; _die_with_parent(os.getppid() + 1); print('ran')"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "ran" not in r.stdout
    code = "import os; from archpool.pool.executor import _die_with_parent; _die_with_parent(os.getppid()); print('ran')"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ran"
