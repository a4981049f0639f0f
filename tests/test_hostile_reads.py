"""Every file archpool reads back (its own records, checkpoints, HF model directories, stores, pool
directories, caches, results tables) gives a valid value or a named error for any bytes in it, never
another exception. One property test per reader: arbitrary bytes (and near-valid documents) in."""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archpool.errors import CheckpointError, ConfigError, DataError
from tests.helpers.pool import PlainConfig

NAMED = (ConfigError, CheckpointError, DataError)  # DataError covers StateError and TableError
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# near-valid JSON: the wrong type where an object is expected, damaged or hostile documents
JSON_EDGES = [b"", b"[]", b"null", b"42", b'"x"', b"{", b"{}", b'{"a": 1, "a": 2}', b"[" * 5000 + b"]" * 5000, b"\xff\xfe{}"]


def any_bytes(*documents: bytes) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, the JSON edge cases and ``documents`` (near-valid files of the reader's format)."""
    return st.one_of(st.binary(max_size=300), st.sampled_from([*JSON_EDGES, *documents]))


def json_values() -> st.SearchStrategy:
    """Any JSON value, small: a field of a near-valid record."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8))
    return st.recursive(
        scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)), max_leaves=6
    )


def record_with(keys: list[str]) -> st.SearchStrategy[bytes]:
    """A JSON object with some of ``keys`` set to any value: a record of the right shape, wrong types."""
    fields = st.dictionaries(st.sampled_from(keys), json_values(), max_size=len(keys))
    return fields.map(lambda d: json.dumps(d, allow_nan=True).encode())


def write(path: Path, raw: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


# ---------------------------------------------------------------------------------------- safetensors
def safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


DTYPES = ["F32", "F16", "BF16", "I32", "I64", "BOOL", "U8", "F64", "X9", "", 7]


@st.composite
def safetensors_files(draw) -> bytes:
    """A safetensors file whose header is damaged: its length, its JSON, a dtype, a shape or offsets."""
    kind = draw(st.sampled_from(["bytes", "length", "header"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    good = safetensors_bytes({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
    if kind == "length":
        return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + good[8:]
    entry = {
        "dtype": draw(st.sampled_from(DTYPES)),
        "shape": draw(st.lists(st.integers(-2, 2**40), max_size=3)),
        "data_offsets": draw(st.lists(st.integers(-1, 64), max_size=3)),
    }
    return safetensors_bytes({"w": entry}, bytes(draw(st.integers(0, 32))))


def value_or_named_error(read, path, error, name):
    """``read(path)``, or None when it raised ``error`` naming the file ``name``."""
    try:
        return read(path)
    except error as e:
        assert name in str(e)
        return None


def _tensors(state) -> bool:
    return all(isinstance(t, torch.Tensor) for t in state.values())


def _shapes(shapes) -> bool:
    return all(all(isinstance(s, int) for s in shape) for shape in shapes.values())


@FAST
@pytest.mark.parametrize(("reader", "valid"), [("load_safetensors", _tensors), ("safetensors_shapes", _shapes)])
@given(raw=safetensors_files())
def test_safetensors_readers(tmp_path, reader, valid, raw):
    from archpool.model import checkpoint

    path = write(tmp_path / "model.safetensors", raw)
    value = value_or_named_error(getattr(checkpoint, reader), path, CheckpointError, "model.safetensors")
    assert value is None or valid(value)


@FAST
@given(safetensors_files())
def test_safetensors_params_of_a_checkpoint_pool_model(tmp_path, raw):
    from archpool.pool.checkpoints import _safetensors_params

    write(tmp_path / "model.safetensors", raw)
    try:
        assert _safetensors_params(tmp_path) >= 0
    except CheckpointError as e:
        assert "model.safetensors" in str(e)


def tiny_checkpoint(directory: Path) -> Path:
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    cfg = ModelConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, max_seq_len=16)
    return save_checkpoint(Decoder(cfg), directory)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "final")


@st.composite
def edited_headers(draw, names: list[str]) -> tuple[str, str, list[int]]:
    """One tensor of a checkpoint, a dtype and a shape to write into its header entry."""
    return (
        draw(st.sampled_from(names)),
        draw(st.sampled_from(["F32", "I32", "F16", "U8", "BOOL"])),
        draw(st.lists(st.integers(1, 64), max_size=3)),
    )


def test_load_checkpoint_with_an_edited_header(checkpoint, tmp_path):
    """A header whose dtype or shape was edited (the bytes still fit) loads a model or names the file."""
    from archpool.model.checkpoint import WEIGHTS_NAME, load_checkpoint

    blob = (checkpoint / WEIGHTS_NAME).read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8 : 8 + n]), blob[8 + n :]
    names = sorted(k for k in header if k != "__metadata__")

    @FAST
    @given(edited_headers(names))
    def check(edit):
        name, dtype, shape = edit
        h = json.loads(json.dumps(header))
        h[name]["dtype"] = dtype
        if shape:
            h[name]["shape"] = shape
        d = tmp_path / "c"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_bytes((checkpoint / "config.json").read_bytes())
        (d / WEIGHTS_NAME).write_bytes(safetensors_bytes(h, data))
        try:
            model = load_checkpoint(d)
        except CheckpointError as e:
            assert WEIGHTS_NAME in str(e)
        else:
            assert all(p.is_floating_point() for p in model.parameters())

    check()


def test_integer_weights_are_refused(checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file

    from archpool.model.checkpoint import WEIGHTS_NAME, load_checkpoint

    d = tmp_path / "c"
    d.mkdir()
    (d / "config.json").write_bytes((checkpoint / "config.json").read_bytes())
    state = {k: v.to(torch.int32) if k == "embed.weight" else v for k, v in load_file(str(checkpoint / WEIGHTS_NAME)).items()}
    save_file(state, str(d / WEIGHTS_NAME))
    with pytest.raises(CheckpointError, match=r"'embed.weight' has dtype torch.int32; weights are floating point"):
        load_checkpoint(d)


# ---------------------------------------------------------------------------------------- checkpoint records
@FAST
@given(any_bytes(b'{"files": []}', b'{"files": {"a": {"bytes": "1", "sha256": 2}}}') | record_with(["files"]))
def test_read_manifest(tmp_path, raw):
    from archpool.model.checkpoint import read_manifest

    write(tmp_path / "MANIFEST.json", raw)
    files = value_or_named_error(read_manifest, tmp_path, CheckpointError, "MANIFEST.json")
    assert files is None or isinstance(files, dict)


@FAST
@given(
    any_bytes(b'{"archpool_format": 1, "model": "big"}', b'{"archpool_format": 1, "model": {"d_model": "a"}}')
    | record_with(["archpool_format", "model", "metadata"])
)
def test_load_config(tmp_path, raw):
    from archpool.model.checkpoint import load_config
    from archpool.model.config import ModelConfig

    write(tmp_path / "config.json", raw)
    try:
        assert isinstance(load_config(tmp_path), ModelConfig)
    except CheckpointError as e:
        assert "config.json" in str(e)


@FAST
@given(any_bytes(b'{"archpool_format": 1}'))
def test_is_archpool_checkpoint(tmp_path, raw):
    from archpool.rundir import is_archpool_checkpoint

    write(tmp_path / "config.json", raw)
    assert is_archpool_checkpoint(tmp_path) in (True, False)


@FAST
@given(any_bytes() | record_with(["kind", "model", "data", "train", "extension", "source"]))
def test_run_record(tmp_path, raw):
    from archpool.rundir import RunRecord

    try:
        record = RunRecord.from_file(write(tmp_path / "run_config.json", raw))
    except CheckpointError as e:
        assert "run_config.json" in str(e)
    else:
        assert isinstance(record.raw, dict)


@FAST
@given(any_bytes() | record_with(["kind", "model", "train"]))
def test_trainer_run_record(tmp_path, raw):
    from archpool.errors import StateError
    from archpool.train.trainer import _read_record

    try:
        assert isinstance(_read_record(write(tmp_path / "run_config.json", raw)), dict)
    except StateError as e:
        assert "run_config.json" in str(e)


@FAST
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(JSON_EDGES), record_with(["step", "loss"])), max_size=6))
def test_truncate_metrics(tmp_path, lines):
    from archpool.train.callbacks import truncate_metrics

    path = write(tmp_path / "metrics.jsonl", b"\n".join(lines))
    with warnings.catch_warnings():  # a damaged line is reported with a warning
        warnings.simplefilter("ignore")
        truncate_metrics(path, step=3)
    for line in path.read_text().splitlines():
        assert isinstance(json.loads(line), dict)


# ---------------------------------------------------------------------------------------- HF directories, tokenizers
@FAST
@given(any_bytes(b'{"weight_map": []}', b'{"weight_map": {"a": "../x.safetensors"}}') | record_with(["weight_map", "metadata"]))
def test_hf_shard_index(tmp_path, raw):
    from archpool.model.hf import INDEX_NAME, weight_files

    write(tmp_path / INDEX_NAME, raw)
    try:
        files = weight_files(tmp_path)
    except CheckpointError as e:
        assert str(tmp_path) in str(e)
    else:
        assert all(f.is_file() for f in files)


@FAST
@given(any_bytes(b'{"chat_template": 5}') | record_with(["chat_template", "bos_token"]))
def test_hf_tokenizer_config(tmp_path, raw):
    from archpool.model.hf import HF_TOKENIZER_CONFIG, chat_template

    write(tmp_path / HF_TOKENIZER_CONFIG, raw)
    try:
        template = chat_template(tmp_path)
    except ConfigError as e:
        assert HF_TOKENIZER_CONFIG in str(e)
    else:
        assert template is None or isinstance(template, str)


@FAST
@given(any_bytes() | record_with(["metadata"]))
def test_export_metadata_source_config(tmp_path, raw):
    from archpool.model.config import ModelConfig
    from archpool.model.hf import export_metadata

    write(tmp_path / "config.json", raw)
    meta = export_metadata(ModelConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, max_seq_len=16), tmp_path, None)
    assert all(isinstance(v, str) for v in meta.values())


@FAST
@given(any_bytes() | record_with(["bos_token", "eos_token", "pad_token"]))
def test_tokenizer_special_names(tmp_path, raw):
    from archpool.tokenizer import _special_names_from_config

    write(tmp_path / "special_tokens_map.json", raw)
    names = value_or_named_error(_special_names_from_config, tmp_path, ConfigError, "special_tokens_map.json")
    assert names is None or all(isinstance(v, str) for v in names.values())


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> bytes:
    from archpool.tokenizer import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(["the cat sat on the mat"] * 20, 300).save(d)
    return (d / "tokenizer.json").read_bytes()


def test_tokenizer_json(tmp_path, tokenizer_json):
    from archpool.tokenizer import Tokenizer

    @FAST
    @given(any_bytes(tokenizer_json[: len(tokenizer_json) // 2], tokenizer_json.replace(b'"BPE"', b'"XYZ"')))
    def check(raw):
        try:
            tok = Tokenizer.load(write(tmp_path / "tokenizer.json", raw))
        except NAMED as e:
            assert "tokenizer.json" in str(e)
        else:
            assert tok.vocab_size > 0

    check()


@FAST
@given(
    any_bytes(b'{"extension": {"pretrain_seq_len": "64"}}', b'{"max_seq_len": -1}') | record_with(["extension", "max_seq_len"])
)
def test_export_lengths(tmp_path, raw):
    from archpool.eval.target import export_lengths

    try:
        lengths = export_lengths(write(tmp_path / "archpool_config.json", raw))
    except ConfigError as e:
        assert "archpool_config.json" in str(e)
    else:
        assert all(n is None or (type(n) is int and n > 0) for n in lengths)


# ---------------------------------------------------------------------------------------- caches (recomputed when damaged)
@FAST
@given(any_bytes() | record_with(["cache_key", "task", "length", "mode", "score"]))
def test_eval_result_cache(tmp_path, raw):
    from archpool.eval.runner import _cached_result

    r = _cached_result(write(tmp_path / "k.json", raw), "k", "mqar", 64, "ll")
    assert r is None or (r["cache_key"], r["task"], r["length"], r["mode"]) == ("k", "mqar", 64, "ll")


@FAST
@given(any_bytes(b'{"tokenizer": "t", "keys": [[0, 99]]}') | record_with(["tokenizer", "keys"]))
def test_longppl_key_cache(tmp_path, raw):
    from archpool.eval.longppl import _cached_keys

    docs = [torch.arange(5)]
    data = _cached_keys(write(tmp_path / "keys.json", raw), docs)
    assert data is None or all(0 <= j < 4 for j in data["keys"][0])


@FAST
@given(any_bytes() | record_with(["key", "tokenizer_hash"]))
def test_attention_cache_and_store_key(tmp_path, raw):
    from archpool.attention.stage import _cached_result, _store_key

    assert _cached_result(write(tmp_path / "c.json", raw)) is None or isinstance(_cached_result(tmp_path / "c.json"), dict)
    write(tmp_path / "store" / "manifest.json", raw)
    try:
        assert isinstance(_store_key(tmp_path / "store"), str)
    except ConfigError as e:
        assert "manifest.json" in str(e)


@FAST
@given(st.binary(max_size=400))
def test_generated_prefix_cache(tmp_path, raw):
    from archpool.data.generated import GeneratedCache

    cache = GeneratedCache(tmp_path, "k", "t")
    write(cache.path(0), raw)
    assert cache.load(0) is None or cache.load(0).n_tokens >= 0
    assert cache.cached_tokens(0) >= 0


@FAST
@given(
    st.sampled_from(["toks", "ends", "scored"]),
    st.sampled_from([np.zeros((2, 2)), np.array([3, 1]), np.array([], dtype=np.int8), np.array(["a"])]),
)
def test_generated_prefix_cache_with_odd_arrays(tmp_path, member, value):
    from archpool.data.generated import GeneratedCache

    cache = GeneratedCache(tmp_path, "k", "t")
    arrays = {"toks": np.arange(3), "ends": np.array([3]), "scored": np.ones(3, bool), member: value}
    with open(cache.path(0), "wb") as f:
        np.savez(f, **arrays)
    prefix = cache.load(0)
    assert prefix is None or len(prefix.toks) == prefix.n_tokens
    assert cache.cached_tokens(0) >= 0


# ---------------------------------------------------------------------------------------- eval inputs
@FAST
@given(st.sampled_from([".txt", ".jsonl"]), any_bytes(b'{"text": 5}\n', b'{"text": "a"}\n[1]\n'))
def test_read_texts(tmp_path, suffix, raw):
    from archpool.eval.short import read_texts

    try:
        texts = read_texts(write(tmp_path / f"held{suffix}", raw))
    except ConfigError as e:
        assert f"held{suffix}" in str(e)
    else:
        assert all(isinstance(t, str) for t in texts)


# ---------------------------------------------------------------------------------------- stores
@FAST
@given(any_bytes() | record_with(["format", "dtype", "shards", "key", "tokenizer_hash", "counts", "special_ids"]))
def test_store_manifest(tmp_path, raw):
    from archpool.data.store import Store

    write(tmp_path / "manifest.json", raw)
    try:
        Store(tmp_path)
    except DataError as e:
        assert str(tmp_path) in str(e)


# ---------------------------------------------------------------------------------------- pool directories
def pool_plan(out: Path) -> list:
    from archpool.pool.plan import build_plan, write_plan
    from archpool.pool.spec import load_pool

    pool = load_pool({"name": "x", "train": {"max_steps": 2}, "runs": [{"name": "A"}]})
    nodes = build_plan(pool)
    write_plan(out, pool, nodes)
    return nodes


@pytest.fixture(scope="module")
def plan_bytes(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("pool")
    pool_plan(out)
    return (out / "plan.json").read_bytes()


def test_read_plan(tmp_path, plan_bytes):
    from archpool.errors import StateError
    from archpool.pool.plan import read_plan

    @FAST
    @given(
        any_bytes(plan_bytes[:-20], plan_bytes.replace(b'"nodes"', b'"nodez"'), b'{"pool": [], "nodes": []}')
        | record_with(["pool", "nodes"])
    )
    def check(raw):
        write(tmp_path / "plan.json", raw)
        try:
            pool, nodes = read_plan(tmp_path)
        except StateError as e:
            assert "plan.json" in str(e)
        else:
            assert isinstance(nodes, list)

    check()


def test_pool_report_settings(tmp_path, plan_bytes):
    from archpool.analysis.table import pool_report_settings

    @FAST
    @given(any_bytes(plan_bytes, b'{"pool": ["report"]}', b'{"pool": {"report": 5}}') | record_with(["pool", "nodes"]))
    def check(raw):
        write(tmp_path / "plan.json", raw)
        try:
            assert isinstance(pool_report_settings(tmp_path), dict)
        except DataError as e:
            assert "plan.json" in str(e)

    check()


RESULTS = b"run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score\nA,0,none,pre,4,128,0.1\nB,1,none,pre,4,128,0.5\n"


@FAST
@given(any_bytes() | record_with(["state", "error", "stage"]))
def test_run_status_in_an_analysed_pool(tmp_path, raw):
    from archpool.analysis.table import load_results

    write(tmp_path / "results.csv", RESULTS)
    write(tmp_path / "runs" / "A" / "status.json", raw)
    try:
        assert len(load_results(tmp_path)) == 2
    except DataError as e:
        assert "status.json" in str(e)


@FAST
@given(
    any_bytes(
        RESULTS[:-10],
        RESULTS.replace(b"128", b"1e400"),
        RESULTS.replace(b"0.5", b"[0.5]"),
        RESULTS + b"C,0\x00,none,pre,4,128,0.2\n",
    )
)
def test_results_table(tmp_path, raw):
    from archpool.analysis.table import load_results

    try:
        load_results(write(tmp_path / "results.csv", raw))
    except DataError as e:
        assert "results.csv" in str(e) or "column" in str(e)


def test_a_column_named_twice_is_refused(tmp_path):
    from archpool.analysis.table import load_results

    raw = RESULTS.replace(b",score\n", b",score,score\n").replace(b"0.1\n", b"0.1,9\n").replace(b"0.5\n", b"0.5,9\n")
    with pytest.raises(DataError, match=r"column 'score' appears more than once in the header"):
        load_results(write(tmp_path / "results.csv", raw))


@FAST
@given(any_bytes() | record_with(["key", "result", "seconds"]))
def test_done_marker(tmp_path, raw):
    from archpool.errors import StateError
    from archpool.pool.graph import DONE, Node, node_dir, read_result

    node = Node(id="pretrain:A", stage="pretrain", config=PlainConfig(), key="k1")
    write(node_dir(tmp_path, node) / DONE, raw)
    try:
        assert isinstance(read_result(tmp_path, node), dict)
    except StateError as e:
        assert DONE in str(e)


EVENT_LINES = st.lists(
    st.one_of(
        st.binary(max_size=40), st.sampled_from(JSON_EDGES), record_with(["kind", "key", "jobs", "t", "seconds", "stage", "run"])
    ),
    max_size=6,
)


@FAST
@given(EVENT_LINES)
def test_event_log(tmp_path, lines):
    from archpool.pool.graph import Node, read_events
    from archpool.pool.progress import Progress
    from archpool.pool.provenance import stage_seconds

    write(tmp_path / "events.jsonl", b"\n".join(lines) + b"\n")
    assert all(isinstance(e, dict) for e in read_events(tmp_path))
    nodes = [Node(id="pretrain:A", stage="pretrain", config=PlainConfig(), run="A", key="k1")]
    assert all(s >= 0 or s < 0 for s in stage_seconds(tmp_path, nodes).values())
    progress = Progress(tmp_path, nodes, enabled=False)
    progress.read_events()
    assert progress.eta(now=0.0) >= 0 and progress.jobs >= 1


@FAST
@given(any_bytes() | record_with(["train"]), st.lists(st.one_of(st.binary(max_size=30), record_with(["step"])), max_size=3))
def test_progress_fraction_and_done_seconds(tmp_path, record, metrics):
    from archpool.pool.graph import DONE, Node, node_dir
    from archpool.pool.progress import Progress, _fraction_done

    write(tmp_path / "run_config.json", record)
    write(tmp_path / "metrics.jsonl", b"\n".join(metrics))
    assert 0.0 <= _fraction_done(tmp_path) <= 1.0
    node = Node(id="pretrain:A", stage="pretrain", config=PlainConfig(), run="A", key="k1")
    write(node_dir(tmp_path, node) / DONE, record)
    Progress(tmp_path, [node], enabled=False)._observe_done_file(node)


@FAST
@given(
    st.lists(
        st.one_of(st.binary(max_size=40), st.sampled_from(JSON_EDGES), record_with(["step", "loss", "loss_avg"])), max_size=6
    ),
    any_bytes() | record_with(["chance"]),
)
def test_report_provenance(tmp_path, metrics, task_result):
    from archpool.pool.graph import Node, node_dir
    from archpool.pool.provenance import _curve, chance_levels

    write(tmp_path / "metrics.jsonl", b"\n".join(metrics))
    assert all(isinstance(s, int) and isinstance(v, float) for s, v in _curve(tmp_path / "metrics.jsonl"))
    node = Node(id="eval:A", stage="eval", config=PlainConfig(), run="A", key="k2")
    write(node_dir(tmp_path, node) / "eval" / "tasks" / "mqar" / "64_ll.json", task_result)
    assert all(isinstance(v, float) for v in chance_levels(tmp_path, [node]).values())


@FAST
@given(any_bytes(b'{"state": 5}') | record_with(["state", "error"]))
def test_run_status(tmp_path, raw):
    from archpool.pool.job import read_status, status_path

    write(status_path(tmp_path, "A"), raw)
    assert isinstance(read_status(tmp_path, "A")["state"], str)
