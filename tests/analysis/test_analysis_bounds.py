"""Values the analysis refuses rather than report wrongly: the target as its own covariate, KV heads
that do not divide the query heads, a negative short context."""

from __future__ import annotations

import pytest

from archpool.analysis.summary import analyze
from archpool.analysis.table import TableError, load_results, validate
from archpool.cli import main


def test_the_target_cannot_be_its_own_covariate(table):
    df = validate(table(seeds=2).astype(str))
    with pytest.raises(TableError, match="cannot be its own covariate"):
        analyze(df, "helmet", covariates=["helmet"])
    assert analyze(df, "helmet", covariates=["init"])["target"] == "helmet"


def test_kv_heads_must_evenly_share_the_query_heads(table, tmp_path):
    df = table()
    df.loc[0, "n_heads"], df.loc[0, "n_kv_heads"] = 4, 3
    (tmp_path / "t.csv").write_text(df.to_csv(index=False))
    with pytest.raises(TableError, match="3 KV heads do not evenly share 4 query heads"):
        load_results(tmp_path / "t.csv")


@pytest.mark.parametrize("value", ["-5", "0"])
def test_a_non_positive_short_context_is_a_usage_error(table, tmp_path, capsys, value):
    (tmp_path / "t.csv").write_text(table(seeds=2).to_csv(index=False))
    with pytest.raises(SystemExit) as e:
        main(["analyze", str(tmp_path / "t.csv"), "--short-ctx", value])
    assert e.value.code == 2
    assert "--short-ctx: must be a positive integer" in capsys.readouterr().err


def test_the_analyze_cli_refuses_the_target_as_covariate_in_one_line(table, tmp_path, capsys):
    (tmp_path / "t.csv").write_text(table(seeds=2).to_csv(index=False))
    assert main(["analyze", str(tmp_path / "t.csv"), "--target", "helmet", "--covariates", "helmet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archpool analyze: error:") and "\n" not in err and "own covariate" in err


@pytest.mark.parametrize(
    "args,words",
    [
        (["--lengths", "100000000"], "exceeds the longest length"),
        (["--longppl-alpha", "nan"], "finite"),
        (["--longppl-beta", "inf"], "finite"),
    ],
)
def test_eval_cli_bounds_are_usage_errors(tmp_path, capsys, args, words):
    with pytest.raises(SystemExit) as e:
        main(["eval", str(tmp_path), *args])
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_longppl_thresholds_must_be_finite():
    from archpool.errors import ConfigError
    from archpool.eval.longppl import select_key_tokens

    with pytest.raises(ConfigError, match="longppl.alpha"):
        select_key_tokens(None, [], 4, 1, alpha=float("nan"))
