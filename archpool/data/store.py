"""The tokenised store: one tokenizer and one token array per pool, shared by every member.

``prepare(config)`` reads the sources twice (once to hash, de-duplicate, assign held-out splits
and pick the tokenizer sample; once to encode), trains or loads the tokenizer, encodes documents
in parallel and writes, into ``<cache>/data/<key>/``:

- ``tokens-00000.bin`` …  flat uint16 (uint32 when the vocabulary needs it) memmaps, documents
  back to back, no separators (streams add EOS);
- ``index.npy``           one record per document: shard, offset, length, split, source, parent
  (documents longer than ``max_doc_chars`` are cut at paragraph breaks into pieces of one parent),
  and a 64-bit content hash;
- ``tokenizer.json``      and ``manifest.json`` (config, sources with package versions and a
  sha256 per input file, tokenizer hash, counts, timings), written last.

Everything is built in a temporary directory renamed into place, so a store either exists whole
or not at all. ``key`` hashes the content-relevant config and every input file's sha256: the same
inputs reuse the store, a changed file makes a new one. ``Store(path)`` opens a prepared store.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from archpool.data.config import DataConfig
from archpool.data.corpus import DefaultCorpus
from archpool.data.sources import FileSource, HFSource, Source
from archpool.errors import ConfigError, DataError, StateError
from archpool.io import atomic_write_json, disk_error, sha256_cached, sha256_file, sha256_json
from archpool.safeload import read_record
from archpool.tokenizer import Tokenizer, require_tokenizer, train_tokenizer

FORMAT_VERSION = 1
SPLITS = ("train", "extension", "val_short", "val_long")  # codes 0..3 in index["split"]
TRAIN, EXTENSION, VAL_SHORT, VAL_LONG = range(4)
IN_MEMORY_CHARS = 2_000_000_000  # above this much text, pass 2 re-reads the sources instead
_VAL = 255  # pass-1 marker: held out, short or long decided by the encoded length
INDEX_DTYPE = np.dtype(
    [
        ("shard", "<i4"),
        ("offset", "<i8"),
        ("length", "<i8"),
        ("split", "u1"),
        ("source", "<u2"),
        ("parent", "<i8"),
        ("hash", "<u8"),
    ]
)


# ------------------------------------------------------------------------------------------ Store
class Store:
    """A prepared store: documents as token arrays, by split."""

    def __init__(self, path: str | os.PathLike, verify: bool = True, key: str | None = None):
        """Open the store at ``path``; with ``verify`` its index and shards are checked against the
        manifest's sizes and sha256 (hashed once per process until a file's size or mtime changes).

        ``key``: the key the store is looked up by; a directory named like a store key (``<cache>/data/<key>``)
        is looked up by its name. Its manifest must carry that key (``StateError`` otherwise): a store
        copied or renamed onto another key's place is never used for that key's data."""
        self.path = Path(path)
        mpath = self.path / "manifest.json"
        if not mpath.is_file():
            raise DataError(f"{self.path}: not a prepared data store (no manifest.json); run `archpool data prepare`")
        self.manifest = _read_manifest(mpath)
        expected = key if key is not None else lookup_key(self.path)
        if expected is not None and self.manifest["key"] != expected:
            raise StateError(
                f"{mpath}: belongs to store {self.manifest['key']!r}, not to {expected!r} that this directory holds; {_REBUILD}"
            )
        if self.manifest.get("format") != FORMAT_VERSION:
            raise DataError(
                f"{self.path}: store format {self.manifest.get('format')} is not {FORMAT_VERSION}; re-run `archpool data prepare`"
            )
        try:
            self.dtype = np.dtype(self.manifest["dtype"])
            shards = [(str(e["file"]), int(e["tokens"]), str(e["sha256"])) for e in self.manifest["shards"]]
        except (KeyError, TypeError, ValueError) as e:
            raise StateError(f"{mpath}: corrupt manifest ({type(e).__name__}: {e}); {_REBUILD}") from None
        self._shard_specs = shards
        self.index = self._load_index(verify)
        if verify:
            self.verify_shards()
        self._shards: dict[int, np.memmap] = {}
        self._tokenizer: Tokenizer | None = None

    def _load_index(self, verify: bool) -> np.ndarray:
        """``index.npy``: checked against the manifest's sha256, loaded without pickle, its records in range."""
        path = self.path / "index.npy"
        if path.is_symlink() or not path.is_file():
            raise StateError(f"{path}: missing or not a regular file; {_REBUILD}")
        expected = self.manifest.get("index_sha256")
        if verify and expected and sha256_cached(path) != expected:
            raise StateError(f"{path}: corrupt (sha256 does not match manifest.json); {_REBUILD}")
        try:
            index = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:  # a pickle, a truncated or foreign file
            raise StateError(f"{path}: not a store index ({type(e).__name__}: {e}); {_REBUILD}") from None
        if index.dtype != INDEX_DTYPE or index.ndim != 1:
            raise StateError(f"{path}: not a store index (dtype {index.dtype}, shape {index.shape}); {_REBUILD}")
        n = len(self._shard_specs)
        tokens = np.array([t for _, t, _ in self._shard_specs] or [0], dtype=np.int64)
        shard = index["shard"]
        bad = (shard < 0) | (shard >= n) | (index["offset"] < 0) | (index["length"] < 0)
        if len(index) and not bad.any():
            bad = index["offset"] + index["length"] > tokens[shard]
        if bad.any():
            raise StateError(f"{path}: record {int(np.flatnonzero(bad)[0])} points outside the shards; {_REBUILD}")
        return index

    def verify_shards(self) -> None:
        """``StateError`` naming the first shard whose size or sha256 differs from ``manifest.json``."""
        for name, tokens, sha in self._shard_specs:
            path = self.path / name
            if "/" in name or path.is_symlink() or not path.is_file():
                raise StateError(f"{path}: missing or not a regular file; {_REBUILD}")
            size = path.stat().st_size
            if size != tokens * self.dtype.itemsize:
                raise StateError(
                    f"{path}: truncated or altered ({size} bytes, manifest.json says {tokens * self.dtype.itemsize}); {_REBUILD}"
                )
            if sha256_cached(path) != sha:
                raise StateError(f"{path}: corrupt (sha256 does not match manifest.json); {_REBUILD}")

    @property
    def key(self) -> str:
        return self.manifest["key"]

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.load(self.path / "tokenizer.json")
            require_tokenizer(self.manifest["tokenizer_hash"], self._tokenizer, where=str(self.path))
        return self._tokenizer

    @property
    def tokenizer_hash(self) -> str:
        return self.manifest["tokenizer_hash"]

    @property
    def eos_id(self) -> int:
        return self.manifest["special_ids"]["eos"]

    @property
    def n_docs(self) -> int:
        return len(self.index)

    @property
    def lengths(self) -> np.ndarray:
        return self.index["length"]

    def docs(self, *splits: str) -> np.ndarray:
        """Indices of the documents in ``splits`` (names from ``SPLITS``), in store order."""
        codes = [SPLITS.index(s) for s in splits]
        return np.flatnonzero(np.isin(self.index["split"], codes))

    def shard(self, i: int) -> np.memmap:
        if i not in self._shards:
            p = self.path / f"tokens-{i:05d}.bin"
            self._shards[i] = np.memmap(p, dtype=self.dtype, mode="r")
        return self._shards[i]

    def doc(self, i: int) -> np.ndarray:
        r = self.index[i]
        return self.shard(int(r["shard"]))[int(r["offset"]) : int(r["offset"]) + int(r["length"])]

    def text(self, i: int) -> str:
        return self.tokenizer.decode(self.doc(i))

    def require_tokenizer(self, expected_hash: str | None, where: str = "run") -> None:
        """Refuse to go on if a run recorded another tokenizer than this store's."""
        require_tokenizer(expected_hash, self.tokenizer_hash, where)

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"Store({self.path}, docs={c['docs']}, tokens={c['tokens']})"


