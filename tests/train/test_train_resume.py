"""Exact resume after a real SIGKILL of a training process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from archpool.train import checkpoint as ckpt
from tests.helpers.train import REPO, child_env, read_losses, run_cli, tiny_run, write_config


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_matches_an_uninterrupted_run(tmp_path):
    kill_after_ckpt = 2
    cfg = write_config(tmp_path / "run.yaml", tiny_run(max_steps=40, ckpt_every=5, keep_last=2))
    run_cli("train", str(cfg), "--out", str(tmp_path / "ref"))
    reference = read_losses(tmp_path / "ref")

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "archpool.cli", "train", str(cfg), "--out", str(out)]
    child = subprocess.Popen(cmd, cwd=REPO, env=child_env(2), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline and child.poll() is None:
            steps = [s for s, _ in ckpt.list_checkpoints(out / "ckpt")]
            if steps and max(steps) >= 5 * kill_after_ckpt:
                break
            time.sleep(0.005)
        assert child.poll() is None, "the run finished before it could be killed; make it longer"
        time.sleep(0.05 * kill_after_ckpt)  # land somewhere between checkpoints (or inside a write)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert not (out / "milestones" / "final").exists()
    killed_losses = read_losses(out) if (out / "metrics.jsonl").exists() else []
    assert len(killed_losses) < 40

    proc = run_cli("train", str(cfg), "--out", str(out))
    assert "resuming" in proc.stdout
    assert read_losses(out) == reference  # bit for bit
