"""Document sources behind one interface.

A *source* yields ``Document``s in a fixed order and lists the files it read (``FileRecord``s with
sha256) for the store manifest:

- ``FileSource``: ``.txt`` (one document per file), ``.jsonl`` / ``.json`` (a ``text`` field,
  configurable), ``.parquet`` (a text column); paths, directories (recursive) and globs.
- ``HFSource``: a ``datasets`` ``save_to_disk`` directory, a directory of parquet files, or a hub
  name (needs network; offline it fails with a message saying so).
- ``archpool.data.corpus.DefaultCorpus``: the embedded default corpus.

Bad input is a ``DataError`` naming the file: unreadable, undecodable, a missing text field, or a
source that yields no documents at all.

``DocumentSource`` is the hook for documents *generated* at training time (synthetic tasks): any
object with a ``name`` and ``documents(seed) -> Iterator[str]``; the streams mix it in at a share.
Optionally ``cache_key`` (its documents are cached across runs, ``archpool.data.generated``) and
``documents_from(seed, start)`` (the same documents from index ``start``, without building the
ones before: how a stream continues past a cached prefix).
"""

from __future__ import annotations

import glob as globlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from archpool.errors import ConfigError, DataError
from archpool.io import sha256_file
from archpool.safeload import RECORD_MAX_NODES, load_json

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
ALL_SUFFIXES = TEXT_SUFFIXES + JSON_SUFFIXES + PARQUET_SUFFIXES


@dataclass(frozen=True)
class Document:
    text: str
    origin: str  # file (and record) the text came from, for messages and inspection


@dataclass(frozen=True)
class FileRecord:
    path: str  # as shown in the manifest (relative to the source root where there is one)
    sha256: str
    bytes: int


class Source(Protocol):
    name: str

    def files(self) -> list[FileRecord]: ...

    def documents(self) -> Iterator[Document]: ...

    def describe(self) -> dict: ...


class TokenDocument(Protocol):
    """A document made in tokens (a synthetic task's): its ids and, per id, whether it is a training target."""

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def scored(self) -> Sequence[bool]: ...


@runtime_checkable
class DocumentSource(Protocol):
    """Documents made on the fly (e.g. synthetic tasks), as text or in tokens. Same seed, same documents, same
    order."""

    name: str

    def documents(self, seed: int) -> Iterator[str | TokenDocument]: ...


class TextListSource:
    """A ``DocumentSource`` over fixed texts, cycled forever in a seeded order each pass."""

    def __init__(self, texts: Iterable[str], name: str = "texts"):
        self.texts = list(texts)
        self.name = name
        if not self.texts:
            raise DataError(f"{name}: no documents")

    def documents(self, seed: int) -> Iterator[str]:
        import numpy as np

        epoch = 0
        while True:
            order = np.random.default_rng([seed, epoch]).permutation(len(self.texts))
            for i in order:
                yield self.texts[i]
            epoch += 1


class GeneratorSource:
    """A ``DocumentSource`` from a function ``make(seed) -> Iterator[str]``. With a ``cache_key`` (a
    digest of everything ``make`` depends on besides the seed and tokenizer), the streams cache its
    documents across runs (``archpool.data.generated``)."""

    def __init__(
        self,
        name: str,
        make: Callable[[int], Iterable[str | TokenDocument]],
        cache_key: str | None = None,
        make_from: Callable[[int, int], Iterable[str | TokenDocument]] | None = None,
    ):
        self.name = name
        self._make = make
        self._make_from = make_from  # (seed, start) -> documents start, start + 1, ... (faster than skipping)
        self.cache_key = cache_key

    def with_cache_key(self, cache_key: str | None) -> GeneratorSource:
        """The same documents under another cache key (None: never cached)."""
        return GeneratorSource(self.name, self._make, cache_key, self._make_from)

    def documents_from(self, seed: int, start: int) -> Iterator[str | TokenDocument]:
        """Documents ``start``, ``start + 1``, ... of ``documents(seed)``."""
        if self._make_from is not None:
            return iter(self._make_from(seed, start))
        return itertools.islice(self.documents(seed), start, None)

    def documents(self, seed: int) -> Iterator[str | TokenDocument]:
        return iter(self._make(seed))