_REBUILD = "delete the store directory and re-run `archpool data prepare` (or the pool)"


MANIFEST_TYPES = {"key": str, "tokenizer_hash": str, "counts": dict, "special_ids": dict}
KEY_LENGTH = 20  # hex digits of a store key (``store_key``)
_KEY_NAME = re.compile(rf"[0-9a-f]{{{KEY_LENGTH}}}")


def lookup_key(path: Path) -> str | None:
    """The key a store directory is looked up by: its name when that is a store key (as ``store_path``
    makes it), else None (a store directory given by the user under another name)."""
    return path.name if _KEY_NAME.fullmatch(path.name) else None


def _read_manifest(path: Path) -> dict:
    """``manifest.json``, bounded, a mapping whose fields read after opening have their types;
    ``StateError`` naming the file otherwise."""
    try:
        manifest = read_record(path)
    except ConfigError as e:
        raise StateError(f"{path}: corrupt manifest ({e.message}); {_REBUILD}") from None
    for name, kind in MANIFEST_TYPES.items():
        if not isinstance(manifest.get(name), kind):
            raise StateError(f"{path}: corrupt manifest ({name!r} is not a {kind.__name__}); {_REBUILD}")
    return manifest


def _build_root(cache_root: Path) -> Path:
    """``<cache>/data``, created; ``StateError`` when the cache root is a file or not writable."""
    root = cache_root / "data"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StateError(f"{cache_root}: the cache root ($ARCHPOOL_CACHE or --cache) is not a directory") from None
    except OSError as e:
        raise StateError(f"{cache_root}: cannot create the cache ({e.strerror or e}); set $ARCHPOOL_CACHE or --cache") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise StateError(f"{root}: the cache ($ARCHPOOL_CACHE or --cache) is not writable; set another")
    return root


