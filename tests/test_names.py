"""Names that become path components, and extension names that would write outside the run."""

import argparse

import pytest

from archpool.cli.args import non_negative_int, positive_int
from archpool.errors import ConfigError
from archpool.names import check_name


@pytest.mark.parametrize("name", ["run_1", "ntk", "yarn-2x", "olmo3.v2", "a b", "ntk_from_step_000050"])
def test_plain_names_pass(name):
    assert check_name("pool.name", name) == name


@pytest.mark.parametrize(
    "name, reason",
    [
        ("", "is empty"),
        ("  ", "is empty"),
        (" x", "leading or trailing whitespace"),
        ("../../escape", "is an absolute path|contains a path separator"),
        ("/abs", "is an absolute path"),
        ("a/b", "contains a path separator"),
        ("a\\b", "contains a path separator"),
        ("..", "contains '..'"),
        ("x..y", "contains '..'"),
        (".hidden", "starts with '.'"),
        ("a\nb", "control character"),
        ("x" * 256, "longer than 255"),
    ],
)
def test_bad_names_are_config_errors_naming_the_field(name, reason):
    with pytest.raises(ConfigError, match=rf"^extension\.name: .*({reason})") as e:
        check_name("extension.name", name)
    assert e.value.field == "extension.name"


def test_reserved_and_non_string_names():
    with pytest.raises(ConfigError, match=r"extension.name: 'base' is reserved \(reserved: base\)"):
        check_name("extension.name", "base", reserved=("base",))
    assert check_name("pool.name", "base") == "base"  # reserved only where asked
    with pytest.raises(ConfigError, match="must be a string name, got int 5"):
        check_name("run.name", 5)


def test_cli_number_types():
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    for f, text in (
        (positive_int, "0"),
        (positive_int, "-1"),
        (positive_int, "1.5"),
        (non_negative_int, "-1"),
        (positive_int, "abc"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            f(text)


@pytest.mark.parametrize("name", ["../../../x", "/tmp/x", "base", "a/b", ""])
def test_extend_refuses_names_outside_the_run_before_any_work(name, tmp_path, capsys):
    from archpool.cli import main
    from archpool.train.config import ExtensionConfig
    from archpool.train.extend import extend

    run = tmp_path / "deep" / "er" / "run"  # no run here: the name is checked first
    assert main(["extend", str(run), "--name", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("archpool extend: error: extension.name: ") and err.count("\n") == 1
    with pytest.raises(ConfigError, match=r"^extension\.name: "):
        extend(run, ExtensionConfig(name=name))
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_train_extend_checks_extension_names_before_pretraining(tmp_path, capsys):
    import yaml

    from archpool.cli import main

    cfg = {
        "model": {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32},
        "data": {"synthetic": {}},
        "train": {"max_steps": 2, "global_batch_tokens": 128, "micro_batch_size": 4},
        "extension": [{"recipe": "ntk", "name": "base"}],
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run"), "--extend", "--no-progress"]) == 2
    assert "extension.name: 'base' is reserved" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_extend_cli_config_errors_are_named(tmp_path, capsys):
    from archpool.cli import main
    from archpool.errors import CheckpointError

    assert main(["extend", str(tmp_path), "--name", "ok"]) == 2
    assert "not a pretraining run directory" in capsys.readouterr().err
    (tmp_path / "run_config.json").write_text("{broken")
    assert main(["extend", str(tmp_path)]) == 2
    assert "run_config.json: unreadable run record" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match=r"run_config.json: unreadable run record"):  # --debug: the traceback
        main(["--debug", "extend", str(tmp_path)])


@pytest.mark.parametrize("name", ["ntk@2", "ntk#5", "ntk[a]", "x]"])
def test_recipe_names_cannot_hold_the_column_grammar(name):
    from archpool.names import check_recipe_name
    from archpool.pool.spec import parse_pool

    with pytest.raises(ConfigError, match=r"extension\[0\]\.name: .* results\.csv column names use"):
        check_recipe_name("extension[0].name", name)
    pool = dict(
        name="p",
        backend="toy_backend",
        runs=[dict(name="A", preset="llama3")],
        extension=[dict(name=name, recipe="ntk", budgets=[0, 5])],
    )
    with pytest.raises(ConfigError, match=r"extension\[0\]\.name"):
        parse_pool(pool)
