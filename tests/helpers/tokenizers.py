"""Tokenizers for the task and eval tests: a byte-level BPE trained on pseudo-text (as pools train theirs)
and a word-level tokenizer over the kv_recall vocabulary, with the fixtures that build them."""

from __future__ import annotations

import random

import pytest
import torch

from archpool.tasks.haystack import NOISE, pseudo_sentences
from archpool.tokenizer import train_tokenizer


def pseudo_texts() -> list[str]:
    """30 documents of 60 pseudo-sentences each."""
    return [" ".join(pseudo_sentences(random.Random(i), 60)) for i in range(30)]


def pseudo_bpe(texts: list[str], extra: list[str] | None = None):
    """A 700-token byte-level BPE trained on ``texts``, the noise sentences and ``extra``."""
    return train_tokenizer(texts + [" ".join(NOISE)] * 5 + (extra or []), 700)


def word_tokenizer():
    """A word-level tokenizer over the kv_recall vocabulary (each key, digit and noise word = 1 token)."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers

    from archpool.tasks import words as W
    from archpool.tokenizer import Tokenizer

    vocab_words = ["<|bos|>", "<|eos|>", "<|pad|>", "[UNK]", "kv:", "q:", "."] + W.SHORT_KEYS + W.DIGITS
    for s in NOISE:
        vocab_words += s.replace(".", " .").split()
    vocab = {}
    for w in vocab_words:
        vocab.setdefault(w, len(vocab))
    hf = HF(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Split(" ", "removed")
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(".", "isolated")])
    hf.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return Tokenizer(hf)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # 2 shared cores: one intra-op thread is several times faster than two under contention
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def texts():
    """:func:`pseudo_texts`."""
    return pseudo_texts()


@pytest.fixture(scope="session")
def bpe(texts):
    """:func:`pseudo_bpe` over the ``texts`` fixture."""
    return pseudo_bpe(texts)


@pytest.fixture(scope="session")
def wordtok():
    """:func:`word_tokenizer`."""
    return word_tokenizer()