def _remove_stale_builds(root: Path) -> None:
    """Delete the temporary build directories of ``prepare`` calls whose process is gone (killed)."""
    for p in root.glob(".tmp-*"):
        parts = p.name.split("-")
        pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else None
        if pid is None or p.is_symlink() or not p.is_dir():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:
            continue


# ---------------------------------------------------------------------------------------- prepare
def build_source(cfg) -> Source:
    """The source for one ``SourceConfig``."""
    if cfg.kind == "files":
        return FileSource(cfg.path, cfg.text_field, cfg.name)
    if cfg.kind == "hf":
        path = cfg.path if isinstance(cfg.path, str) else cfg.path[0]
        return HFSource(path, cfg.text_field, cfg.hf_split, cfg.name)
    return DefaultCorpus(root=cfg.root)


def store_key(config: DataConfig, sources, records) -> str:
    tok = (
        sha256_file(Path(config.tokenizer) / "tokenizer.json" if Path(config.tokenizer).is_dir() else config.tokenizer)
        if config.tokenizer
        else None
    )
    inputs = [[s.name, [[r.path, r.sha256] for r in recs]] for s, recs in zip(sources, records)]
    from archpool.data.corpus import READER_VERSION

    return sha256_json(
        {"format": FORMAT_VERSION, "readers": READER_VERSION, "config": config.content_dict(), "inputs": inputs, "tokenizer": tok}
    )[:KEY_LENGTH]


def store_path(config: DataConfig) -> Path:
    """Where ``prepare(config)`` puts (or finds) its store; reads and hashes the inputs."""
    sources = [build_source(s) for s in config.sources]
    records = [s.files() for s in sources]
    return config.cache_root() / "data" / store_key(config, sources, records)


def prepare(config: DataConfig, *, progress: bool = True, force: bool = False, log=print) -> Store:
    """Build the store for ``config`` (or reuse the one whose inputs hash the same)."""
    t_start = time.perf_counter()
    sources = [build_source(s) for s in config.sources]
    records = [s.files() for s in sources]
    inputs = _Inputs(config, store_key(config, sources, records), sources, records)
    final = config.cache_root() / "data" / inputs.key
    if (final / "manifest.json").is_file() and not force:
        found = _manifest_key(final)
        if found is None or found == inputs.key:  # a damaged manifest is Store's named error
            log(f"data: reusing {final}")
            return Store(final, key=inputs.key)
        warnings.warn(f"{final}: its manifest.json belongs to store {found!r}, not this one; rebuilding it", stacklevel=2)
        force = True
    read = _read_sources(inputs)
    selected = _apply_caps(read.meta, config)
    n_sel_chars = sum(read.meta[k][1] for k in selected)

    root = _build_root(config.cache_root())
    _remove_stale_builds(root)
    tmp = root / f".tmp-{inputs.key}-{os.getpid()}-{time.time_ns()}"
    tmp.mkdir()
    try:
        t0 = time.perf_counter()
        tokenizer, tok_source = _store_tokenizer(config, read, selected, log)
        read.sample = None
        tokenizer.save(tmp)
        tok_s = time.perf_counter() - t0
        shards = _write_shards(tmp, inputs, read, selected, tokenizer, _progress(progress, n_sel_chars))
        counts = _counts(shards.index)
        _check_enough_text(counts, config)
        manifest = _manifest(tmp, inputs, read, tokenizer, tok_source, shards, counts, {"tok_s": tok_s, "t_start": t_start})
        atomic_write_json(tmp / "manifest.json", manifest)  # last: its presence marks a complete store
        if not _install(tmp, final, force):
            return Store(final, key=inputs.key)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):  # nothing partial is kept
            raise disk_error(final, e) from e
        raise
    log(f"data: prepared {final} ({counts['docs']} docs, {counts['tokens']} tokens) in {manifest['timing']['total_s']} s")
    return Store(final, key=inputs.key)


