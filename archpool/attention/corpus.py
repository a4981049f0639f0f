"""Held-out text for the attention statistics, in the analysed model's tokens.

Text is the held-out validation split (``val_short`` + ``val_long``) of a data store, or plain-text
files. An HF model whose tokenizer differs from the store's gets the documents decoded and re-encoded
with its own tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from archpool.errors import DataError


@dataclass
class Corpus:
    """Held-out documents in the analysed model's tokens."""

    docs: list[np.ndarray]
    bos_id: int  # prepended in the "BOS" variant
    sep_id: int | None = None  # between packed documents (default: bos_id); the EOS for archpool stores
    special_ids: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def first_tokens(self, T: int, n: int, bos: bool) -> tuple[list[np.ndarray], bool]:
        """``n`` samples of length ``T``: the first tokens of documents at least that long (with a
        BOS the first T − 1); packed documents (separator between them) when too few are that long."""
        need = T - 1 if bos else T
        picked = [d[:need] for d in self.docs if len(d) >= need][:n]
        packed = len(picked) < n
        if packed:
            stream = self.stream()
            picked = [stream[i * need : (i + 1) * need] for i in range(min(n, len(stream) // need))]
            if not picked:
                raise DataError(f"held-out text has {len(stream)} tokens; a {T}-token sample needs more")
        if bos:
            picked = [np.concatenate([[self.bos_id], p]) for p in picked]
        return picked, packed

    def stream(self) -> np.ndarray:
        parts = []
        for d in self.docs:
            parts.extend([d, np.array([self.bos_id if self.sep_id is None else self.sep_id], dtype=d.dtype)])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def corpus_from_store(store_path: str | Path, tokenizer_dir: str | Path | None = None, max_docs: int = 2000) -> Corpus:
    """The store's validation documents; re-encoded when ``tokenizer_dir`` holds a different tokenizer."""
    from archpool.data.store import Store

    store = Store(store_path)
    idx = store.docs("val_short", "val_long")
    if len(idx) == 0:
        raise DataError(f"{store.path}: no held-out documents (val_short / val_long) in this store")
    idx = idx[:max_docs]
    tok = store.tokenizer
    info = {
        "source": "store",
        "store": str(store.path),
        "store_key": store.key,
        "split": ["val_short", "val_long"],
        "n_docs": len(idx),
        "tokenizer_hash": store.tokenizer_hash,
    }
    other = None
    if tokenizer_dir is not None and (Path(tokenizer_dir) / "tokenizer.json").is_file():
        from archpool.tokenizer import Tokenizer

        other = Tokenizer.load(tokenizer_dir)
        if other.hash == store.tokenizer_hash:
            other = None
    if other is None:
        docs = [np.asarray(store.doc(int(i)), dtype=np.int64) for i in idx]
        specials = sorted({tok.bos_id, tok.eos_id, tok.pad_id})
        return Corpus(docs, int(store.eos_id), int(store.eos_id), specials, info)
    docs = [np.asarray(ids, dtype=np.int64) for ids in other.encode_documents([store.text(int(i)) for i in idx])]
    info.update(reencoded=True, tokenizer_hash=other.hash)
    return Corpus(docs, int(other.eos_id), int(other.eos_id), sorted({other.bos_id, other.eos_id, other.pad_id}), info)


def corpus_from_texts(paths: Sequence[str | Path], tokenizer_dir: str | Path) -> Corpus:
    """Plain-text files, one document each, in the tokenizer found in ``tokenizer_dir``."""
    from archpool.tokenizer import Tokenizer

    tok = Tokenizer.load(tokenizer_dir)
    texts = [Path(p).read_text(errors="replace") for p in paths]
    docs = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_documents(texts)]
    info = {"source": "files", "files": [str(p) for p in paths], "n_docs": len(docs), "tokenizer_hash": tok.hash}
    return Corpus(docs, int(tok.eos_id), int(tok.eos_id), sorted({tok.bos_id, tok.eos_id, tok.pad_id}), info)
