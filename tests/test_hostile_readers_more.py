"""Readers of model-config numbers, JSON data files, numeric table cells and pool records: hostile input
gives a value or a named error (ConfigError / DataError / StateError), never another exception, and a
damaged record never reads as finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archpool.errors import ConfigError, DataError, StateError
from tests.helpers.pool import PlainConfig

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
HOSTILE_NUMBERS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 10**12, 10**300, 1e300, float("inf"), float("nan"), 4.5, "8", [8], {"n": 8}]),
    st.floats(),
)
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 64}
GEMMA3 = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "hidden_size": 64,
    "sliding_window": 512,
    "max_position_embeddings": 2048,
}


def write(path: Path, raw: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw.encode() if isinstance(raw, str) else raw)
    return path


# ---------------------------------------------------------------------------------------------- model configs
@pytest.mark.parametrize(
    ("base", "changes", "field"),
    [
        (LLAMA, {"num_hidden_layers": 10**12}, "num_hidden_layers"),
        (GEMMA3, {"sliding_window_pattern": 0}, "sliding_window_pattern"),
        (GEMMA3, {"layer_types": ["sliding_attention"]}, "layer_types"),
        (GEMMA3, {"layer_types": "sliding_attention" * 8}, "layer_types"),
        (GEMMA3, {"layer_types": ["sliding_attention"] * 7 + ["chunked_attention"]}, "layer_types[7]"),
        (
            {**LLAMA, "model_type": "qwen2", "num_key_value_heads": 8, "use_sliding_window": True},
            {"max_window_layers": 1e400},
            "max_window_layers",
        ),
        (LLAMA, {"max_position_embeddings": 1e400}, "max_position_embeddings"),
        (LLAMA, {"rope_scaling": {"original_max_position_embeddings": 10**30}}, "original_max_position_embeddings"),
        (LLAMA, {"rope_scaling": "yarn"}, "rope_scaling"),
        (GEMMA3, {"sliding_window": 10**30}, "sliding_window"),
    ],
)
def test_hostile_hf_config_numbers_are_named(base, changes, field):
    from archpool.model.features import features_from_hf_config

    with pytest.raises(ConfigError) as e:
        features_from_hf_config({**base, **changes})
    assert e.value.field == field, str(e.value)


def test_features_command_names_the_file_for_a_huge_layer_count(tmp_path):
    from archpool.model.features import features

    path = write(tmp_path / "config.json", json.dumps({**LLAMA, "num_hidden_layers": 10**12}))
    with pytest.raises(ConfigError, match=r"config\.json: num_hidden_layers: a positive integer of at most"):
        features(str(path))


@FAST
@given(
    st.sampled_from(["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "sliding_window",
                     "sliding_window_pattern", "max_position_embeddings", "original_max_position_embeddings"]),
    HOSTILE_NUMBERS,
    st.sampled_from([LLAMA, GEMMA3, {**GEMMA3, "model_type": "olmo3"}, {**LLAMA, "model_type": "mistral"}]),
)  # fmt: skip
def test_hf_features_give_features_or_a_config_error(key, value, base):
    from archpool.model.features import features_from_hf_config

    try:
        f = features_from_hf_config({**base, key: value})
    except ConfigError:
        return
    assert 1 <= f["n_layers"] <= 1 << 20 and f["pretrain_ctx"] >= 1
    assert 0 <= f["n_sliding_layers"] <= f["n_layers"]


@FAST
@given(HOSTILE_NUMBERS)
def test_bounded_int_returns_an_int_in_bounds_or_names_the_field(value):
    from archpool.model.config import bounded_int

    try:
        n = bounded_int(value, "f", 100)
    except ConfigError as e:
        assert e.field == "f"
    else:
        assert type(n) is int and 1 <= n <= 100


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"head_dim": 2, "rope": {"type": "ntk", "factor": 2.0}}, "head_dim"),  # d / (d - 2) divides by zero
        ({"rope": {"type": "ntk", "factor": 1e300, "theta": 1e300}}, "rope.theta"),
        ({"rope": {"type": "linear", "factor": 1e300}}, "rope.factor"),
        ({"rope": {"type": "yarn", "factor": 2.0, "theta": 1.0, "original_max_seq_len": 64}}, "rope.theta"),
        ({"rope": {"original_max_seq_len": 10**15}}, "rope.original_max_seq_len"),
        ({"extension": {"pretrain_seq_len": 0}}, "extension.pretrain_seq_len"),
        ({"extension": {"pretrain_seq_len": True}}, "extension.pretrain_seq_len"),
    ],
)
def test_model_config_numbers_that_would_divide_by_zero_or_overflow_are_refused(changes, field):
    from archpool.model.config import ModelConfig
    from archpool.model.features import features_from_config

    with pytest.raises(ConfigError) as e:
        features_from_config(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, **changes))
    assert e.value.field == field, str(e.value)


def test_hf_size_check_tolerates_null_sizes_and_bounds_rope_numbers():
    from archpool.model.hf.config import _rope_from_hf, check_hf_sizes

    check_hf_sizes({**LLAMA, "intermediate_size": None, "vocab_size": None}, "config.json")
    with pytest.raises(ConfigError, match=r"rope_parameters\.factor"):
        _rope_from_hf({"rope_type": "linear"}, "rope_parameters")
    with pytest.raises(ConfigError, match=r"original_max_position_embeddings"):
        _rope_from_hf({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1e400}, "rope_parameters")


# ---------------------------------------------------------------------------------------------- JSON data sources
@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("d.json", '{"data": 5}', "'data' is int, not a list"),
        ("d.json", '{"data": {"text": "x"}}', "'data' is dict, not a list"),
        ("d.jsonl", "[" * 100_000 + "]" * 100_000, "nested deeper than"),
        ("d.json", '[{"text": ' + "[" * 100_000 + "]" * 100_000 + "}]", "nested deeper than"),
    ],
)
def test_json_sources_of_the_wrong_shape_are_data_errors(tmp_path, name, text, words):
    from archpool.data.sources import read_file

    path = write(tmp_path / name, text)
    with pytest.raises(DataError, match=words) as e:
        list(read_file(path))
    assert name in str(e.value)


@FAST
@given(st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5)), lambda c: st.lists(c) | st.dictionaries(st.sampled_from(["text", "data", "x"]), c), max_leaves=8), st.sampled_from(["d.json", "d.jsonl"]))  # fmt: skip
def test_json_sources_yield_text_or_a_data_error(tmp_path, doc, name):
    from archpool.data.sources import read_file

    path = write(tmp_path / name, json.dumps(doc))
    try:
        docs = list(read_file(path))
    except DataError:
        return
    assert all(isinstance(d.text, str) for d in docs)


# ---------------------------------------------------------------------------------------------- results tables
TABLE = "run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score{extra_head}\nA,0,none,pre,4,{ctx},0.1{extra}\nB,1,none,pre,4,128,0.5{extra}\n"


@pytest.mark.parametrize(
    ("ctx", "extra_head", "extra", "column"),
    [
        ("1" * 301, "", "", "pretrain_ctx"),  # 1.1e300 written as digits: no int64 holds it
        ("128", ",short_ctx", "," + "1" * 301, "short_ctx"),
        ("128", ",short_ctx", ",0.5", "short_ctx"),
    ],
)
def test_huge_integer_cells_are_table_errors(tmp_path, ctx, extra_head, extra, column):
    from archpool.analysis.table import TableError, default_short_ctx, load_results

    path = write(tmp_path / "results.csv", TABLE.format(ctx=ctx, extra_head=extra_head, extra=extra))
    with pytest.raises(TableError, match=f"column '{column}'"):
        default_short_ctx(load_results(path))


@FAST
@given(st.one_of(st.integers(-(10**400), 10**400).map(str), st.floats().map(repr), st.sampled_from(["1e400", "-0", "9" * 310])))
def test_integer_cells_read_as_int64_or_a_table_error(tmp_path, cell):
    from archpool.analysis.table import TableError, load_results

    try:
        df = load_results(write(tmp_path / "results.csv", TABLE.format(ctx=cell, extra_head="", extra="")))
    except TableError:
        return
    assert 1 <= int(df["pretrain_ctx"][0]) <= 2**53


# ---------------------------------------------------------------------------------------------- attention settings
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"bos_id": 10**12}, "attention.bos_id"),
        ({"seq_len": 10**12}, "attention.seq_len"),
        ({"sink_samples": 10**9}, "attention.sink_samples"),
        ({"lengths": (64, 10**10)}, "attention.lengths[1]"),
        ({"long_ctx": 8}, "attention.long_ctx"),
        ({"retrieval_lengths": (4,)}, "attention.retrieval_lengths[0]"),
        ({"seed": -1}, "attention.seed"),
        ({"sink_eps": 2.0}, "attention.sink_eps"),
    ],
)
def test_attention_settings_are_bounded(changes, field):
    from archpool.attention.settings import Settings

    with pytest.raises(ConfigError) as e:
        Settings.from_dict(changes)
    assert e.value.field == field, str(e.value)


def test_attention_refuses_an_hf_model_with_an_absurd_intermediate_size(tmp_path):
    from archpool.attention.runner import check_hf_model_dir

    write(tmp_path / "config.json", json.dumps({**LLAMA, "vocab_size": 64, "intermediate_size": 10**12}))
    with pytest.raises(ConfigError, match="intermediate_size"):
        check_hf_model_dir(tmp_path)
    write(tmp_path / "config.json", json.dumps({"model_type": "gemma3", "text_config": {**GEMMA3, "hidden_size": 1e300}}))
    with pytest.raises(ConfigError, match="text_config: hidden_size"):
        check_hf_model_dir(tmp_path)


# ---------------------------------------------------------------------------------------------- pool records
NODE_KEY = "k1"


def _node():
    from archpool.pool.graph import Node

    return Node(id="pretrain:A", stage="pretrain", config=PlainConfig(), run="A", key=NODE_KEY)


@pytest.mark.parametrize(
    "marker",
    [
        "{}",  # what a truncated record can leave: no key, no result
        '{"node": "pretrain:A"}',
        '{"key": "k1", "stage": "pretrain", "result": null}',
        '{"key": "k1", "stage": "pretrain"}',
        '{"key": "k1", "stage": "eval", "result": {}}',
        '{"key": "k2", "stage": "pretrain", "result": {}}',
        '{"key": "k1", "stage": "pretrain", "result": {}',
        "",
    ],
)
def test_a_damaged_done_marker_is_not_done(tmp_path, marker):
    from archpool.pool.graph import DONE, is_done, node_dir, read_result

    node = _node()
    write(node_dir(tmp_path, node) / DONE, marker)
    assert not is_done(tmp_path, node)
    with pytest.raises(StateError, match=DONE):
        read_result(tmp_path, node)


def test_a_whole_done_marker_is_done(tmp_path):
    from archpool.pool.graph import DONE, is_done, node_dir, read_result

    node = _node()
    write(node_dir(tmp_path, node) / DONE, json.dumps({"key": NODE_KEY, "stage": "pretrain", "result": {"metrics": {}}}))
    assert is_done(tmp_path, node) and read_result(tmp_path, node) == {"metrics": {}}


@pytest.mark.parametrize(
    "raw", ["null", "[]", '"done"', '{"state": 5}', '{"state": "finished"}', '{"state": "failed", "error": [1]}', "{"]
)
def test_a_damaged_run_status_is_a_state_error_and_pending_for_the_runner(tmp_path, raw):
    from archpool.pool.job import read_status, status_path
    from archpool.safeload import read_run_status

    path = write(status_path(tmp_path, "A"), raw)
    with pytest.raises(StateError, match="status.json"):
        read_run_status(path)
    assert read_status(tmp_path, "A") == {"state": "pending"}  # running the pool rewrites it


def test_a_missing_run_status_is_none(tmp_path):
    from archpool.safeload import read_run_status

    assert read_run_status(tmp_path / "runs" / "A" / "status.json") is None


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    from archpool.pool.graph import DONE, node_dir
    from archpool.pool.plan import build_plan, read_plan, write_plan
    from archpool.pool.spec import load_pool

    out = tmp_path_factory.mktemp("pool")
    pool = load_pool({"name": "x", "train": {"max_steps": 2}, "runs": [{"name": "A"}]})
    write_plan(out, pool, build_plan(pool))
    for n in read_plan(out)[1]:
        write(node_dir(out, n) / DONE, json.dumps({"node": n.id, "stage": n.stage, "key": n.key, "result": {}}))
    return out


def test_pool_status_and_results_refuse_a_null_run_status(pool_dir):
    from archpool.pool.results import results_rows
    from archpool.pool.status import pool_status

    path = write(pool_dir / "runs" / "A_s0" / "status.json", "null")
    try:
        for read in (pool_status, results_rows):
            with pytest.raises(StateError, match=r"A_s0/status\.json"):
                read(pool_dir)
    finally:
        path.unlink()
    assert pool_status(pool_dir)[0]["state"] == "done"  # no status, every stage done


def test_a_run_recorded_done_with_a_damaged_marker_is_incomplete(pool_dir):
    from archpool.pool.graph import DONE, node_dir
    from archpool.pool.plan import read_plan
    from archpool.pool.status import pool_status

    status = write(pool_dir / "runs" / "A_s0" / "status.json", '{"state": "done"}')
    node = next(n for n in read_plan(pool_dir)[1] if n.stage == "pretrain")
    marker = node_dir(pool_dir, node) / DONE
    whole = marker.read_bytes()
    marker.write_bytes(whole[: len(whole) // 2])  # truncated
    try:
        row = pool_status(pool_dir)[0]
        assert row["state"] == "incomplete" and row["stages"]["pretrain"] == "partial"
    finally:
        marker.write_bytes(whole)
        status.unlink()


def test_analyze_refuses_a_null_run_status(tmp_path):
    from archpool.analysis.table import load_results

    write(tmp_path / "results.csv", TABLE.format(ctx=128, extra_head="", extra=""))
    write(tmp_path / "runs" / "A" / "status.json", "null")
    with pytest.raises(StateError, match=r"A/status\.json"):
        load_results(tmp_path)
