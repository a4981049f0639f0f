"""Fixtures of the task tests (``bpe``, ``texts``, ``wordtok`` are defined in tests.helpers.tokenizers)."""

import pytest

from tests.helpers.tokenizers import _one_thread, bpe, pseudo_bpe, pseudo_texts, texts, wordtok  # noqa: F401


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE trained on pseudo-text (as pools train theirs), with '>' in its text."""
    return pseudo_bpe(pseudo_texts(), ["a > b > c = d"] * 5)
