"""Fixtures of the eval tests (defined in tests.helpers.tokenizers)."""

from tests.helpers.tokenizers import _one_thread, bpe, texts, wordtok  # noqa: F401
