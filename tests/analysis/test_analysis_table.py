"""Loading results tables and pool directories; bad input fails with an error naming the column and row."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from archpool.analysis import TableError, analyze, load_results
from archpool.errors import DataError


def _csv(tmp_path, df: pd.DataFrame, name: str = "results.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_missing_target_column_names_it_and_lists_metrics(tmp_path, table):
    df = load_results(_csv(tmp_path, table()))
    with pytest.raises(TableError, match=r"column 'helmet_32k'.*pretrain_loss") as e:
        analyze(df, "helmet_32k")
    assert e.value.column == "helmet_32k"


def test_non_numeric_metric_names_column_and_row(tmp_path, table):
    df = table().astype({"pretrain_loss": object})
    df.loc[2, "pretrain_loss"] = "n/a?"
    with pytest.raises(TableError, match=r"column 'pretrain_loss', row 3 \(run 'pre_32kv_8k_SWA'\).*not a number") as e:
        load_results(_csv(tmp_path, df))
    assert (e.value.column, e.value.row) == ("pretrain_loss", 3)


def test_unknown_qk_norm_value_names_column_and_row(tmp_path, table):
    df = table()
    df.loc[5, "qk_norm"] = "rowwise"
    with pytest.raises(TableError, match=r"column 'qk_norm', row 6 .*'rowwise'.*none, layerwise, headwise"):
        load_results(_csv(tmp_path, df))


def test_fewer_than_three_runs_is_an_error_naming_the_target(tmp_path, table):
    df = table().iloc[:2]
    with pytest.raises(TableError, match=r"column 'helmet': need at least 3 runs.*got 2"):
        analyze(load_results(_csv(tmp_path, df)), "helmet")


def test_runs_without_target_values_do_not_count_towards_three(tmp_path, table):
    df = table().iloc[:4].copy()
    df.loc[[1, 2], "helmet"] = None
    with pytest.raises(TableError, match=r"got 2 \(excluded: pre_32kv_4k, pre_32kv_8k_SWA\)"):
        analyze(load_results(_csv(tmp_path, df)), "helmet")


@pytest.mark.parametrize("column", ["swa", "norm", "n_kv_heads", "pretrain_ctx", "run"])
def test_missing_design_column_is_named(tmp_path, table, column):
    with pytest.raises(TableError, match=f"missing column '{column}'"):
        load_results(_csv(tmp_path, table().drop(columns=[column])))


@pytest.mark.parametrize(
    "column,value,pattern",
    [
        ("swa", "maybe", r"column 'swa', row 1 .*not 0/1"),
        ("norm", "sandwich", r"column 'norm', row 1 .*'sandwich'"),
        ("n_kv_heads", "64", r"column 'n_kv_heads', row 1 .*64 KV heads > 32"),
        ("pretrain_ctx", "4k", r"column 'pretrain_ctx', row 1 .*not a positive integer"),
        ("run", "pre_32kv_4k", r"column 'run', row 2 .*duplicate of row 1"),
    ],
)
def test_bad_design_values_name_column_and_row(tmp_path, table, column, value, pattern):
    df = table().astype({column: object})
    df.loc[0, column] = value
    with pytest.raises(TableError, match=pattern):
        load_results(_csv(tmp_path, df))


def test_target_must_be_a_metric(tmp_path, table):
    df = load_results(_csv(tmp_path, table()))
    with pytest.raises(TableError, match=r"column 'n_kv_heads': a design column"):
        analyze(df, "n_kv_heads")


def test_paper_architecture_table_loads_with_aliases():
    df = load_results(str(Path(__file__).resolve().parents[1] / "fixtures" / "olmpool-architectures.csv"))
    assert len(df) == 26 and df["run"].is_unique
    assert set(df["qk_norm"]) == {"none", "layerwise", "headwise"}  # hw -> headwise
    assert (df["n_heads"] == 32).all()  # absent column: the paper's 32 query heads


def test_pool_dir_marks_failed_runs_from_status_files(tmp_path, table):
    df = table()
    df.loc[0, "helmet"] = None
    df["state"], df["error"] = "done", ""
    df.loc[0, ["state", "error"]] = ["failed", "OOM"]
    _csv(tmp_path, df)
    for run, err in ((df.run[3], "NaN loss"), ("ghost_run", "died before results")):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "status.json").write_text(json.dumps({"state": "failed", "error": err, "stage": "extend"}))
    (tmp_path / "runs" / df.run[4]).mkdir(parents=True)
    (tmp_path / "runs" / df.run[4] / "status.json").write_text(json.dumps({"state": "done"}))
    loaded = load_results(tmp_path)
    failed = {f["run"]: f for f in loaded.attrs["failed"]}
    assert set(failed) == {df.run[0], df.run[3], "ghost_run"}
    assert failed["ghost_run"]["in_table"] is False and failed[df.run[3]]["error"] == "NaN loss"
    r = analyze(loaded, "helmet")
    assert r["n"] == len(df) - 2
    assert {e["run"] for e in r["excluded"]} == {df.run[0], df.run[3]}


def test_missing_source_and_non_pool_dir_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="no such results table"):
        load_results(tmp_path / "nope.csv")
    with pytest.raises(DataError, match="not a pool directory"):
        load_results(tmp_path)