# ----------------------------------------------------------------------------------- local files
def expand_paths(spec: str | list[str]) -> list[Path]:
    """Files named by paths, directories (recursive, known suffixes) and globs; sorted, de-duplicated."""
    specs = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    out: list[Path] = []
    for s in specs:
        s = os.path.expanduser(str(s))
        if any(c in s for c in "*?["):
            matches = [Path(m) for m in sorted(globlib.glob(s, recursive=True))]
            if not matches:
                raise DataError(f"{s}: the glob matches no files")
            for m in matches:
                out.extend(_files_under(m) if m.is_dir() else [_regular(m)])
        else:
            p = Path(s)
            if p.is_dir():
                found = _files_under(p)
                if not found:
                    raise DataError(f"{p}: directory holds no {'/'.join(ALL_SUFFIXES)} files")
                out.extend(found)
            elif p.exists():
                out.append(_regular(p))
            else:
                raise DataError(f"{p}: no such file or directory")
    seen, uniq = set(), []
    for p in out:
        r = os.path.realpath(p)
        if r not in seen:
            seen.add(r)
            uniq.append(p)
    return uniq


def _regular(p: Path) -> Path:
    """``p`` if it is a regular file (a symlink to one counts); a FIFO, device or socket would block or
    never end (``/dev/zero``), so it is a DataError."""
    if not p.is_file():
        raise DataError(f"{p}: not a regular file (a device, FIFO or socket); a source reads files")
    return p


def _files_under(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and p.suffix.lower() in ALL_SUFFIXES and not p.name.startswith("."))


class FileSource:
    """Local ``.txt`` / ``.jsonl`` / ``.json`` / ``.parquet`` files, in sorted path order."""

    def __init__(self, paths: str | list[str], text_field: str = "text", name: str | None = None):
        self.spec = paths
        self.text_field = text_field
        self.name = name or f"files:{paths}"
        self.paths = expand_paths(paths)

    def files(self) -> list[FileRecord]:
        recs = []
        for p in self.paths:
            try:
                recs.append(FileRecord(str(p), sha256_file(p), p.stat().st_size))
            except OSError as e:
                raise DataError(f"{p}: cannot read ({e.strerror})") from None
        return recs

    def describe(self) -> dict:
        return {"kind": "files", "name": self.name, "paths": self.spec, "text_field": self.text_field}

    def documents(self) -> Iterator[Document]:
        for p in self.paths:
            yield from read_file(p, self.text_field)


def read_file(path: Path, text_field: str = "text") -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        yield from _read_json(path, text_field)
    elif suffix in PARQUET_SUFFIXES:
        yield from _read_parquet(path, text_field)
    else:
        yield Document(_read_text(path), str(path))


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); convert it or drop it from the source") from None


def _field(rec, text_field: str, where: str) -> str:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object with a {text_field!r} field, got {type(rec).__name__}")
    if text_field not in rec:
        keys = ", ".join(sorted(rec)[:8]) or "none"
        raise DataError(f"{where}: missing text field {text_field!r} (fields: {keys}); set text_field in the source")
    v = rec[text_field]
    if not isinstance(v, str):
        raise DataError(f"{where}: field {text_field!r} is {type(v).__name__}, not a string")
    return v


def _load_json(text: str, where: str) -> object:
    """One JSON document of a data file, parsed within safeload's bounds (nesting, size); DataError
    naming ``where`` otherwise."""
    try:
        return load_json(text, where, max_nodes=RECORD_MAX_NODES)
    except ConfigError as e:
        message = e.message.replace("not valid JSON", "invalid JSON", 1)
        raise DataError(f"{where}: {message}") from None


def _records(obj: object, path: Path, text_field: str) -> list:
    """The records of a ``.json`` document: a list of records, an object with a ``data`` list, or one
    record; DataError naming the file for any other shape."""
    if isinstance(obj, dict) and text_field not in obj and "data" in obj:
        obj = obj["data"]
        if not isinstance(obj, list):
            raise DataError(f"{path}: 'data' is {type(obj).__name__}, not a list of records with a {text_field!r} field")
    return obj if isinstance(obj, list) else [obj]


def _read_json(path: Path, text_field: str) -> Iterator[Document]:
    text = _read_text(path)
    stripped = text.lstrip()
    if path.suffix.lower() == ".json" and stripped[:1] in ("[", "{"):
        try:
            obj = _load_json(text, str(path))
        except DataError:
            # perhaps JSON lines in a .json file
            if stripped[:1] == "{" and "\n" in stripped:
                yield from _read_jsonl_text(path, text, text_field)
                return
            raise
        for i, rec in enumerate(_records(obj, path, text_field)):
            yield Document(_field(rec, text_field, f"{path}[{i}]"), f"{path}[{i}]")
        return
    yield from _read_jsonl_text(path, text, text_field)


