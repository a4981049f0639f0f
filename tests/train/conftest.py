"""Fixtures shared by the train-stage tests."""

from __future__ import annotations

import pytest

from tests.helpers import corpus


@pytest.fixture(scope="module")
def data_section(tmp_path_factory):
    """A data section over 40 documents of a 17-word vocabulary (every fifth one 1,500 words long)."""
    docs = corpus.random_docs(40, corpus.FEW_WORDS, (40, 200), long_every=5, long_length=1500)
    root = corpus.write_docs(tmp_path_factory.mktemp("corpus"), docs)
    return corpus.data_section(root, tmp_path_factory.mktemp("cache"))
