"""Bounded parsing and checked values: the safe YAML/JSON loader, finite numbers, the parameter
budget, names that read as they are stored, spreadsheet-safe CSV cells and regular-file sources.
Property tests (hypothesis) drive the loader, the CSV cells and the numeric fields."""

from __future__ import annotations

import json
import math
import os
import resource
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archpool.csvsafe import FORMULA_START, csv_cell, restore_cell, safe_frame
from archpool.errors import ConfigError, DataError
from archpool.io import read_config_file
from archpool.model.config import MAX_PARAMS, ModelConfig
from archpool.names import check_name, name_problem
from archpool.safeload import MAX_DEPTH, check_bounds, load_json, load_yaml, read_text_bounded


def billion_laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 12) -> str:
    lines = ["k0: &k0 {a: 1, b: 2, c: 3}"]
    for i in range(1, levels):
        lines.append(f"k{i}: &k{i} {{<<: [" + ", ".join([f"*k{i - 1}"] * 9) + f"], x{i}: 1}}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- YAML
@pytest.mark.parametrize("doc", [billion_laughs(), merge_bomb()], ids=["aliases", "merge keys"])
def test_an_alias_bomb_is_a_named_error_while_it_is_composed(doc, tmp_path):
    (tmp_path / "bomb.yaml").write_text(doc)
    with pytest.raises(ConfigError, match="alias bomb"):
        read_config_file(tmp_path / "bomb.yaml")


def test_duplicate_keys_name_the_key_and_both_lines():
    with pytest.raises(ConfigError, match=r"duplicate key 'lr' \(lines 2 and 4\)"):
        load_yaml("train:\n  lr: 1\n  steps: 2\n  lr: 3\n", "p.yaml")


def test_merge_keys_may_override_without_being_duplicates():
    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, x: 3}\n") == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}


def test_small_aliases_stay_usable():
    assert load_yaml("base: &b {lr: 1}\nruns: [*b, *b]\n") == {"base": {"lr": 1}, "runs": [{"lr": 1}, {"lr": 1}]}


@pytest.mark.parametrize("doc", ["[" * 100_000, "a: " + "{b: " * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)])
def test_deep_yaml_is_a_named_error(doc):
    with pytest.raises(ConfigError, match="nested deeper"):
        load_yaml(doc, "deep.yaml")


def test_python_tags_are_refused():
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml("!!python/object/apply:os.system ['true']")


# ---------------------------------------------------------------------------------------------- JSON
@pytest.mark.parametrize(
    "doc,words",
    [("[" * 100_000 + "]" * 100_000, "nested deeper"), ('{"a": 1, "a": 2}', "duplicate key 'a'"), ("{", "not valid JSON")],
)
def test_bad_json_is_a_named_error(doc, words):
    with pytest.raises(ConfigError, match=words):
        load_json(doc, "c.json")


def test_check_bounds_stops_on_shared_references():
    x: list = ["x"]
    for _ in range(40):
        x = [x, x]  # 2**40 leaves if walked naively
    with pytest.raises(Exception, match="more than"):
        check_bounds(x, max_nodes=1000, max_depth=1000)


def test_config_files_must_be_regular_and_bounded(tmp_path):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_config_file(fifo)  # would block forever on open()
    with pytest.raises(ConfigError, match="not a regular file"):
        read_config_file("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_text("x" * 2000)
    with pytest.raises(ConfigError, match="at most 1,000 bytes"):
        read_text_bounded(big, max_bytes=1000)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_json_round_trips_through_the_bounded_loader(value):
    assert load_json(json.dumps(value)) == value


yaml_tokens = st.sampled_from(
    ["a", ":", " ", "\n", "  ", "- ", "&x ", "*x", "<<: ", "[", "]", "{", "}", ",", "'", '"', "1e309", "!!", "? ", "#", "|", ">"]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(yaml_tokens, max_size=60).map("".join) | st.text(max_size=200))
def test_the_yaml_loader_returns_data_or_a_config_error_only(text):
    try:
        load_yaml(text, "fuzz.yaml")
    except ConfigError as e:
        assert str(e).startswith("fuzz.yaml: ")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_the_json_loader_returns_data_or_a_config_error_only(raw):
    try:
        load_json(raw, "fuzz.json")
    except ConfigError as e:
        assert str(e).startswith("fuzz.json: ")


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=2, max_value=9), st.integers(min_value=5, max_value=12))
def test_alias_bombs_of_any_shape_are_refused_fast(width, levels):
    lines = ["l0: &l0 [" + ", ".join(["v"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    expanded = sum(width**i for i in range(1, levels + 1))
    try:
        data = load_yaml("\n".join(lines))
        assert expanded <= 200_000 * 2 and data  # small enough to be a real document
    except ConfigError as e:
        assert "alias bomb" in str(e)


# ---------------------------------------------------------------------------------------------- numbers
FLOAT_FIELDS = [("init_std", ModelConfig), ("norm_eps", ModelConfig)]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["inf", "-inf", "nan", "1e309", "-1e309", "1.0e400"]), st.sampled_from(["init_std", "norm_eps"]))
def test_non_finite_numbers_are_refused_in_every_float_field(text, name):
    value = text if text[0].isdigit() or text.startswith("-1") else float(text)
    with pytest.raises(ConfigError, match="finite"):
        ModelConfig(**{name: value})


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1.0))
def test_finite_positive_numbers_still_pass(x):
    assert ModelConfig(init_std=x, norm_eps=x).init_std == x


