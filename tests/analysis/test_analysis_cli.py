"""``archpool analyze`` / ``archpool report`` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

from archpool.cli import main


def test_analyze_json_prints_one_object(pool_dir, capsys):
    assert main(["analyze", str(pool_dir), "--target", "helmet", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["target"] == "helmet" and r["n"] == 30  # 32 runs, two failed
    assert {"feature_count", "four_axes", "ruler@256_pre"} <= set(r["predictors"])
    assert r["interactions"][0]["effect_of"] == "swa" and r["pairs"]


def test_analyze_prints_readable_tables_with_covariates(pool_dir, capsys):
    assert main(["analyze", str(pool_dir), "--target", "helmet", "--covariates", "seed", "--short-ctx", "4096"]) == 0
    out = capsys.readouterr().out
    for heading in (
        "Predictors of the target",
        "four_axes: coefficients",
        "Seed sd",
        "Matched-pair effects",
        "Interactions",
        "Confounds (seed)",
        "attention sink",
        "Failed runs",
    ):
        assert heading in out


def test_analyze_error_names_the_column_and_exits_2(pool_dir, capsys):
    assert main(["analyze", str(pool_dir), "--target", "helmet_32k"]) == 2
    assert "column 'helmet_32k'" in capsys.readouterr().err
    assert main(["analyze", str(pool_dir), "--target", "helmet", "--covariates", "gpu"]) == 2
    assert "column 'gpu'" in capsys.readouterr().err


def test_report_command_writes_the_page(pool_dir, tmp_path, capsys):
    assert main(["report", str(pool_dir), "--target", "helmet", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.html").is_file()
    assert "report.html" in capsys.readouterr().out


def test_analysis_and_report_import_no_model_or_training_code():
    import subprocess
    import sys

    code = (
        "import sys, archpool.analysis, archpool.cli.analysis, archpool.report; "
        "bad = [m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith(('archpool.model', "
        "'archpool.train', 'archpool.data', 'archpool.eval', 'archpool.pool'))]; print(bad); sys.exit(bool(bad))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_analyze_architecture_only_table_lists_feature_counts(capsys):
    assert main(["analyze", str(Path(__file__).resolve().parents[1] / "fixtures" / "olmpool-architectures.csv"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    counts = {x["run"]: x["feature_count"] for x in r["runs"]}
    assert r["n"] == 26 and r["short_ctx"] == 4096
    assert counts["G_pre_8kv_8k_14k"] == 1  # Llama 3: GQA only
    assert counts["H_post_LQK_32kv_8k_11k_SWA"] == 2  # Olmo 3: QK-norm + SWA
    assert counts["G_post_LQK_8kv_4k_14k_SWA"] == 4
