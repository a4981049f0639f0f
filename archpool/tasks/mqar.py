"""MQAR: multi-query associative recall with dense supervision, controlled distances and chains.

Keys, values and filler come from disjoint task vocabularies; every key is bound once in the
document and queried once later by repeating it (``k v``: the value is the answer), so one document
carries many scored answers (dense supervision, as Zoology's MQAR). Each query's *distance* — from
the binding to the query, in tokens — is drawn from a chosen distribution over the whole context
(``uniform`` by default), so accuracy can be binned by distance instead of RULER's fixed depths.

Bindings are *composite* when the tokenizer reserves task tokens (``data.task_tokens``): the pair
``(k, v)`` is one token ``[k=v]``, so retrieval is one content match from the query ``k`` to its
binding at any distance — the long-range step the study is about. Plain two-token bindings
(``k v``) also need a local previous-token circuit first, which tiny CPU models did not master in
up to 4,500 steps (BENCHMARKS.md); they are used when no task tokens are reserved. Chains (two hops,
``k → v → w``) are marked ``> k v w``: the first hop retrieves ``v`` from ``[k=v]``, the second
``w`` from a hop binding ``[v>w]`` (``w`` from a third vocabulary); ``min_distance`` forces every
hop beyond a distance, e.g. beyond the sliding window::

    [k1=v1] f  f f  [v1>w1] f  k2 v2 ... > k1 v1 w1 ... k1 v1  ...
    binding filler  hop binding query    chain         query

A document is built as token ids over a :class:`TaskVocab` and carries its scored positions, so
one forward pass scores every answer (teacher forcing, as Zoology scores MQAR).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from archpool.errors import ConfigError

DISTANCES = ("uniform", "powerlaw")
DEFAULT_PARAMS: dict[str, Any] = dict(
    n_keys=32,  # key vocabulary
    n_values=8,  # value vocabulary (disjoint from keys)
    pair_every=8,  # one queried pair per this many tokens of document
    distance="uniform",  # how query distances are drawn
    min_distance=2,  # every hop at least this far (tokens)
    max_distance=None,  # at most this far (default: the document length)
    chains=0.0,  # share of queries that are two-hop chains
    distractors=0.0,  # unqueried pairs per queried pair
)


@dataclass(frozen=True)
class TaskVocab:
    """Disjoint vocabularies: keys, values, hop values, filler, the chain marker and, for composite
    bindings, one token per (key, value) pair (``pairs``, row-major) and per (value, hop value)
    (``hop_pairs``)."""

    keys: tuple[int, ...]
    values: tuple[int, ...]
    hops: tuple[int, ...]
    filler: tuple[int, ...]
    marker: int
    pairs: tuple[int, ...] = ()
    hop_pairs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        groups = [
            set(self.keys),
            set(self.values),
            set(self.hops),
            set(self.filler),
            {self.marker},
            set(self.pairs),
            set(self.hop_pairs),
        ]
        if sum(map(len, groups)) != len(set().union(*groups)):
            raise ConfigError("mqar.vocab", "keys, values, hop values, filler, marker and pair tokens must be disjoint")
        for name in ("keys", "values", "hops", "filler"):
            if len(getattr(self, name)) < 2:
                raise ConfigError(f"mqar.n_{name}", f"the {name} vocabulary needs at least 2 tokens")
        if self.pairs and len(self.pairs) != len(self.keys) * len(self.values):
            raise ConfigError("mqar.vocab", "composite bindings need one pair token per (key, value)")
        if self.hop_pairs and len(self.hop_pairs) != len(self.values) * len(self.hops):
            raise ConfigError("mqar.vocab", "composite chains need one hop-pair token per (value, hop value)")

    @property
    def composite(self) -> bool:
        return bool(self.pairs)

    def pair(self, k: int, v: int) -> int:
        return self.pairs[self.keys.index(k) * len(self.values) + self.values.index(v)]

    def hop_pair(self, v: int, w: int) -> int:
        return self.hop_pairs[self.values.index(v) * len(self.hops) + self.hops.index(w)]

    @classmethod
    def from_ids(
        cls, ids: Sequence[int], n_keys: int, n_values: int, n_hops: int | None = None, n_filler: int | None = None
    ) -> TaskVocab:
        """Split an ordered pool of usable token ids: marker, keys, values, hop values, filler."""
        n_hops = n_values if n_hops is None else n_hops
        need = 1 + n_keys + n_values + n_hops + 2
        if len(ids) < need:
            raise ConfigError(
                "mqar.n_keys", f"the tokenizer has {len(ids)} usable single tokens; n_keys + 2 x n_values + 3 = {need} needed"
            )
        ids = list(ids)
        a, b, c = 1 + n_keys, 1 + n_keys + n_values, 1 + n_keys + n_values + n_hops
        filler = ids[c:] if n_filler is None else ids[c : c + n_filler]
        return cls(tuple(ids[1:a]), tuple(ids[a:b]), tuple(ids[b:c]), tuple(filler), ids[0])

    @classmethod
    def composite_from_ids(cls, task_ids: Sequence[int], filler: Sequence[int], n_keys: int, n_values: int) -> TaskVocab:
        """Composite layout over reserved task tokens: marker, keys, values, hop values, the
        key×value pair tokens, the value×hop pair tokens (hop values as many as values)."""
        need = composite_tokens_needed(n_keys, n_values)
        if len(task_ids) < need:
            raise ConfigError(
                "data.task_tokens",
                f"MQAR with n_keys={n_keys}, n_values={n_values} needs {need} reserved task "
                f"tokens (1 + K + 2V + K·V + V²); the tokenizer has {len(task_ids)}",
            )
        t = list(task_ids)
        k0, v0, h0, p0 = 1, 1 + n_keys, 1 + n_keys + n_values, 1 + n_keys + 2 * n_values
        q0 = p0 + n_keys * n_values
        return cls(
            tuple(t[k0:v0]),
            tuple(t[v0:h0]),
            tuple(t[h0:p0]),
            tuple(filler),
            t[0],
            tuple(t[p0:q0]),
            tuple(t[q0 : q0 + n_values * n_values]),
        )


def composite_tokens_needed(n_keys: int, n_values: int) -> int:
    """Reserved task tokens composite MQAR needs: marker, keys, values, hop values, K·V pairs, V·V hop pairs."""
    return 1 + n_keys + 2 * n_values + n_keys * n_values + n_values * n_values


def tokenizer_vocab(tokenizer, n_keys: int, n_values: int, n_filler: int = 128) -> TaskVocab:
    """The task vocabulary of a tokenizer.

    With reserved task tokens (``data.task_tokens``; ``tokenizer.task_ids``): the composite layout,
    filler drawn from ordinary word tokens. Otherwise plain two-token bindings over lowercase-word
    tokens with a leading space that encode back to themselves alone (documents round-trip through
    text exactly), in id order; the marker is the first punctuation token (``>`` preferred) that
    round-trips between two words."""
    words, marks = [], []
    task_ids = list(getattr(tokenizer, "task_ids", ()) or ())
    reserved = set(task_ids)
    for tid in range(_vocab_len(tokenizer)):
        if tid in reserved:
            continue
        s = tokenizer.decode([tid])
        body = s[1:] if s.startswith(" ") else s
        if s.startswith(" ") and len(body) >= 1 and body.isascii() and body.isalpha() and body.islower():
            if tokenizer.encode(s) == [tid] and tokenizer.encode(s + s) == [tid, tid]:
                words.append(tid)
        elif body in MARKERS and tokenizer.encode(s) == [tid]:
            marks.append((MARKERS.index(body), not s.startswith(" "), tid))
    if task_ids:
        return TaskVocab.composite_from_ids(task_ids, words[:n_filler], n_keys, n_values)
    if len(words) >= 2:
        a, b = words[0], words[1]
        marks = [m for m in sorted(marks) if tokenizer.encode(tokenizer.decode([a, m[2], b])) == [a, m[2], b]]
    if not marks:
        raise ConfigError(
            "mqar.marker", f"the tokenizer has no single punctuation token ({' '.join(MARKERS)}) for the chain marker"
        )
    return TaskVocab.from_ids([marks[0][2], *words], n_keys, n_values, n_values, n_filler)


MARKERS = (">", "=", "#", "@", "|", "%", ":", ";")


def _vocab_len(tokenizer) -> int:
    for attr in ("vocab_size", "get_vocab_size"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v() if callable(v) else v)
    raise ConfigError("tokenizer", "needs vocab_size to pick MQAR task tokens")


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


def resolve(params: dict[str, Any] | None) -> dict[str, Any]:
    """Defaults + overrides, validated with the field named."""
    p = dict(DEFAULT_PARAMS)
    for k, v in (params or {}).items():
        if k not in p:
            raise ConfigError(f"mqar.{k}", f"unknown parameter; allowed: {', '.join(DEFAULT_PARAMS)}")
        p[k] = v
    if p["distance"] not in DISTANCES:
        raise ConfigError("mqar.distance", f"unknown distribution {p['distance']!r}; allowed: {', '.join(DISTANCES)}")
    for k in ("n_keys", "n_values", "pair_every", "min_distance"):
        if not isinstance(p[k], int) or isinstance(p[k], bool) or p[k] < (2 if k != "min_distance" else 1):
            raise ConfigError(f"mqar.{k}", f"must be an integer >= {2 if k != 'min_distance' else 1}, got {p[k]!r}")
    if p["max_distance"] is not None and (not isinstance(p["max_distance"], int) or p["max_distance"] < p["min_distance"]):
        raise ConfigError(
            "mqar.max_distance", f"must be an integer >= min_distance={p['min_distance']}, got {p['max_distance']!r}"
        )
    for k in ("chains", "distractors"):
        if not 0 <= float(p[k]) <= (1 if k == "chains" else 8):
            raise ConfigError(f"mqar.{k}", f"out of range, got {p[k]!r}")
    return p


def _draw_distance(rng: random.Random, lo: int, hi: int, kind: str) -> int:
    if kind == "uniform":
        return rng.randint(lo, hi)
    # power law p(d) ~ 1/d (Zoology's query placement): log-uniform
    return min(hi, max(lo, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


class _Layout:
    """A document being laid out in 2-token slots (slot ``s`` = tokens ``2s, 2s + 1``)."""

    def __init__(self, rng: random.Random, length: int, vocab: TaskVocab, lo: int, hi: int):
        self.rng, self.vocab, self.lo, self.hi = rng, vocab, lo, hi
        self.slots: list[list[int] | None] = [None] * (length // 2)
        self.keys = list(vocab.keys)
        rng.shuffle(self.keys)
        self.free_values = list(vocab.values)
        self.chain_mid: set[int] = set()  # chains' middle values: bound by no other pair
        self._plain: list[int] | None = None  # values outside chain_mid (cached until a chain is placed)
        self.answers: list[tuple[int, int, int, int, int]] = []  # (pos, gold, distance, hop, chain)
        self.n_chains = 0

    def free(self, *ss: int) -> bool:
        return all(0 <= s < len(self.slots) and self.slots[s] is None for s in ss)

    def plain_values(self) -> list[int]:
        """Values a plain binding may use: any but a chain's middle (all of them if none is left)."""
        if self._plain is None:
            self._plain = [x for x in self.vocab.values if x not in self.chain_mid] or list(self.vocab.values)
        return self._plain

    def binding(self, key: int, value: int, hop: bool = False) -> list[int]:
        """A binding's slot: one composite token (+ filler) or the two tokens ``key value``."""
        v = self.vocab
        if not v.composite:
            return [key, value]
        return [v.hop_pair(key, value) if hop else v.pair(key, value), self.rng.choice(v.filler)]

    def place_query(self, d1: int) -> bool:
        """A binding and its query ``k v`` at distance ~``d1`` (even: bindings sit on the slot grid)."""
        n = len(self.slots)
        d = d1 + (d1 % 2)
        if d > 2 * (n - 1):
            d -= 2
        q = self.rng.randrange(d // 2, n)  # = randint(d // 2, n - 1), one call less (the hot loop)
        b = q - d // 2  # 0 <= b <= q < n: both slots exist
        if self.slots[q] is not None or self.slots[b] is not None:
            return False
        k = self.keys.pop()
        v = self.rng.choice(self.plain_values())
        self.slots[b] = self.binding(k, v)
        self.slots[q] = [k, v]
        self.answers.append((2 * q, v, 2 * q - 2 * b, 1, -1))
        return True

    def place_chain(self, d1: int, d2: int) -> bool:
        """``> k`` at slot q and ``v w`` at q + 1; binding ``k v`` at slot a, hop binding ``v w`` at b.
        Hop 1 is scored at token 2q + 1 (k -> v), hop 2 at token 2q + 2 (v -> w)."""
        q = self.rng.randint(1, len(self.slots) - 2)
        a = min(q - 1, q - d1 // 2)  # hop 1 distance 2q + 1 - 2a: d1 rounded up to odd
        b = min(q - 1, q + 1 - (d2 - 1) // 2)  # hop 2 distance 2q + 2 - 2b: d2 rounded up to even
        if a < 0 or b < 0 or a == b or not self.free(q, q + 1, a, b):
            return False
        dist1, dist2 = (2 * q + 1) - 2 * a, (2 * q + 2) - 2 * b
        if dist1 < self.lo or dist2 < self.lo or dist1 > self.hi + 1 or dist2 > self.hi + 2:
            return False
        k = self.keys.pop()
        v = self.free_values.pop(self.rng.randrange(len(self.free_values)))
        self.chain_mid.add(v)
        self._plain = None
        w = self.rng.choice(self.vocab.hops)
        self.slots[a] = self.binding(k, v)
        self.slots[b] = self.binding(v, w, hop=True)
        self.slots[q], self.slots[q + 1] = [self.vocab.marker, k], [v, w]
        self.answers += [(2 * q + 1, v, dist1, 1, self.n_chains), (2 * q + 2, w, dist2, 2, self.n_chains)]
        self.n_chains += 1
        return True

    def place(self, kind: str, d1: int, d2: int, attempts: int = 40) -> str:
        """``placed``; ``no room`` after ``attempts`` random tries; ``exhausted`` when no value is
        left for a chain's middle."""
        for _ in range(attempts):
            if kind == "query" and self.place_query(d1):
                return "placed"
            if kind == "chain":
                if not self.free_values:
                    return "exhausted"
                if self.place_chain(d1, d2):
                    return "placed"
        return "no room"

    def fill(self, n_distract: int) -> list[int]:
        """Unqueried distractor bindings in ``n_distract`` random empty slots, filler elsewhere."""
        plain_values = self.plain_values()
        empty = [s for s in range(len(self.slots)) if self.slots[s] is None]
        self.rng.shuffle(empty)
        for s in empty[:n_distract]:
            if not self.keys:
                break
            k, v = self.keys.pop(), self.rng.choice(plain_values)
            self.slots[s] = self.binding(k, v)
        ids: list[int] = []
        for item in self.slots:
            ids.extend(item if item is not None else (self.rng.choice(self.vocab.filler), self.rng.choice(self.vocab.filler)))
        return ids


def make_document(rng: random.Random, length: int, vocab: TaskVocab, params: dict[str, Any] | None = None) -> Document:
    """One MQAR document of exactly ``length`` tokens.

    Positions are laid out in 2-token slots. Each query gets a distance from the chosen distribution
    within [min_distance, max_distance]; its query slot is drawn uniformly among the slots that
    allow it; chains are placed first (they need four free slots) and then queries, longest distance
    first, so that long distances are not crowded out (a chain that finds no room becomes a plain
    query). Keys are unique within the document (the binding is unambiguous) and a chain's middle
    value appears in no other binding. Unused slots get unqueried distractor bindings (if asked) and
    then filler tokens.
    """
    p = resolve(params)
    if length < 8:
        raise ConfigError("length", f"an MQAR document needs at least 8 tokens, got {length}")
    n_slots = length // 2
    lo = p["min_distance"]
    hi = min(p["max_distance"] or length, 2 * (n_slots - 1))
    if lo > hi:
        raise ConfigError("length", f"MQAR at length {length}: min_distance={lo} leaves no room")
    layout = _Layout(rng, length, vocab, lo, hi)
    n_queries = min(max(1, length // p["pair_every"]), len(vocab.keys), n_slots // 2)
    n_chains = sum(rng.random() < float(p["chains"]) for _ in range(n_queries)) if p["chains"] else 0

    def draw() -> int:
        return _draw_distance(rng, lo, hi, p["distance"])

    plans = [("chain", draw(), draw()) for _ in range(n_chains)]
    plans += [("query", draw(), 0) for _ in range(n_queries - n_chains)]
    plans.sort(key=lambda t: (t[0] != "chain", -max(t[1], t[2])))
    i = 0
    while i < len(plans) and layout.keys:
        kind, d1, d2 = plans[i]
        i += 1
        if layout.place(kind, d1, d2) == "no room" and kind == "chain":
            plans.append(("query", d1, 0))  # a chain that finds no room becomes a plain query
    ids = layout.fill(int(round(float(p["distractors"]) * n_queries)))
    if len(ids) < length:
        ids.append(rng.choice(vocab.filler))
    return Document(ids, [Answer(*a) for a in sorted(layout.answers)])
