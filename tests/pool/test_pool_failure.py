"""A run whose stage raises is marked failed with its error; the others finish; exit code 1."""

from __future__ import annotations

import csv
import json

from archpool.pool.graph import read_events
from tests.helpers.pool import run_cli, toy_pool


def test_injected_failure_is_isolated_reported_and_retried(tmp_path):
    pool = toy_pool(tmp_path)
    out = tmp_path / "out"
    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress", env={"TOY_FAIL": "lqk_swa_s0:extend"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED lqk_swa_s0" in r.stdout and "injected failure" in r.stdout
    status = json.loads((out / "runs" / "lqk_swa_s0" / "status.json").read_text())
    assert status["state"] == "failed" and status["stage"] == "extend" and "InjectedFailure" in status["error"]
    assert "Traceback" in status["traceback"]
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").open())}
    assert len(rows) == 8
    assert rows["lqk_swa_s0"]["state"] == "failed" and "injected" in rows["lqk_swa_s0"]["error"]
    assert rows["lqk_swa_s0"]["pretrain_loss"]  # what finished before the failure is kept
    others = [row for name, row in rows.items() if name != "lqk_swa_s0"]
    assert all(row["state"] == "done" and row["long_score"] for row in others)
    assert "lqk_swa_s0" in (out / "report" / "report.md").read_text().split("## Failed runs")[1]
    assert "injected failure" in (out / "runs" / "lqk_swa_s0" / "log.txt").read_text()

    s = run_cli("status", str(out))
    assert s.returncode == 0
    line = next(x for x in s.stdout.splitlines() if x.startswith("lqk_swa_s0"))
    assert "failed" in line and "pretrain✓" in line and "✗" in line
    assert "injected failure" in s.stdout

    # without the hook, a re-run finishes the failed run only, from where it stopped
    n = len(read_events(out))
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    started = [e for e in read_events(out)[n:] if e["kind"] == "start"]
    assert started and {e["run"] for e in started} == {"lqk_swa_s0"}
    assert "pretrain" not in {e["stage"] for e in started}


def test_a_failed_pretraining_fails_only_its_run(tmp_path):
    pool = toy_pool(tmp_path, seeds=[0])
    out = tmp_path / "out"
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", env={"TOY_FAIL": "noqk_full_s0:pretrain"})
    assert r.returncode == 1
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").open())}
    assert rows["noqk_full_s0"]["state"] == "failed"
    assert sum(row["state"] == "done" for row in rows.values()) == 3


def test_only_runs_the_named_runs(tmp_path):
    pool = toy_pool(tmp_path)
    out = tmp_path / "out"
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", "--only", "noqk_full_s1")
    assert r.returncode == 0, r.stderr
    rows = {row["run"]: row["state"] for row in csv.DictReader((out / "results.csv").open())}
    assert rows["noqk_full_s1"] == "done" and list(rows.values()).count("pending") == 7
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", "--only", "nope_s0")
    assert r.returncode == 2 and "--only" in r.stderr


def test_a_report_that_succeeds_removes_an_earlier_failures_traceback(tmp_path, monkeypatch):
    from archpool.pool import run as pool_run

    monkeypatch.setattr(pool_run, "results_rows", lambda out, pool, nodes: [{"run": "a_s0"}])
    monkeypatch.setattr(pool_run, "report_context", lambda *a: None)
    monkeypatch.setattr(pool_run, "report_settings", lambda pool, context: None)
    html = tmp_path / "report" / "report.html"
    outcomes = iter([ValueError("no default target column"), html])

    def write_report(out, settings, rows):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(pool_run, "write_pool_report", write_report)
    error = tmp_path / "report" / pool_run.REPORT_ERROR
    assert pool_run.finalize(tmp_path, None, []) is None
    assert "no default target column" in error.read_text()
    assert pool_run.finalize(tmp_path, None, []) == html
    assert not error.exists()
