"""Dense task families: token documents with many scored answers each, one registry entry per family.

A dense document is token ids and its answers: an :class:`Answer` says that at input position ``pos``
the next token must be ``gold``, read from a binding ``distance`` tokens back. The answers are the
scored positions of every stage: training flags each answer's gold token as a target
(:attr:`Document.scored`), evaluation scores the model's prediction at each answer's position and
bins it by distance (``archpool.eval.dense``). A family's generator decides where its answers are;
the stages read the family from its entry and name none.

A *family* is one :class:`DenseFamily` entry, defined in the family's own module next to its typed
config and its generator (``mqar.FAMILY``, ``dense_kv.FAMILY``). Its tasks are registered in
``catalogue.py`` with ``registry.register_dense_task`` (one line each: the family, a name and a
config of the family), and a task's name is the prefix of its score columns (``<task>_acc@L[d>128]``,
``archpool.columns.dense_columns``). Every dense config has a scoring field ``buckets``: the upper
edges of the distance buckets its scores are binned by (``null``: powers of two below the length).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from archpool.errors import ConfigError
from archpool.tasks.base import TokenizerLike
from archpool.tasks.params import TaskConfig

C = TypeVar("C", bound=TaskConfig)
V = TypeVar("V")

# every statistic a dense score can have: ``<task>_<stat>@L`` (``archpool.columns.dense_columns``)
DENSE_SUFFIXES = ("acc", "lp", "chain", "hop2_acc")


@dataclass
class Answer:
    """One scored position: at input ``pos`` the next token must be ``gold``."""

    pos: int
    gold: int
    distance: int  # tokens from the binding's key (or hop key) to the query token
    hop: int  # 1 = single query or a chain's first hop, 2 = a chain's second hop
    chain: int  # index of the chain this answer belongs to, -1 for plain queries


@dataclass
class Document:
    ids: list[int]
    answers: list[Answer] = field(default_factory=list)

    @property
    def n_chains(self) -> int:
        return len({a.chain for a in self.answers if a.chain >= 0})

    @property
    def scored(self) -> list[bool]:
        """Per token: is it a training target (an answer)? Keys, first-seen values and filler are
        random, so only answers carry a learnable signal (dense supervision, as in Zoology)."""
        flags = [False] * len(self.ids)
        for a in self.answers:
            flags[a.pos + 1] = True
        return flags


@dataclass(frozen=True)
class DenseFamily(Generic[C, V]):
    """One family of dense tasks: what training and evaluation need to make and score its documents.

    ``make_document(rng, length, vocab, config)`` makes one document of exactly ``length`` tokens
    (a ``ConfigError`` when the length cannot hold one); ``vocab(tokenizer, config)`` the task
    vocabulary it draws from (cached per tokenizer and ``vocab_key(config)``); ``min_length(config)``
    the length a training document is raised to; ``choices(config)`` how many tokens an answer is one
    of (a guess is right with probability ``1 / choices``); ``stats`` the statistics its scores have
    (columns ``<task>_<stat>@L``, among :data:`DENSE_SUFFIXES`)."""

    name: str
    config: type[C]
    make_document: Callable[[random.Random, int, V, C], Document]
    vocab: Callable[[TokenizerLike, C], V]
    vocab_key: Callable[[C], tuple[Hashable, ...]]
    min_length: Callable[[C], int]
    choices: Callable[[C], int]
    stats: tuple[str, ...] = ("acc", "lp")

    def __post_init__(self) -> None:
        scoring = {f.name: f.metadata.get("scoring") for f in dataclasses.fields(self.config)}
        if scoring.get("buckets") is not True:
            raise ConfigError(f"{self.name}.buckets", "a dense config declares its distance buckets as a scoring field")
        unknown = [s for s in self.stats if s not in DENSE_SUFFIXES]
        if "acc" not in self.stats or unknown:
            raise ConfigError(f"{self.name}.stats", f"needs 'acc', each among {', '.join(DENSE_SUFFIXES)}; got {self.stats}")

    def buckets(self, config: C) -> list[int] | None:
        """The distance bucket edges of ``config`` (its scoring field ``buckets``)."""
        edges: list[int] | None = config.to_dict()["buckets"]
        return edges
