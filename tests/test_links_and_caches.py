"""No write through a link planted in a pool or run directory; caches checked on read: eval, LongPPL and
attention entries against their content hash, a data store against the key it is looked up by, generated
documents against the vocabulary."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.errors import StateError
from archpool.io import CONTENT_HASH, owned_dir, owned_path, read_cache_entry, write_cache_entry


def _outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "private.txt").write_text("private\n")
    return d


def _untouched(d: Path) -> bool:
    return sorted(p.name for p in d.iterdir()) == ["private.txt"] and (d / "private.txt").read_text() == "private\n"


# ------------------------------------------------------------------------------------------ links
def test_owned_paths_refuse_a_linked_entry_below_the_root_only(tmp_path):
    outside = _outside(tmp_path)
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "report").symlink_to(outside)
    with pytest.raises(StateError, match=r"report: is a symbolic link"):
        owned_path(tmp_path / "pool", "report")
    with pytest.raises(StateError, match="symbolic link"):
        owned_dir(tmp_path / "pool", "report", "figures")
    (tmp_path / "link_to_pool").symlink_to(tmp_path / "pool")  # the user's own path may be a link
    assert owned_path(tmp_path / "link_to_pool", "runs", "A") == tmp_path / "link_to_pool" / "runs" / "A"
    assert owned_dir(tmp_path / "link_to_pool", "runs", "A").is_dir()
    assert _untouched(outside)


@pytest.mark.parametrize("entry", ["runs", "report", "stages"])
def test_pool_directories_refuse_a_linked_entry(tmp_path, entry):
    from archpool.rundir import pool_report_dir, pool_run_dir, pool_run_status, pool_runs_dir, stage_dir

    outside = _outside(tmp_path)
    out = tmp_path / "pool"
    out.mkdir()
    (out / entry).symlink_to(outside)
    paths = {
        "runs": [lambda: pool_runs_dir(out), lambda: pool_run_dir(out, "A_s0"), lambda: pool_run_status(out, "A_s0")],
        "report": [lambda: pool_report_dir(out)],
        "stages": [lambda: stage_dir(out, "eval", "abc")],
    }[entry]
    for path in paths:
        with pytest.raises(StateError, match=f"{entry}: is a symbolic link"):
            path()


def test_a_pool_run_whose_directory_is_a_link_is_refused(tmp_path):
    from archpool.pool.job import write_status

    outside = _outside(tmp_path)
    (tmp_path / "pool" / "runs").mkdir(parents=True)
    (tmp_path / "pool" / "runs" / "A_s0").symlink_to(outside)
    with pytest.raises(StateError, match="A_s0: is a symbolic link"):
        write_status(tmp_path / "pool", "A_s0", {"state": "done"})
    assert _untouched(outside)


def test_the_pool_report_is_not_written_through_a_linked_report_directory(tmp_path):
    from archpool.report.pool import PoolReport, write_pool_report

    outside = _outside(tmp_path)
    out = tmp_path / "pool"
    out.mkdir()
    (out / "report").symlink_to(outside)
    with pytest.raises(StateError, match="report: is a symbolic link"):
        write_pool_report(out, PoolReport(name="x", size="tiny"), [])
    assert _untouched(outside)


def test_run_directories_refuse_linked_checkpoint_directories(tmp_path):
    from archpool.rundir import checkpoints_dir, extension_run_dir, milestone_dir

    outside = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("ckpt", "milestones", "extend"):
        (run / name).symlink_to(outside)
    for path in (lambda: checkpoints_dir(run), lambda: milestone_dir(run, "final"), lambda: extension_run_dir(run, "ntk")):
        with pytest.raises(StateError, match="symbolic link"):
            path()


def test_report_figures_and_tables_are_not_written_through_links(tmp_path, capsys):
    from archpool.cli import main

    rows = ["run,swa,qk_norm,norm,n_kv_heads,pretrain_ctx,score"]
    rows += [f"{r},{s},{q},pre,4,128,{v}" for r, s, q, v in [("A", 0, "none", 0.1), ("B", 1, "none", 0.5), ("C", 0, "layerwise", 0.6), ("D", 1, "layerwise", 0.7)]]  # fmt: skip
    (tmp_path / "r.csv").write_text("\n".join(rows) + "\n")
    outside = _outside(tmp_path)
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "figures").symlink_to(outside)
    assert main(["report", str(tmp_path / "r.csv"), "--out", str(tmp_path / "rep"), "--target", "score"]) == 2
    assert "figures: is a symbolic link" in capsys.readouterr().err
    assert _untouched(outside)


# ------------------------------------------------------------------------------------ cache entries
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
ENTRIES = st.dictionaries(st.text(max_size=6).filter(lambda k: k != CONTENT_HASH), JSON_VALUES, min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(entry=ENTRIES)
def test_cache_entries_read_back_as_written_and_any_edit_is_caught(tmp_path_factory, entry):
    path = tmp_path_factory.mktemp("cache") / "entry.json"
    write_cache_entry(path, entry)
    assert read_cache_entry(path) == json.loads(json.dumps(entry))
    edited = json.loads(path.read_text())
    key = sorted(k for k in edited if k != CONTENT_HASH)[0]
    edited[key] = [edited[key], "edited"]
    path.write_text(json.dumps(edited))
    with pytest.warns(UserWarning, match="content hash"):
        assert read_cache_entry(path) is None


def _eval_entry(tmp_path: Path) -> tuple[Path, dict]:
    from archpool.eval.runner import task_result_key

    key = task_result_key("m", "t", "niah", 64, "ll", 4, 0, {}, None)
    r = {"task": "niah", "length": 64, "mode": "ll", "score": 50.0, "n": 4, "cache_key": key, "samples": [{"score": 1.0}]}
    path = tmp_path / f"{key}.json"
    write_cache_entry(path, r)
    return path, r


def test_an_eval_cache_entry_edited_by_hand_is_recomputed_with_a_warning(tmp_path):
    from archpool.eval.runner import _cached_result

    path, r = _eval_entry(tmp_path)
    assert _cached_result(path, r["cache_key"], "niah", 64, "ll")["score"] == 50.0
    path.write_text(path.read_text().replace('"score": 50.0', '"score": 99.0', 1))
    with pytest.warns(UserWarning, match="does not match its content hash"):
        assert _cached_result(path, r["cache_key"], "niah", 64, "ll") is None
    path.write_text(json.dumps(r))  # an entry without its hash is not trusted either
    with pytest.warns(UserWarning, match="no content hash"):
        assert _cached_result(path, r["cache_key"], "niah", 64, "ll") is None


def test_an_edited_attention_cache_entry_is_recomputed(tmp_path):
    from archpool.attention.stage import _cached_result

    path = tmp_path / "a.json"
    write_cache_entry(path, {"metrics": {"attn_sink_rate": 0.25}, "cache_key": "k"})
    assert _cached_result(path)["metrics"] == {"attn_sink_rate": 0.25}
    path.write_text(path.read_text().replace("0.25", "0.99"))
    with pytest.warns(UserWarning, match="content hash"):
        assert _cached_result(path) is None


def test_an_edited_longppl_key_cache_entry_is_recomputed(tmp_path):
    torch = pytest.importorskip("torch")
    from archpool.eval.longppl import _cached_keys

    docs = [torch.arange(10), torch.arange(12)]
    path = tmp_path / "longppl_keys_x.json"
    write_cache_entry(path, {"keys": [[1, 2], [3]], "tokenizer": "t"})
    assert _cached_keys(path, docs)["keys"] == [[1, 2], [3]]
    path.write_text(path.read_text().replace("3", "4", 1))
    with pytest.warns(UserWarning, match="content hash"):
        assert _cached_keys(path, docs) is None


# ------------------------------------------------------------------------------------------ stores
def _fake_manifest(directory: Path, key: str) -> None:
    directory.mkdir(parents=True)
    manifest = {"format": 1, "key": key, "tokenizer_hash": "t", "counts": {}, "special_ids": {}}
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_a_store_whose_manifest_belongs_to_another_key_is_refused(tmp_path):
    from archpool.data.store import Store

    _fake_manifest(tmp_path / "data" / ("b" * 20), "a" * 20)
    with pytest.raises(StateError, match=r"belongs to store 'aaaa"):
        Store(tmp_path / "data" / ("b" * 20))
    with pytest.raises(StateError, match="belongs to store"):
        Store(tmp_path / "data" / ("b" * 20), key="c" * 20)


def test_prepare_rebuilds_a_store_whose_manifest_belongs_to_another_key(tmp_path):
    from archpool.data.store import prepare, store_path
    from tests.helpers.corpus import make_docs, tiny_config

    def corpus(name: str, seed: int) -> Path:
        d = tmp_path / name
        d.mkdir()
        for i, text in enumerate(make_docs(30, seed=seed)):
            (d / f"doc{i:03d}.txt").write_text(text)
        return d

    quiet = {"progress": False, "log": lambda *a: None}
    one, two = tiny_config(corpus("one", 0), tmp_path / "cache"), tiny_config(corpus("two", 1), tmp_path / "cache")
    a, b = prepare(one, **quiet), store_path(two)
    b.mkdir()
    for f in a.path.iterdir():  # the other store's files, manifest included, planted under this key
        (b / f.name).write_bytes(f.read_bytes())
    with pytest.warns(UserWarning, match="belongs to store"):
        rebuilt = prepare(two, **quiet)
    assert rebuilt.key == b.name != a.key and rebuilt.manifest["key"] == b.name


# ------------------------------------------------------------------------------------ generated documents
def test_generated_documents_outside_the_vocabulary_are_regenerated(tmp_path):
    from archpool.data.generated import GeneratedCache, GeneratedPrefix

    toks = np.array([5, 9, 1, 300, 7, 1])
    prefix = GeneratedPrefix(toks, np.array([3, 6]), np.zeros(6, dtype=bool))
    GeneratedCache(tmp_path / "generated", "k", "tok").save(0, prefix)
    assert GeneratedCache(tmp_path / "generated", "k", "tok").load(0) is not None  # without a vocabulary: as before
    small = GeneratedCache(tmp_path / "generated", "k", "tok", vocab_size=64)
    with pytest.warns(UserWarning, match="outside the vocabulary of 64"):
        assert small.load(0) is None
    good = GeneratedPrefix(np.array([5, 9, 1, 30, 7, 1]), np.array([3, 6]), np.zeros(6, dtype=bool))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert small.save(0, good)  # the bad entry is replaced
    assert np.array_equal(small.load(0).toks, good.toks)


def test_a_stream_never_feeds_cached_ids_beyond_the_vocabulary(tmp_path):
    from types import SimpleNamespace

    from archpool.data.generated import GeneratedCache, GeneratedPrefix
    from archpool.data.streams import GeneratedStream

    class Source:
        name, cache_key = "s", "k"

        def documents(self, seed):
            while True:
                yield SimpleNamespace(ids=[5, 6, 7], scored=[True, True, True])

    bad = GeneratedPrefix(np.array([5, 6, 9999, 1]), np.array([4]), np.ones(4, dtype=bool))
    GeneratedCache(tmp_path / "g", "k", "tok").save(3, bad)
    cache = GeneratedCache(tmp_path / "g", "k", "tok", vocab_size=64)
    with pytest.warns(UserWarning, match="outside the vocabulary"):
        s = GeneratedStream(Source(), SimpleNamespace(eos_id=1), 3, cache=cache)
    toks, _, _ = s.read(0, 8)
    assert toks.max() < 64


def test_a_linked_generated_directory_is_not_written_through(tmp_path):
    from archpool.data.generated import GeneratedCache, GeneratedPrefix

    outside = _outside(tmp_path)
    (tmp_path / "generated").symlink_to(outside)
    cache = GeneratedCache(tmp_path / "generated", "k", "tok", vocab_size=64)
    prefix = GeneratedPrefix(np.array([5, 1]), np.array([2]), np.zeros(2, dtype=bool))
    with pytest.warns(UserWarning, match="not cached"):
        assert not cache.save(0, prefix)
    assert cache.load(0) is None and _untouched(outside)