def _read_jsonl_text(path: Path, text: str, text_field: str) -> Iterator[Document]:
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = _load_json(line, f"{path}:{lineno}")
        yield Document(_field(rec, text_field, f"{path}:{lineno}"), f"{path}:{lineno}")


def _read_parquet(path: Path, text_field: str) -> Iterator[Document]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    names = pf.schema_arrow.names
    if text_field not in names:
        raise DataError(f"{path}: missing text column {text_field!r} (columns: {', '.join(names)}); set text_field in the source")
    row = 0
    for batch in pf.iter_batches(columns=[text_field], batch_size=4096):
        for v in batch.column(0).to_pylist():
            if v is not None and not isinstance(v, str):
                raise DataError(f"{path}: column {text_field!r} holds {type(v).__name__}, not strings")
            yield Document(v or "", f"{path}#{row}")
            row += 1


# ---------------------------------------------------------------------------- Hugging Face datasets
class HFSource:
    """A ``datasets`` dataset: a ``save_to_disk`` directory, a parquet directory, or a hub name."""

    def __init__(self, path: str, text_field: str = "text", split: str | None = None, name: str | None = None):
        self.path = str(path)
        self.text_field = text_field
        self.split = split
        self.name = name or f"hf:{path}"
        self._ds = None

    def _dataset(self):
        if self._ds is not None:
            return self._ds
        try:
            import datasets
        except ImportError:
            raise DataError(f"{self.path}: reading a Hugging Face dataset needs `pip install datasets`") from None
        p = Path(self.path)
        if p.is_dir():
            if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() or (p / "state.json").exists():
                try:
                    ds = datasets.load_from_disk(str(p))
                except Exception as e:
                    raise DataError(f"{p}: not a readable save_to_disk dataset ({e})") from None
            else:
                files = sorted(str(f) for f in p.rglob("*.parquet"))
                if not files:
                    raise DataError(f"{p}: neither a save_to_disk dataset nor a directory of parquet files")
                try:
                    ds = datasets.load_dataset("parquet", data_files=files, split="train")
                except Exception as e:
                    raise DataError(f"{p}: cannot load parquet files ({e})") from None
        else:
            offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
            try:
                ds = datasets.load_dataset(self.path, split=self.split)
            except Exception as e:
                hint = " (HF_HUB_OFFLINE is set)" if offline else ""
                raise DataError(
                    f"{self.path}: no such local directory, and the Hugging Face hub dataset could not be loaded"
                    f"{hint}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. Without network, "
                    "download it elsewhere and point the source at its save_to_disk or parquet directory"
                ) from None
        if isinstance(ds, datasets.DatasetDict):
            split = self.split or ("train" if "train" in ds else (list(ds)[0] if len(ds) == 1 else None))
            if split not in ds:
                raise DataError(f"{self.path}: choose hf_split among {', '.join(ds)}")
            ds = ds[split]
        if self.text_field not in ds.column_names:
            raise DataError(
                f"{self.path}: missing text column {self.text_field!r} (columns: {', '.join(ds.column_names)}); set text_field in the source"
            )
        self._ds = ds
        return ds

    def files(self) -> list[FileRecord]:
        ds = self._dataset()
        recs = []
        for f in ds.cache_files:
            fp = Path(f["filename"])
            recs.append(FileRecord(str(fp), sha256_file(fp), fp.stat().st_size))
        if not recs:  # in-memory/streamed: fall back to the dataset fingerprint
            recs.append(FileRecord(f"{self.path}#fingerprint", getattr(ds, "_fingerprint", "unknown"), 0))
        return recs

    def describe(self) -> dict:
        return {"kind": "hf", "name": self.name, "path": self.path, "text_field": self.text_field, "split": self.split}

    def documents(self) -> Iterator[Document]:
        ds = self._dataset()
        col = self.text_field
        for start in range(0, len(ds), 1024):
            batch = ds[start : start + 1024][col]
            for i, v in enumerate(batch):
                if v is not None and not isinstance(v, str):
                    raise DataError(f"{self.path}: column {col!r} holds {type(v).__name__}, not strings")
                yield Document(v or "", f"{self.path}#{start + i}")