@dataclass(frozen=True)
class _Inputs:
    """What a store is built from: its config, its key, the sources and each source's input files."""

    config: DataConfig
    key: str
    sources: list[Source]
    records: list[list]


@dataclass
class _Read:
    """The first read of the sources: the documents kept, their splits and the tokenizer sample."""

    meta: dict[tuple[int, int], tuple[int, int, int, int]]  # (source, document) -> (split hash, chars, split, rank)
    dupes: int  # documents dropped as exact duplicates
    cache: dict | None  # (source, document) -> text while the texts fit IN_MEMORY_CHARS, else None
    sample: _SmallestHashes | None  # the tokenizer's training sample
    per_source: list[int]  # documents kept per source
    seconds: float


@dataclass
class _Shards:
    """The second pass: encoded documents written to token shards, and their index."""

    dtype: np.dtype
    sizes: list[int]  # tokens per shard
    index: np.ndarray  # one INDEX_DTYPE record per document
    n_bytes: int  # UTF-8 bytes of text encoded
    encode_s: float  # of ``seconds``, the time spent in the tokenizer
    seconds: float


def _read_sources(inputs: _Inputs) -> _Read:
    """Pass 1: hash, de-duplicate, assign splits and offer training documents to the tokenizer sample."""
    config = inputs.config
    t0 = time.perf_counter()
    meta, seen, dupes = {}, set(), 0
    cache: dict | None = {}  # texts kept from pass 1 while they fit, so pass 2 need not re-read
    cache_chars = 0
    sample = _SmallestHashes(config.tokenizer_sample_chars)
    per_source = [0] * len(inputs.sources)
    for si, (src, scfg) in enumerate(zip(inputs.sources, config.sources)):
        for j, doc in enumerate(src.documents()):
            text = doc.text
            if len(text.strip()) < config.min_doc_chars:
                continue
            h = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
            if h in seen:
                dupes += 1
                continue
            seen.add(h)
            hv = int.from_bytes(h[:8], "big")  # decides the split
            rank = int.from_bytes(h[8:16], "big")  # ranks for caps and the tokenizer sample (independent bits)
            split = _assign_split(scfg.split, hv, len(text), config)
            meta[(si, j)] = (hv, len(text), split, rank)
            per_source[si] += 1
            if cache is not None:
                cache[(si, j)] = text
                cache_chars += len(text)
                if cache_chars > IN_MEMORY_CHARS:
                    cache = None
            if split in (TRAIN, EXTENSION):
                sample.offer(rank, text)
        if per_source[si] == 0:
            recs = inputs.records[si]
            files = ", ".join(r.path for r in recs[:3]) + (" …" if len(recs) > 3 else "")
            raise DataError(f"source {src.name}: yields no documents (files: {files or 'none'})")
    return _Read(meta, dupes, cache, sample, per_source, time.perf_counter() - t0)


