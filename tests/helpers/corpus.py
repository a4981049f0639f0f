"""Helpers for the data-stage tests: tiny deterministic documents and configs."""

import random

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


def tiny_config(path, cache, **kw):
    from archpool.data.config import DataConfig

    base = dict(
        sources=[{"kind": "files", "path": str(path)}],
        vocab_size=400,
        tokenizer_sample_chars=200_000,
        max_chars=None,
        long_doc_tokens=600,
        holdout_fraction=0.1,
        long_holdout_fraction=0.2,
        cache_dir=str(cache),
    )
    base.update(kw)
    return DataConfig(**base)
