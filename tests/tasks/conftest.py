import random

import pytest

from archpool.tasks.haystack import NOISE, pseudo_sentences
from archpool.tokenizer import train_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE trained on pseudo-text (as pools train theirs), with '>' in its text."""
    texts = [" ".join(pseudo_sentences(random.Random(i), 60)) for i in range(30)]
    return train_tokenizer(texts + [" ".join(NOISE)] * 5 + ["a > b > c = d"] * 5, 700)
