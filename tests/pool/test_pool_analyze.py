"""`archpool analyze POOL_DIR` gives the same numbers as `archpool analyze` on the exported table."""

from __future__ import annotations

import json

from archpool.cli import main
from tests.helpers.pool import run_cli, toy_pool


def _analyze(capsys, source) -> dict:
    capsys.readouterr()
    assert main(["analyze", str(source), "--json", "--short-ctx", "64"]) == 0
    r = json.loads(capsys.readouterr().out)
    r.pop("source", None)
    return r


def test_analyze_pool_dir_equals_analyze_exported_table(tmp_path, capsys):
    pool = toy_pool(tmp_path)
    out = tmp_path / "out"
    r = run_cli("run", str(pool), "--jobs", "2", "--out", str(out), "--no-progress", env={"TOY_FAIL": "noqk_swa_s1:eval"})
    assert r.returncode == 1  # one run failed: it is listed, never fitted
    table = tmp_path / "table.csv"
    capsys.readouterr()
    assert main(["pool", "export", str(out), "-o", str(table)]) == 0
    from_dir, from_table = _analyze(capsys, out), _analyze(capsys, table)
    # the failure list differs only in detail the table does not carry (the failed stage)
    failed = [[(f["run"], f["error"]) for f in r.pop("failed")] for r in (from_dir, from_table)]
    assert failed[0] == failed[1] == [("noqk_swa_s1", failed[0][0][1])]
    assert from_dir == from_table
    text = json.dumps(from_dir)
    assert "noqk_swa_s1" in text and "long_score" in text
    # the pool's own report came from the same analysis
    assert (out / "report" / "report.html").is_file()
    saved = json.loads((out / "report" / "analysis.json").read_text())
    assert saved["target"] == from_dir["target"]


def test_a_constant_target_is_reported_not_failed(tmp_path):
    """Every run scoring the same is a finding: the pool exits 0 and report.md says why no analysis ran."""
    spec = toy_pool(tmp_path, milestones=[], factorial=dict(axes=dict(swa=[False, True])), report=dict(target="entropy"))
    out = tmp_path / "out"
    r = run_cli("run", str(spec), "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    text = (out / "report" / "report.md").read_text()
    assert "No analysis" in text and "constant" in text and not (out / "report" / "report.html").exists()
