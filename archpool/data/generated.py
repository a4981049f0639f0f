"""A cross-run cache of generated documents (synthetic tasks), next to the data store.

Generating task documents is Python work per document; every run of a pool that shares a seed
would otherwise rebuild the same documents. A ``GeneratedStream`` whose source has a ``cache_key``
(a digest of everything the documents depend on: task names, parameters, lengths and the task
code) keeps what it generated, from document 0, and writes it here; the next stream with the same
key, tokenizer and seed reads that prefix instead of generating it, and generates only beyond it.
The tokens are the same bytes either way (``tests/data/test_generated_cache.py``).

Files are ``<dir>/<digest>-<seed>.npz`` holding ``toks`` (int32), ``ends`` (each document's end
offset, EOS included) and ``scored`` (bool), written to a temporary file and renamed, so readers
never see half a file and concurrent writers only ever replace a prefix by a longer one. A file
that cannot be read, is a symbolic link, or holds a token id outside the tokenizer's vocabulary is
ignored (and regenerated, the id case with a warning); a directory that cannot be written, or is a
symbolic link, disables the writes with one warning — training never fails because of this cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_CACHED_TOKENS = 1 << 24  # per (key, seed): 16M tokens, ~90 MB on disk and in memory while recording


@dataclass(frozen=True)
class GeneratedPrefix:
    """The first ``len(ends)`` documents of a source: tokens, document end offsets, target flags."""

    toks: np.ndarray
    ends: np.ndarray
    scored: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def doc_index(self) -> np.ndarray:
        """Per token, the index of its document."""
        return np.repeat(np.arange(len(self.ends), dtype=np.int64), np.diff(self.ends, prepend=0))


# what reading a damaged .npz raises: bad zip or member, truncation, unsupported compression, odd arrays
UNREADABLE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    EOFError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
)


def _consistent(prefix: GeneratedPrefix) -> bool:
    """Whether a loaded prefix is one ``save`` wrote: 1-D arrays, one flag per token, ends increasing."""
    one_d = prefix.toks.ndim == prefix.ends.ndim == prefix.scored.ndim == 1
    return (
        one_d and len(prefix.toks) == len(prefix.scored) == prefix.n_tokens and bool((np.diff(prefix.ends, prepend=0) > 0).all())
    )


class GeneratedCache:
    """Prefixes of one source's documents, per seed, under ``directory``."""

    def __init__(self, directory: str | Path, key: str, tokenizer_hash: str, vocab_size: int | None = None):
        """``vocab_size``: the tokenizer's; a cached prefix with a token id outside ``[0, vocab_size)`` is
        not used (it would end training in an embedding lookup out of range)."""
        self.directory = Path(directory)
        self.digest = hashlib.sha256(f"{key}\0{tokenizer_hash}".encode()).hexdigest()[:20]
        self.vocab_size = vocab_size
        self.writable = True

    def path(self, seed: int) -> Path:
        return self.directory / f"{self.digest}-{int(seed)}.npz"

    def load(self, seed: int) -> GeneratedPrefix | None:
        """The cached prefix for ``seed``, or None when there is none or it cannot be read."""
        p = self.path(seed)
        if self.directory.is_symlink() or p.is_symlink() or not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                prefix = GeneratedPrefix(z["toks"].astype(np.int64), z["ends"].astype(np.int64), z["scored"].astype(bool))
        except UNREADABLE:
            return None
        if not _consistent(prefix):
            return None
        if self.vocab_size is not None and len(prefix.toks) and (prefix.toks.min() < 0 or prefix.toks.max() >= self.vocab_size):
            warnings.warn(
                f"{p}: cached documents hold token ids outside the vocabulary of {self.vocab_size}; regenerating them",
                stacklevel=2,
            )
            return None
        return prefix

    def cached_tokens(self, seed: int) -> int:
        """Tokens in the cached prefix for ``seed`` (0 if none or unreadable); reads only its ``ends``."""
        try:
            with np.load(self.path(seed), allow_pickle=False) as z:
                ends = z["ends"]
            return max(0, int(ends[-1])) if ends.ndim == 1 and len(ends) else 0
        except UNREADABLE:
            return 0

    def save(self, seed: int, prefix: GeneratedPrefix) -> bool:
        """Write ``prefix`` unless the cache already holds as many tokens; True if written."""
        if not self.writable:
            return False
        if prefix.n_tokens <= self.cached_tokens(seed) and self.load(seed) is not None:  # a valid, longer one stays
            return False
        try:
            if self.directory.is_symlink():
                raise OSError(f"{self.directory} is a symbolic link; archpool does not write through links")
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".npz")
            try:
                with os.fdopen(fd, "wb") as f:
                    np.savez(f, toks=prefix.toks.astype(np.int32), ends=prefix.ends, scored=prefix.scored)
                os.replace(tmp, self.path(seed))
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as e:
            self.writable = False
            warnings.warn(f"{self.directory}: generated documents are not cached ({e})", stacklevel=2)
            return False
        return True
