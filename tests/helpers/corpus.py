"""Tiny deterministic corpora (random words, fixed sentences, paragraphs) and the data sections that
prepare them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "have",
    "not",
    "model",
    "token",
    "data",
    "stream",
    "context",
    "window",
    "attention",
    "layer",
    "norm",
    "head",
    "query",
    "key",
    "value",
    "long",
    "short",
    "river",
    "mountain",
    "quiet",
    "green",
    "house",
    "light",
    "morning",
    "story",
    "reader",
    "letter",
    "garden",
    "winter",
]

FEW_WORDS = [
    "the",
    "a",
    "river",
    "stone",
    "light",
    "morning",
    "window",
    "letter",
    "garden",
    "winter",
    "reader",
    "story",
    "quiet",
    "green",
    "long",
    "short",
    "house",
]

SENTENCES = [
    "the cat sat on the mat.",
    "a river runs by the stone house.",
    "the reader holds a long letter.",
    "green light falls on the quiet garden.",
    "the winter morning is short.",
    "a story ends at the window.",
]


def make_docs(n: int, seed: int = 0, long_every: int = 7, long_words: int = 900) -> list[str]:
    """Deterministic pseudo-English documents; every ``long_every``-th one is long."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        n_words = long_words if i % long_every == 0 else rng.randint(20, 120)
        paras = []
        while n_words > 0:
            k = min(n_words, rng.randint(15, 60))
            paras.append(" ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + ".")
            n_words -= k
        docs.append(f"Document {i}.\n\n" + "\n\n".join(paras) + "\n")
    return docs


def random_docs(
    n_docs: int, vocab: Sequence[str], lengths: tuple[int, int], long_every: int = 0, long_length: int = 0, seed: int = 0
) -> list[str]:
    """``n_docs`` documents of ``vocab`` items drawn at random, ``lengths`` items long (inclusive range);
    every ``long_every``-th one (from the first) is ``long_length`` items long instead."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        n = long_length if long_every and i % long_every == 0 else rng.randint(*lengths)
        docs.append(" ".join(rng.choice(vocab) for _ in range(n)))
    return docs


def write_docs(directory: Path, docs: Sequence[str], name: str = "doc{:02d}.txt") -> Path:
    """One file per document (``name`` formatted with its index), each ending in a newline; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(docs):
        (directory / name.format(i)).write_text(text + "\n")
    return directory


def data_section(corpus: Path, cache: Path, **overrides: Any) -> dict[str, Any]:
    """The data section of a run that prepares ``corpus`` (a directory of text files) into ``cache``:
    a 300-token vocabulary and small held-out fractions unless ``overrides`` say otherwise."""
    section = {
        "sources": [{"kind": "files", "path": str(corpus)}],
        "vocab_size": 300,
        "tokenizer_sample_chars": 100_000,
        "max_chars": None,
        "long_doc_tokens": 256,
        "holdout_fraction": 0.05,
        "long_holdout_fraction": 0.1,
        "cache_dir": str(cache),
    }
    section.update(overrides)
    return section


def sentence_section(root: Path) -> dict[str, Any]:
    """A data section over ``root/corpus``: 30 documents of the fixed :data:`SENTENCES` in random order,
    learnable in a few dozen steps."""
    return data_section(write_docs(root / "corpus", random_docs(30, SENTENCES, (8, 30))), root / "cache")


def tiny_config(path: Path, cache: Path, **kw: Any):
    """A ``DataConfig`` that prepares the text files in ``path`` with a 400-token vocabulary."""
    from archpool.data.config import DataConfig

    section = data_section(
        path,
        cache,
        vocab_size=400,
        tokenizer_sample_chars=200_000,
        long_doc_tokens=600,
        holdout_fraction=0.1,
        long_holdout_fraction=0.2,
    )
    section.update(kw)
    return DataConfig(**section)