def _store_tokenizer(config: DataConfig, read: _Read, selected: set, log) -> tuple[Tokenizer, dict[str, Any]]:
    """The given tokenizer, or a byte-level BPE trained on the sample's selected documents; with the
    manifest's description of where it came from."""
    if config.tokenizer:
        tokenizer = Tokenizer.load(config.tokenizer)
        if config.task_tokens:
            tokenizer = tokenizer.with_task_tokens(config.task_tokens)
        return tokenizer, {"kind": "given", "path": str(Path(config.tokenizer).resolve())}
    cutoff = max((read.meta[k][3] for k in selected), default=0)
    assert read.sample is not None  # freed only once the tokenizer is made
    texts = [t for hv, t in read.sample.sorted() if hv <= cutoff]
    if not texts:
        raise DataError("tokenizer: no training documents to learn the vocabulary from (every document is held out?)")
    log(f"data: training a byte-level BPE of {config.vocab_size} on {sum(map(len, texts)) / 1e6:.1f} M chars")
    tokenizer = train_tokenizer(texts, config.vocab_size - config.task_tokens)
    if config.task_tokens:
        tokenizer = tokenizer.with_task_tokens(config.task_tokens)
    return tokenizer, {
        "kind": "trained",
        "vocab_size": config.vocab_size,
        "task_tokens": config.task_tokens,
        "sample_chars": sum(map(len, texts)),
        "sample_docs": len(texts),
    }


def _selected_documents(inputs: _Inputs, read: _Read, selected: set) -> Iterator[tuple[int, int, str]]:
    """(source, document, text) of the selected documents in source order: from pass 1's cache, else re-read."""
    if read.cache is not None:
        for k in sorted(selected):
            yield k[0], k[1], read.cache[k]
        return
    for si, src in enumerate(inputs.sources):
        for j, doc in enumerate(src.documents()):
            if (si, j) in selected:
                yield si, j, doc.text


def _write_shards(tmp: Path, inputs: _Inputs, read: _Read, selected: set, tokenizer: Tokenizer, bar) -> _Shards:
    """Pass 2: encode the selected documents (long ones in pieces) into token shards and ``index.npy``;
    a held-out document is long or short by its encoded length."""
    config = inputs.config
    dtype = np.dtype("<u2") if tokenizer.vocab_size <= 1 << 16 else np.dtype("<u4")
    t0 = time.perf_counter()
    writer = _ShardWriter(tmp, dtype, config.shard_tokens)
    rows: list[tuple] = []
    parent = 0
    n_bytes = 0
    enc_s = 0.0
    for batch in _batches(_selected_documents(inputs, read, selected), config.max_doc_chars):
        texts = [t for *_, t in batch]
        te = time.perf_counter()
        encoded = _encode(tokenizer, texts, config.workers)
        enc_s += time.perf_counter() - te
        for (si, j, piece_no, text), ids in zip(batch, encoded):
            hv, _, split, _ = read.meta[(si, j)]
            if piece_no == 0:
                parent += 1
            if split == _VAL:
                split = VAL_LONG if len(ids) >= config.long_doc_tokens else VAL_SHORT
            shard, offset = writer.write(ids)
            ph = (
                hv if piece_no == 0 else int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")
            )
            rows.append((shard, offset, len(ids), split, si, parent - 1, ph))
            n_bytes += len(text.encode("utf-8", "surrogatepass"))
            bar.update(len(text))
    bar.close()
    writer.close()
    close_workers()
    write_s = time.perf_counter() - t0
    index = np.array(rows, dtype=INDEX_DTYPE)
    np.save(tmp / "index.npy", index)
    return _Shards(dtype, writer.sizes, index, n_bytes, enc_s, write_s)


