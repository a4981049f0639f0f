"""The data configuration of a pool: sources, tokenizer, held-out splits and caps.

Every member of a pool shares one ``DataConfig``; context length is *not* part of it, so members
pretrained at 4K and at 8K read the same store and the same token stream. ``content_dict()`` is
what the store is keyed on (with the inputs' file hashes), so any change that alters the tokens
makes a new store, and a change that does not (the cache location, the progress bar) reuses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from archpool.config import Config, check_mapping
from archpool.errors import ConfigError
from archpool.io import read_config_file
from archpool.typecheck import check_types

SourceKind = Literal["default", "files", "hf"]
SourceSplit = Literal["auto", "pretrain", "extension", "validation"]
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)
SOURCE_SPLITS: tuple[str, ...] = get_args(SourceSplit)


def default_cache_root() -> Path:
    """``$ARCHPOOL_CACHE`` or ``~/.cache/archpool``."""
    return Path(os.environ.get("ARCHPOOL_CACHE") or Path.home() / ".cache" / "archpool")


@dataclass
class SourceConfig(Config):
    """One input. ``kind``: ``default`` (the embedded corpus), ``files`` (txt/jsonl/json/parquet
    files, directories or globs), ``hf`` (a ``datasets`` save_to_disk/parquet directory or a hub name).

    ``split``: ``auto`` holds out documents by content hash; ``pretrain`` never holds out;
    ``extension`` feeds only the long-document extension mix; ``validation`` is held out entirely.
    """

    PATH = "sources"

    kind: SourceKind = "default"
    path: str | list[str] | None = None  # files: path/dir/glob (or a list); hf: directory or hub name
    name: str | None = None  # label in manifests; defaults from kind/path
    text_field: str = "text"
    hf_split: str | None = None  # hf: which split of a DatasetDict (default: "train" or the only one)
    split: SourceSplit = "auto"
    root: str | None = None  # default corpus: where the installed files live (default: auto-detect)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name is None:
            p = self.path if isinstance(self.path, str) or self.path is None else ",".join(self.path)
            self.name = "default" if self.kind == "default" else f"{self.kind}:{p}"

    def validate(self) -> None:
        if self.kind in ("files", "hf") and not self.path:
            raise ConfigError("sources.path", f"a {self.kind!r} source needs a path")
        if not isinstance(self.text_field, str) or not self.text_field:
            raise ConfigError("sources.text_field", f"must be a non-empty string, got {self.text_field!r}")


@dataclass
class DataConfig(Config):
    """What a pool trains and evaluates on. Defaults: the embedded corpus, capped so that a 2-core
    laptop prepares it in well under a minute (``DataConfig.preset("full")`` lifts the caps)."""

    KEY = "data field"

    sources: list[SourceConfig] = field(default_factory=lambda: [SourceConfig()])
    # tokenizer: train a byte-level BPE of vocab_size, or load an existing tokenizer.json / HF dir
    tokenizer: str | None = None
    vocab_size: int = 4096
    task_tokens: int = 0  # reserved task tokens <|t0|>... (MQAR's composite bindings), inside vocab_size
    tokenizer_sample_chars: int = 8_000_000  # training-split text the BPE is trained on
    # held-out documents, chosen by content hash (identical texts always share a split)
    holdout_fraction: float = 0.05  # of short documents -> validation "short" (perplexity)
    long_holdout_fraction: float = 0.1  # of long documents -> validation "long" (LongPPL, haystacks)
    long_doc_tokens: int = 1024  # a document this long (estimated before encoding) is "long"
    chars_per_token: float = 3.5  # estimate used only for the long/short decision before encoding
    # document hygiene and caps (deterministic: documents ranked by content hash)
    min_doc_chars: int = 1
    max_doc_chars: int = 256_000  # longer documents are split at paragraph boundaries (~64K tokens)
    max_chars: int | None = 24_000_000  # cap on the total text kept, None = everything
    max_docs: int | None = None
    # store
    shard_tokens: int = 1 << 28
    workers: int | None = None  # None: HF's thread pool in this process; N > 1: N encoding processes
    cache_dir: str | None = None  # None = $ARCHPOOL_CACHE or ~/.cache/archpool
    reference_context: int = 256  # the pool's default pretraining context, for reports only

    def __post_init__(self) -> None:
        if isinstance(self.sources, (dict, SourceConfig)):
            self.sources = [self.sources]
        if not isinstance(self.sources, list) or not self.sources:
            raise ConfigError("sources", "need at least one source")
        srcs = []
        for i, s in enumerate(self.sources):
            if isinstance(s, dict):
                s = SourceConfig.from_dict(s, f"sources[{i}]")
            elif isinstance(s, str):
                s = SourceConfig(kind="default") if s == "default" else SourceConfig(kind="files", path=s)
            if not isinstance(s, SourceConfig):
                raise ConfigError(f"sources[{i}]", f"expected a mapping, got {type(s).__name__}")
            srcs.append(s)
        self.sources = srcs
        self.validate()

    def validate(self) -> None:
        check_types(self)

        def pos_int(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(name, f"must be a positive integer{' or null' if allow_none else ''}, got {v!r}")

        for n in (
            "vocab_size",
            "tokenizer_sample_chars",
            "long_doc_tokens",
            "min_doc_chars",
            "max_doc_chars",
            "shard_tokens",
            "reference_context",
        ):
            pos_int(n)
        for n in ("max_chars", "max_docs", "workers"):
            pos_int(n, allow_none=True)
        if self.vocab_size < 259:
            raise ConfigError("vocab_size", f"must be at least 259 (256 bytes + BOS/EOS/PAD), got {self.vocab_size}")
        if not isinstance(self.task_tokens, int) or isinstance(self.task_tokens, bool) or self.task_tokens < 0:
            raise ConfigError("task_tokens", f"must be a non-negative integer, got {self.task_tokens!r}")
        if self.tokenizer is None and self.vocab_size - self.task_tokens < 259:
            raise ConfigError(
                "task_tokens",
                f"{self.task_tokens} reserved tokens leave {self.vocab_size - self.task_tokens} "
                "of vocab_size for the BPE (at least 259 needed)",
            )
        for n in ("holdout_fraction", "long_holdout_fraction"):
            v = getattr(self, n)
            if not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ConfigError(n, f"must be in [0, 1), got {v!r}")
        if not self.chars_per_token > 0:
            raise ConfigError("chars_per_token", f"must be > 0, got {self.chars_per_token!r}")
        if self.max_doc_chars < self.min_doc_chars:
            raise ConfigError("max_doc_chars", f"must be >= min_doc_chars={self.min_doc_chars}, got {self.max_doc_chars}")
        if self.tokenizer is not None and not Path(self.tokenizer).exists():
            raise ConfigError("tokenizer", f"{self.tokenizer}: no such tokenizer.json or tokenizer directory")

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> DataConfig:
        """The data fields of a mapping, over ``preset``'s when it names one."""
        d = dict(check_mapping(d, path or "data"))
        preset = d.pop("preset", None)
        base = cls.preset(preset).to_dict() if preset else {}
        return super().from_dict({**base, **d}, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DataConfig:
        """A YAML/JSON file with the data fields at top level or under ``data:`` (a pool file)."""
        p = Path(path)
        obj = read_config_file(p)
        if obj is None:
            obj = {}
        if isinstance(obj, dict) and isinstance(obj.get("data"), dict):
            obj = obj["data"]
            if obj.get("cache_dir") is not None:  # a pool file: caches go where the environment says
                raise ConfigError(
                    "data.cache_dir", "a pool file cannot choose where caches go; set $ARCHPOOL_CACHE or pass --cache"
                )
        if not isinstance(obj, dict):
            raise ConfigError("data", f"{p}: expected a mapping of data fields, got {type(obj).__name__}")
        obj = dict(obj)
        # relative paths in a config file are relative to the file
        srcs = obj.get("sources")
        if isinstance(srcs, (dict, str)):
            srcs = [srcs]
        if isinstance(srcs, list):
            fixed = []
            for s in srcs:
                if isinstance(s, str) and s != "default":
                    s = {"kind": "files", "path": s}
                if (
                    isinstance(s, dict)
                    and s.get("path")
                    and (s.get("kind") == "files" or (s.get("kind") == "hf" and _looks_local(s["path"], p.parent)))
                ):
                    s = {**s, "path": _resolve(s["path"], p.parent)}
                fixed.append(s)
            obj["sources"] = fixed
        if obj.get("tokenizer"):
            obj["tokenizer"] = str(_resolve(obj["tokenizer"], p.parent))
        if obj.get("cache_dir"):
            obj["cache_dir"] = str(_resolve(obj["cache_dir"], p.parent))
        return cls.from_dict(obj)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> DataConfig:
        """``demo`` (the default: capped, vocab 4096) or ``full`` (the whole corpus, vocab 8192)."""
        presets = {
            "demo": {},
            "full": dict(
                max_chars=None, vocab_size=8192, tokenizer_sample_chars=50_000_000, reference_context=4096, long_doc_tokens=16384
            ),
        }
        if name not in presets:
            raise ConfigError("preset", f"unknown data preset {name!r}; allowed: {', '.join(presets)}")
        return cls(**{**presets[name], **overrides})

    def content_dict(self) -> dict[str, Any]:
        """The fields that determine the stored tokens (the store key, with the input hashes)."""
        d = self.to_dict()
        for k in ("workers", "cache_dir", "reference_context"):
            d.pop(k)
        if not d["task_tokens"]:
            d.pop("task_tokens")  # stores prepared before the field existed keep their key
        for s in d["sources"]:
            s.pop("root", None)  # where the files live does not matter; their hashes do
        return d

    def cache_root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_root()


def _looks_local(p: str | list[str], base: Path) -> bool:
    p0 = p if isinstance(p, str) else p[0]
    return p0.startswith((".", "/", "~")) or (base / p0).exists()


def _resolve(p, base: Path):
    if isinstance(p, list):
        return [_resolve(x, base) for x in p]
    q = Path(os.path.expanduser(p))
    return str(q if q.is_absolute() else base / q)