def test_rope_theta_from_1e309_is_refused():
    with pytest.raises(ConfigError, match="rope.theta: must be a finite number"):
        ModelConfig(rope={"theta": "1e309"})


@pytest.mark.parametrize(
    "changes,field",
    [
        (dict(n_layers=2_000_000_000), "n_layers"),
        (dict(d_model=1_000_000_000), "d_model"),
        (dict(d_model=1 << 16, n_layers=1 << 12), "n_layers"),
        (dict(vocab_size=2**64), "vocab_size"),
        (dict(max_seq_len=1 << 30), "max_seq_len"),
    ],
)
def test_shapes_beyond_the_parameter_budget_are_refused_before_allocation(changes, field):
    t0, rss0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        ModelConfig(**changes)
    assert err.value.field == field
    assert time.perf_counter() - t0 < 5 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100_000


def test_a_model_within_the_budget_passes():
    cfg = ModelConfig(vocab_size=100_000, d_model=4096, n_layers=32, n_heads=32, max_seq_len=8192)
    assert 1e9 < cfg.num_params() < MAX_PARAMS


# ---------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("bad", ["pool\u202eevil", "a\u200bb", "x\u2028y", "tab\there", "bell\x07", "bidi\u2066x"])
def test_invisible_and_bidi_characters_are_refused_in_names(bad):
    assert "control character" in name_problem(bad)
    with pytest.raises(ConfigError, match="control character"):
        check_name("name", bad)


@pytest.mark.parametrize("good", ["run_1", "qk-norm.v2", "modèle", "模型", "Ωmega"])
def test_printable_unicode_names_pass(good):
    assert check_name("name", good) == good


# ---------------------------------------------------------------------------------------------- CSV
@pytest.mark.parametrize(
    "cell,written",
    [
        ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
        ("+1+1", "'+1+1"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("-5", "-5"),
        ("-0.5e3", "-0.5e3"),
        ("plain", "plain"),
        ("'=x", "''=x"),
        (-0.5, -0.5),
        (3, 3),
    ],
)
def test_formula_cells_are_quoted_and_numbers_stay_numbers(cell, written):
    assert csv_cell(cell) == written
    assert restore_cell(csv_cell(cell)) == cell


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(["=", "+", "-", "@", "\t", "\r", "'", "a", "1", ".", " "]), max_size=8) | st.text())
def test_csv_cells_never_start_a_formula_and_round_trip(s):
    w = csv_cell(s)
    assert restore_cell(w) == s
    if w and w[0] in FORMULA_START:
        assert float(w) == float(w)  # only a plain number may keep its sign


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers())
def test_numbers_are_never_neutralised(x):
    assert csv_cell(x) is x


def test_results_csv_cells_are_neutralised_and_read_back_exactly(tmp_path):
    import csv
    import io

    from archpool.analysis.table import load_results
    from archpool.pool.results import rows_to_csv

    rows = [
        dict(run=f"r{i}", swa=i % 2, qk_norm="none", norm="pre", n_kv_heads=4, pretrain_ctx=128, score=-0.5 * i, paper_note=n)
        for i, n in enumerate(["=cmd|' /C calc'!A0", "@x", "+y", "-z"])
    ]
    text = rows_to_csv(rows)
    cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
    assert not any(c and c[0] in "=+@\t\r" for c in cells)
    assert "-1.0" in cells and "'-z" in cells  # a negative number stays a number, a "-" word is quoted
    (tmp_path / "results.csv").write_text(text)
    df = load_results(tmp_path / "results.csv")
    assert list(df["paper_note"]) == ["=cmd|' /C calc'!A0", "@x", "+y", "-z"]
    assert list(df["score"]) == [0.0, -0.5, -1.0, -1.5]


def test_report_tables_are_neutralised():
    import pandas as pd

    df = pd.DataFrame({"run": ["=1+1", "ok"], "x": [-1.5, 2.0], "=col": ["a", "b"]})
    out = safe_frame(df)
    assert list(out["run"]) == ["'=1+1", "ok"] and list(out["x"]) == [-1.5, 2.0] and "'=col" in out.columns


# ---------------------------------------------------------------------------------------------- data sources
def test_data_sources_that_are_not_regular_files_are_refused(tmp_path):
    from archpool.data.sources import FileSource

    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero", str(tmp_path / "*.txt")):
        with pytest.raises(DataError, match="not a regular file"):
            FileSource(path)


def test_yaml_cli_set_values_are_bounded():
    from archpool.cli.model import _parse_sets

    assert _parse_sets(["n_layers=4"]) == {"n_layers": 4}
    with pytest.raises(ConfigError, match="alias bomb"):
        _parse_sets(["rope=" + billion_laughs().replace("\n", " , ").join(["{", "}"])])


def test_json_dumps_of_yaml_reads_identically():
    assert load_yaml(yaml.safe_dump({"a": [1, 2.5, "x"]})) == {"a": [1, 2.5, "x"]}
    assert math.isinf(yaml.safe_load(".inf"))  # PyYAML itself: the typed configs refuse it (test above)