def _manifest(
    tmp: Path,
    inputs: _Inputs,
    read: _Read,
    tokenizer: Tokenizer,
    tok_source: dict[str, Any],
    shards: _Shards,
    counts: dict,
    times: dict[str, float],
) -> dict[str, Any]:
    """``manifest.json``: config, sources and their files, tokenizer, shards with sha256, counts, timings."""
    config, sources, records = inputs.config, inputs.sources, inputs.records
    return {
        "format": FORMAT_VERSION,
        "key": inputs.key,
        "config": config.to_dict(),
        "sources": [
            dict(s.describe(), n_documents=read.per_source[i], files=[vars(r) for r in records[i]]) for i, s in enumerate(sources)
        ],
        "tokenizer_hash": tokenizer.hash,
        "tokenizer": tok_source,
        "vocab_size": tokenizer.vocab_size,
        "special_ids": {"bos": tokenizer.bos_id, "eos": tokenizer.eos_id, "pad": tokenizer.pad_id},
        "dtype": shards.dtype.str,
        "shards": [
            {"file": f"tokens-{i:05d}.bin", "tokens": n, "sha256": sha256_file(tmp / f"tokens-{i:05d}.bin")}
            for i, n in enumerate(shards.sizes)
        ],
        "index_sha256": sha256_file(tmp / "index.npy"),
        "counts": dict(
            counts, text_bytes=shards.n_bytes, duplicates_dropped=read.dupes, input_documents=len(read.meta) + read.dupes
        ),
        "timing": {
            "read_s": round(read.seconds, 2),
            "tokenizer_s": round(times["tok_s"], 2),
            "encode_write_s": round(shards.seconds, 2),
            "encode_s": round(shards.encode_s, 2),
            "encode_MB_per_s": round(shards.n_bytes / 1e6 / max(shards.encode_s, 1e-9), 2),
            "total_s": round(time.perf_counter() - times["t_start"], 2),
            "workers": _n_workers(config.workers),
            "cpus": os.cpu_count(),
        },
    }


def _manifest_key(directory: Path) -> str | None:
    """The ``key`` of ``directory/manifest.json``; None when it is unreadable or has none."""
    try:
        key = read_record(directory / "manifest.json").get("key")
    except ConfigError:
        return None
    return key if isinstance(key, str) else None


def _install(tmp: Path, final: Path, force: bool) -> bool:
    """Rename the finished build into place; False (the build discarded) when another process
    finished the same store first."""
    if final.exists():
        if (final / "manifest.json").is_file() and not force:
            shutil.rmtree(tmp)  # another process finished the same store first
            return False
        shutil.rmtree(final)
    os.replace(tmp, final)
    return True


def _assign_split(source_split: str, hv: int, n_chars: int, config: DataConfig) -> int:
    if source_split == "pretrain":
        return TRAIN
    if source_split == "extension":
        return EXTENSION
    if source_split == "validation":
        return _VAL
    u = hv / 2.0**64
    long = n_chars >= config.long_doc_tokens * config.chars_per_token
    return _VAL if u < (config.long_holdout_fraction if long else config.holdout_fraction) else TRAIN


def _apply_caps(meta: dict, config: DataConfig) -> set:
    if config.max_chars is None and config.max_docs is None:
        return set(meta)
    keep: set[Any] = set()
    chars = 0
    for k in sorted(meta, key=lambda k: meta[k][3]):
        n = meta[k][1]
        if config.max_docs is not None and len(keep) >= config.max_docs:
            break
        if config.max_chars is not None and chars + n > config.max_chars and keep:
            continue  # too long for what is left; a later, shorter document may still fit
        keep.add(k)
        chars += n
    return keep


