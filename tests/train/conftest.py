"""Fixtures shared by the train-stage tests."""

from __future__ import annotations

import random

import pytest

WORDS = [
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


@pytest.fixture(scope="module")
def data_section(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for i in range(40):
        n = 1500 if i % 5 == 0 else rng.randint(40, 200)
        (root / f"doc{i:02d}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(n)) + "\n")
    return {
        "sources": [{"kind": "files", "path": str(root)}],
        "vocab_size": 300,
        "tokenizer_sample_chars": 100_000,
        "max_chars": None,
        "long_doc_tokens": 256,
        "holdout_fraction": 0.05,
        "long_holdout_fraction": 0.1,
        "cache_dir": str(tmp_path_factory.mktemp("cache")),
    }
