"""A prepared store verified by bytes: tampered, truncated, pickled or missing files are named errors,
and a cache that cannot hold a store, or a full disk, fails cleanly."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import archpool.io
from archpool.data.store import Store, prepare
from archpool.errors import StateError
from archpool.io import sha256_file
from tests.helpers.corpus import tiny_config


def _shard(store: Store):
    return store.path / store.manifest["shards"][0]["file"]


def test_changed_shard_bytes_are_detected(tiny_store):
    shard = _shard(tiny_store)
    original = shard.read_bytes()
    tampered = bytearray(original)
    tampered[10], tampered[11] = tampered[12], tampered[13]  # valid token ids, other bytes
    assert bytes(tampered) != original
    shard.write_bytes(bytes(tampered))
    with pytest.raises(StateError, match=r"tokens-00000.bin: corrupt \(sha256 does not match manifest.json\)"):
        Store(tiny_store.path)
    shard.write_bytes(original)
    assert Store(tiny_store.path).n_docs == tiny_store.n_docs


def test_a_truncated_shard_is_detected(tiny_store):
    shard = _shard(tiny_store)
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(StateError, match="tokens-00000.bin: truncated or altered"):
        Store(tiny_store.path)


def test_shards_are_hashed_once_until_they_change(tiny_store, monkeypatch):
    calls = []
    real = archpool.io.sha256_file
    monkeypatch.setattr(archpool.io, "sha256_file", lambda p, *a: calls.append(p) or real(p, *a))
    Store(tiny_store.path)
    assert calls == []  # verified when prepared and opened: nothing to hash again in this process
    shard = _shard(tiny_store)
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 1_000_000))
    Store(tiny_store.path)
    assert calls == [shard]


def test_a_pickle_where_the_index_belongs_is_refused(tiny_store):
    index = tiny_store.path / "index.npy"
    np.save(index, np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(StateError, match=r"index.npy: corrupt \(sha256"):
        Store(tiny_store.path)
    with pytest.raises(StateError, match="index.npy: not a store index"):
        Store(tiny_store.path, verify=False)


def test_an_index_pointing_outside_the_shards_is_refused(tiny_store):
    index = np.load(tiny_store.path / "index.npy")
    index["offset"][-1] = 10**12
    np.save(tiny_store.path / "index.npy", index)
    manifest = json.loads((tiny_store.path / "manifest.json").read_text())
    manifest["index_sha256"] = sha256_file(tiny_store.path / "index.npy")
    (tiny_store.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StateError, match=f"record {len(index) - 1} points outside the shards"):
        Store(tiny_store.path)


@pytest.mark.parametrize("damage", ["missing-index", "garbage-manifest", "manifest-list"])
def test_damaged_store_files_are_named(tiny_store, damage):
    if damage == "missing-index":
        (tiny_store.path / "index.npy").unlink()
        match = "index.npy: missing"
    elif damage == "garbage-manifest":
        (tiny_store.path / "manifest.json").write_bytes(bytes(range(256)))
        match = "manifest.json: corrupt manifest"
    else:
        (tiny_store.path / "manifest.json").write_text("[]")
        match = "manifest.json: corrupt manifest"
    with pytest.raises(StateError, match=match):
        Store(tiny_store.path)


def test_a_cache_root_that_is_a_file_is_named(docs_dir, tmp_path):
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("")
    with pytest.raises(StateError, match=r"cache root \(\$ARCHPOOL_CACHE or --cache\) is not a directory"):
        prepare(tiny_config(docs_dir, not_a_dir), progress=False, log=lambda *a: None)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_is_named(docs_dir, tmp_path):
    cache = tmp_path / "ro"
    (cache / "data").mkdir(parents=True)
    (cache / "data").chmod(0o555)
    try:
        with pytest.raises(StateError, match="not writable"):
            prepare(tiny_config(docs_dir, cache), progress=False, log=lambda *a: None)
    finally:
        (cache / "data").chmod(0o755)


def test_disk_full_during_prepare_keeps_nothing(docs_dir, tmp_path, monkeypatch):
    def full(self, ids):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("archpool.data.store._ShardWriter.write", full)
    cache = tmp_path / "cache"
    with pytest.raises(StateError, match="disk full"):
        prepare(tiny_config(docs_dir, cache), progress=False, log=lambda *a: None)
    assert list((cache / "data").iterdir()) == []


def test_build_directories_of_killed_prepares_are_removed(docs_dir, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "cache" / "data" / f".tmp-somekey-{int(dead.stdout)}-123"
    (stale / "partial").mkdir(parents=True)
    live = tmp_path / "cache" / "data" / f".tmp-otherkey-{os.getpid()}-456"
    live.mkdir()
    prepare(tiny_config(docs_dir, tmp_path / "cache"), progress=False, log=lambda *a: None)
    assert not stale.exists() and live.exists()
