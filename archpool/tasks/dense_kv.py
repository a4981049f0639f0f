"""Dense key–value recall whose query distances follow a chosen law: ``uniform``, ``powerlaw`` or ``fixed``.

A document binds keys to values and queries each key once, later, by repeating it (``k v``: the
value is the answer), as MQAR does; what this family controls is the law of the binding–query
distances. ``uniform`` draws them uniformly in ``[min_distance, max_distance]``; ``powerlaw`` with
density ``p(d) ∝ d^-alpha`` there (``alpha = 1``: log-uniform, Zoology's query placement; larger
``alpha``: more short distances); ``fixed`` puts every query ``fixed_distance`` tokens after its
binding, a probe of one distance. Keys are bound once per document (the binding is unambiguous);
everything between the pairs is filler::

    [k1=v1] f  f f  [k2=v2] f  k1 v1  f f  k2 v2
    binding         binding    query        query

The document is laid out in 2-token slots, so distances are even (an odd one is rounded up). A
query's slot is drawn uniformly among those its distance allows and tried again when taken; queries
are placed longest distance first, so that short ones do not crowd the long ones out. Bindings are
composite tokens ``[k=v]`` when the tokenizer reserves task tokens (``data.task_tokens``) and the two
tokens ``k v`` otherwise, over MQAR's task vocabulary (:func:`archpool.tasks.mqar.tokenizer_vocab`);
:func:`archpool.tasks.mqar.answer_errors` checks a document's answers against its ids.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import ClassVar

from archpool.errors import ConfigError
from archpool.tasks.dense import Answer, DenseFamily, Document
from archpool.tasks.mqar import MAX_KEYS, KeyValueRules, TaskVocab, config_vocab, vocab_key
from archpool.tasks.params import MAX_LENGTH, Param, TaskConfig, count, param

LAWS = ("uniform", "powerlaw", "fixed")
ATTEMPTS = 40  # random query slots tried per query before it is left out


@dataclass(frozen=True)
class DenseKvConfig(KeyValueRules, TaskConfig):
    """The parameters of dense key–value recall (``dense_kv``)."""

    PATH: ClassVar[str] = "dense_kv"

    n_keys: int = param(32, count(2, MAX_KEYS))  # key vocabulary (keys are bound once per document)
    n_values: int = param(8, count(2, MAX_KEYS))  # value vocabulary (disjoint from keys)
    pair_every: int = param(8, count(2, MAX_LENGTH))  # one queried pair per this many tokens of document
    law: str = param("uniform", Param("choice", choices=LAWS))  # how query distances are drawn
    alpha: float = param(1.0, Param("float", 0, 4))  # the power law's exponent: p(d) ∝ d^-alpha
    fixed_distance: int = param(64, count(2, MAX_LENGTH))  # the fixed law's distance (tokens)
    min_distance: int = param(2, count(1, MAX_LENGTH))  # uniform and power law: at least this far (tokens)
    # uniform and power law: at most this far (default: the document length)
    max_distance: int | None = param(None, count(1, MAX_LENGTH, optional=True))
    # distance bucket edges of the scores (tokens; default: powers of two below the length)
    buckets: list[int] | None = param(None, Param("edges", 1, MAX_LENGTH, optional=True), scoring=True)  # noqa: RUF009


def min_length(config: DenseKvConfig) -> int:
    """The shortest document whose slots hold the shortest distance the config asks for (at least 8 tokens)."""
    need = config.fixed_distance if config.law == "fixed" else config.min_distance
    return max(8, 2 * ((need + 1) // 2) + 2)


def draw_distance(rng: random.Random, lo: int, hi: int, config: DenseKvConfig) -> int:
    """One distance in ``[lo, hi]`` from the config's law (``fixed``: ``fixed_distance``)."""
    if config.law == "fixed":
        return config.fixed_distance
    if config.law == "uniform":
        return rng.randint(lo, hi)
    # p(x) ∝ x^-alpha on [lo, hi + 1) by its inverse CDF, floored: P(d) ∝ the density's mass on [d, d + 1)
    u, a = rng.random(), 1.0 - config.alpha
    if abs(a) < 1e-9:
        x = math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))
    else:
        x = (lo**a + u * ((hi + 1) ** a - lo**a)) ** (1 / a)
    return min(hi, max(lo, int(x)))


def make_document(rng: random.Random, length: int, vocab: TaskVocab, config: DenseKvConfig) -> Document:
    """One document of exactly ``length`` tokens: ``min(length // pair_every, length // 4, n_keys)``
    queries, each at a distance drawn from the config's law (a query that finds no free slot pair in
    ``ATTEMPTS`` tries is left out)."""
    n_slots = length // 2
    room = 2 * (n_slots - 1)  # the longest distance the slots allow
    if length < min_length(config):
        raise ConfigError(
            "length", f"a dense_kv document of this config needs at least {min_length(config)} tokens, got {length}"
        )
    lo, hi = config.min_distance, min(config.max_distance or length, room)  # lo <= hi at min_length and above
    keys = list(vocab.keys)
    rng.shuffle(keys)
    n_queries = min(max(1, length // config.pair_every), n_slots // 2, len(keys))
    spans = sorted((max(1, (draw_distance(rng, lo, hi, config) + 1) // 2) for _ in range(n_queries)), reverse=True)
    slots: list[list[int] | None] = [None] * n_slots
    answers: list[Answer] = []
    for span in spans:
        for _ in range(ATTEMPTS):
            q = rng.randrange(span, n_slots)
            b = q - span
            if slots[q] is None and slots[b] is None:
                k, v = keys.pop(), rng.choice(vocab.values)
                slots[b] = [vocab.pair(k, v), rng.choice(vocab.filler)] if vocab.composite else [k, v]
                slots[q] = [k, v]
                answers.append(Answer(2 * q, v, 2 * span, 1, -1))
                break
    ids: list[int] = []
    for item in slots:
        ids.extend(item if item is not None else (rng.choice(vocab.filler), rng.choice(vocab.filler)))
    if len(ids) < length:
        ids.append(rng.choice(vocab.filler))
    return Document(ids, sorted(answers, key=lambda a: a.pos))


FAMILY: DenseFamily[DenseKvConfig, TaskVocab] = DenseFamily(
    "dense_kv",
    DenseKvConfig,
    make_document,
    vocab=config_vocab,
    vocab_key=vocab_key,
    min_length=min_length,
    choices=lambda config: config.n_values,
)