class _SmallestHashes:
    """The documents with the smallest content hashes whose text fits a character budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self.heap: list[tuple[int, str]] = []  # max-heap via negated hash
        self.chars = 0

    def offer(self, hv: int, text: str) -> None:
        heapq.heappush(self.heap, (-hv, text))
        self.chars += len(text)
        while self.heap and self.chars - len(self.heap[0][1]) >= self.budget:
            _, t = heapq.heappop(self.heap)
            self.chars -= len(t)

    def sorted(self) -> list[tuple[int, str]]:
        return sorted(((-h, t) for h, t in self.heap), key=lambda x: x[0])


_PARA = re.compile(r"\n\s*\n")


def split_long(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` at paragraph breaks into pieces of at most ~``max_chars`` (hard cut if needed)."""
    if len(text) <= max_chars:
        return [text]
    pieces, start = [], 0
    while len(text) - start > max_chars:
        window = text[start : start + max_chars]
        cut = None
        for m in _PARA.finditer(window):
            if m.end() > max_chars // 2:
                cut = m.end()
                break
        if cut is None:
            nl = window.rfind("\n", max_chars // 2)
            cut = nl + 1 if nl > 0 else max_chars
        pieces.append(text[start : start + cut])
        start += cut
    pieces.append(text[start:])
    return pieces


def _batches(docs: Iterator[tuple[int, int, str]], max_doc_chars: int, batch_chars: int = 4_000_000):
    batch, n = [], 0
    for si, j, text in docs:
        for p, piece in enumerate(split_long(text, max_doc_chars)):
            batch.append((si, j, p, piece))
            n += len(piece)
        if n >= batch_chars:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


# -------------------------------------------------------------------------------------- encoding
def _n_workers(workers: int | None) -> int:
    """None: one process, HF's own thread pool over all cores (measured as fast as 2 processes on
    2 cores, see bench/results/data.md); N > 1: N single-threaded processes."""
    return 1 if workers is None else workers


_POOL: dict = {}
_WORKER_TOK: list = []


def _worker_init(tokenizer_json: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core instead of threads
    from tokenizers import Tokenizer as HFTokenizer

    _WORKER_TOK.append(Tokenizer(HFTokenizer.from_str(tokenizer_json)))


def _worker_encode(texts: list[str]) -> list[np.ndarray]:
    return [np.asarray(ids, dtype=np.uint32) for ids in _WORKER_TOK[0].encode_documents(texts)]


def _encode(tokenizer: Tokenizer, texts: list[str], workers: int | None) -> list:
    """Encode ``texts`` in order; with ``workers`` > 1 in that many processes (spawned once)."""
    n = _n_workers(workers)
    if n <= 1 or len(texts) < 2:
        return tokenizer.encode_documents(texts)
    key = (tokenizer.hash, n)
    if key not in _POOL:
        import multiprocessing as mp

        for old in _POOL.values():
            old.terminate()
        _POOL.clear()
        _POOL[key] = mp.get_context("spawn").Pool(n, initializer=_worker_init, initargs=(tokenizer._json,))
    pool = _POOL[key]
    # split the batch into chunks of similar text size, one or more per worker, keep the order
    chunks, cur, size, target = [], [], 0, max(1, sum(map(len, texts)) // (4 * n))
    for t in texts:
        cur.append(t)
        size += len(t)
        if size >= target:
            chunks.append(cur)
            cur, size = [], 0
    if cur:
        chunks.append(cur)
    out: list = []
    for part in pool.map(_worker_encode, chunks):
        out.extend(part)
    return out


def close_workers() -> None:
    for p in _POOL.values():
        p.terminate()
    _POOL.clear()


class _ShardWriter:
    def __init__(self, directory: Path, dtype: np.dtype, shard_tokens: int):
        self.dir, self.dtype, self.cap = directory, dtype, shard_tokens
        self.sizes: list[int] = []
        self.f: BinaryIO | None = None

    def _open(self) -> BinaryIO:
        if self.f:
            self.f.close()
        f = self.f = open(self.dir / f"tokens-{len(self.sizes):05d}.bin", "wb")  # noqa: SIM115 - one shard open at a time, closed by _open/close
        self.sizes.append(0)
        return f

    def write(self, ids) -> tuple[int, int]:
        arr = np.asarray(ids, dtype=self.dtype)
        f = self.f
        if f is None or (self.sizes[-1] + len(arr) > self.cap and self.sizes[-1] > 0):
            f = self._open()
        offset = self.sizes[-1]
        f.write(arr.tobytes())
        self.sizes[-1] += len(arr)
        return len(self.sizes) - 1, offset

    def close(self):
        f = self.f if self.f is not None else self._open()
        f.flush()
        os.fsync(f.fileno())
        f.close()


def _check_enough_text(counts: dict, config: DataConfig) -> None:
    """A store that cannot fill one training sequence of the reference context is an input mistake."""
    train = counts["train"]["tokens"] + counts["extension"]["tokens"]
    if train < config.reference_context:
        raise DataError(
            f"the sources give {train} training tokens, fewer than one {config.reference_context}-token "
            "sequence (reference_context); give the data stage more text"
        )


def _counts(index: np.ndarray) -> dict:
    out: dict[str, Any] = {"docs": len(index), "tokens": int(index["length"].sum()), "parents": len(np.unique(index["parent"]))}
    for code, name in enumerate(SPLITS):
        m = index["split"] == code
        out[name] = {"docs": int(m.sum()), "tokens": int(index["length"][m].sum())}
    return out


def _progress(enabled: bool, total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="char", unit_scale=True, desc="encode", disable=not enabled, mininterval=1.0)
