"""The SLURM path, through submitit's local executor: one job per run, same results as local."""

from __future__ import annotations

import pytest

from tests.helpers.pool import run_cli, toy_pool

pytest.importorskip("submitit")


def test_submitit_local_executor_runs_the_pool(tmp_path):
    pool = toy_pool(tmp_path, seeds=[0], milestones=[])
    sub, loc = tmp_path / "sub", tmp_path / "loc"
    r = run_cli(
        "run", str(pool), "--executor", "submitit-local", "--out", str(sub), "--no-progress", "--cpus-per-run", "1", timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert list((sub / "submitit").iterdir()), "no submitit job folders"
    r = run_cli("run", str(pool), "--out", str(loc), "--no-progress", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    assert (sub / "results.csv").read_text() == (loc / "results.csv").read_text()


def test_submitit_failure_is_isolated(tmp_path):
    pool = toy_pool(tmp_path, seeds=[0], milestones=[])
    out = tmp_path / "out"
    r = run_cli(
        "run",
        str(pool),
        "--executor",
        "submitit-local",
        "--out",
        str(out),
        "--no-progress",
        timeout=120,
        env={"TOY_FAIL": "lqk_full_s0:eval"},
    )
    assert r.returncode == 1
    assert "FAILED lqk_full_s0" in r.stdout
