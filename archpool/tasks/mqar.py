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

With ``rebind`` a key may be bound again once its query has passed, so the number of queries grows
with the document (``length // pair_every``, at most one per two slots) instead of stopping at
``n_keys``; every query's answer is the most recent binding of its key, and the key's earlier
bindings (another value each time) are hard distractors. Each key's binding–query spans then share
its timeline: with distances spread uniformly over the context a key holds about three of them, so
more queries need short distances (``powerlaw``, ``max_distance``) or more keys. Chain keys and
chains' hop bindings are never rebound. :func:`answer_errors` checks a document's answers against
its ids.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from archpool.errors import ConfigError
from archpool.tasks.base import TokenizerLike
from archpool.tasks.dense import Answer, DenseFamily, Document
from archpool.tasks.params import MAX_LENGTH, Param, TaskConfig, count, param

DISTANCES = ("uniform", "powerlaw")
MAX_KEYS = 4096  # keys (and values) of one document's vocabulary: rebind keeps one slot map per key


class KeyValueRules:
    """The rules a key-value task's config shares (MQAR, dense_kv): queries reach at least as far as
    ``min_distance``, and the reserved task tokens hold its composite vocabulary."""

    PATH: ClassVar[str]
    n_keys: int
    n_values: int
    min_distance: int
    max_distance: int | None

    def validate(self) -> None:
        """Queries reach at least as far as ``min_distance``."""
        if self.max_distance is not None and self.max_distance < self.min_distance:
            raise ConfigError(
                f"{self.PATH}.max_distance", f"must be an integer >= min_distance={self.min_distance}, got {self.max_distance!r}"
            )

    def reserved_tokens_error(self, task_tokens: int) -> str | None:
        """Why ``task_tokens`` reserved task tokens cannot hold this config's composite vocabulary
        (``composite_tokens_needed`` of them); None when they can or none are reserved."""
        need = composite_tokens_needed(self.n_keys, self.n_values)
        if task_tokens and need > task_tokens:
            return (
                f"n_keys={self.n_keys}, n_values={self.n_values} need {need} reserved task tokens "
                f"(1 + K + 2V + K·V + V²); data.task_tokens is {task_tokens}"
            )
        return None


@dataclass(frozen=True)
class MqarConfig(KeyValueRules, TaskConfig):
    """MQAR's parameters (``mqar``; ``mqar_rebind`` is ``rebind=True``, ``mqar_chain`` ``chains=1.0``)."""

    PATH: ClassVar[str] = "mqar"

    n_keys: int = param(32, count(2, MAX_KEYS))  # key vocabulary
    n_values: int = param(8, count(2, MAX_KEYS))  # value vocabulary (disjoint from keys)
    pair_every: int = param(8, count(2, MAX_LENGTH))  # one queried pair per this many tokens of document
    distance: str = param("uniform", Param("choice", choices=DISTANCES))  # how query distances are drawn
    min_distance: int = param(2, count(1, MAX_LENGTH))  # every hop at least this far (tokens)
    # at most this far (default: the document length)
    max_distance: int | None = param(None, count(1, MAX_LENGTH, optional=True))
    chains: float = param(0.0, Param("float", 0, 1))  # share of queries that are two-hop chains
    distractors: float = param(0.0, Param("float", 0, 8))  # unqueried pairs per queried pair
    # keys are bound again after their query: queries grow with length, earlier bindings distract
    rebind: bool = param(False, Param("bool"))
    # distance bucket edges of the scores (tokens; default: powers of two below the length)
    buckets: list[int] | None = param(None, Param("edges", 1, MAX_LENGTH, optional=True), scoring=True)  # noqa: RUF009


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


def tokenizer_vocab(tokenizer: TokenizerLike, n_keys: int, n_values: int, n_filler: int = 128) -> TaskVocab:
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


def _vocab_len(tokenizer: object) -> int:
    for attr in ("vocab_size", "get_vocab_size"):
        v = getattr(tokenizer, attr, None)
        if v is not None:
            return int(v() if callable(v) else v)
    raise ConfigError("tokenizer", "needs vocab_size to pick MQAR task tokens")


def answer_errors(doc: Document, vocab: TaskVocab) -> list[str]:
    """What is wrong with a document's answers (nothing when the list is empty).

    For every answer: the gold token follows the scored position, and the most recent binding of the
    queried token before it binds that token to the gold at the answer's distance. A binding of key
    ``k`` is a composite token ``[k=·]`` or, for plain bindings, ``k`` followed by a value (a plain
    query ``k v`` reads the same and counts); for a chain's second hop (query ``v``) it is a hop
    binding ``[v>·]``, or ``v`` followed by a hop value."""
    ids, errors = doc.ids, []
    decode: dict[int, tuple[int, int, int]] = {}  # composite token -> (hop, key, value)
    for i, t in enumerate(vocab.pairs):
        decode[t] = (1, vocab.keys[i // len(vocab.values)], vocab.values[i % len(vocab.values)])
    for i, t in enumerate(vocab.hop_pairs):
        decode[t] = (2, vocab.values[i // len(vocab.hops)], vocab.hops[i % len(vocab.hops)])
    targets = (set(vocab.values), set(vocab.hops))
    for a in doc.answers:
        if not 0 <= a.pos < len(ids) - 1 or ids[a.pos + 1] != a.gold:
            errors.append(f"answer at {a.pos}: the next token is not the gold {a.gold}")
            continue
        q, found = ids[a.pos], None
        for j in range(a.pos - 1, -1, -1):
            t = ids[j]
            if vocab.composite:
                hit = decode.get(t)
                if hit is not None and hit[:2] == (a.hop, q):
                    found = (j, hit[2])
                    break
            elif t == q and ids[j + 1] in targets[a.hop - 1]:
                found = (j, ids[j + 1])
                break
        if found is None:
            errors.append(f"answer at {a.pos}: token {q} has no binding before its query")
        elif found[1] != a.gold:
            errors.append(f"answer at {a.pos}: the most recent binding of {q} (at {found[0]}) holds {found[1]}, not {a.gold}")
        elif a.pos - found[0] != a.distance:
            errors.append(f"answer at {a.pos}: distance {a.distance}, but the binding is {a.pos - found[0]} tokens back")
    return errors


def _shorter(gap: list[Any]) -> int:
    """Sort key of a free stretch ``[first, last, ...]``: longest first."""
    shorter: int = gap[0] - gap[1]
    return shorter


def _nth_bit(m: int, r: int) -> int:
    """Position of the ``r``-th (from 0) set bit of ``m``."""
    lo, hi = 0, m.bit_length()  # the bit is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (m & ((1 << mid) - 1)).bit_count() > r:
            hi = mid
        else:
            lo = mid
    return lo


def _draw_distance(rng: random.Random, lo: int, hi: int, kind: str) -> int:
    if kind == "uniform":
        return rng.randint(lo, hi)
    # power law p(d) ~ 1/d (Zoology's query placement): log-uniform
    return min(hi, max(lo, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


class _Layout:
    """A document being laid out in 2-token slots (slot ``s`` = tokens ``2s, 2s + 1``)."""

    def __init__(self, rng: random.Random, length: int, vocab: TaskVocab, lo: int, hi: int, rebind: bool = False):
        self.rng, self.vocab, self.lo, self.hi = rng, vocab, lo, hi
        self.slots: list[list[int] | None] = [None] * (length // 2)
        self.keys = list(vocab.keys)
        rng.shuffle(self.keys)
        self.free_values = list(vocab.values)
        self.chain_mid: set[int] = set()  # chains' middle values: bound by no other pair
        self._plain: list[int] | None = None  # values outside chain_mid (cached until a chain is placed)
        self.answers: list[tuple[int, int, int, int, int]] = []  # (pos, gold, distance, hop, chain)
        self.n_chains = 0
        self.rebind = rebind
        if rebind:
            # per key, the free stretches of its timeline, longest first: [first slot, last slot, value bound just
            # before, value bound just after] (None at the document's ends); a binding–query pair
            # of the key occupies one stretch from its binding to its query
            n = len(self.slots)
            self.gaps: dict[int, list[list[Any]]] = {k: [[0, n - 1, None, None]] for k in self.keys}
            self.longest: dict[int, int] = {k: n for k in self.keys}  # slots in each key's longest stretch
            self.taken: dict[int, bytearray] = {k: bytearray(n) for k in self.keys}  # 1 = not free for the key
            self.used = 0  # slots in use, as bits (bit s: slot s)
            self.guesses = 16

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

    def span(self, d1: int) -> int:
        """Slots from a binding to its query for a drawn distance ``d1`` (even: bindings sit on the slot grid)."""
        d = d1 + (d1 % 2)
        return (d if d <= 2 * (len(self.slots) - 1) else d - 2) // 2

    def place_query(self, d1: int) -> bool:
        """A binding and its query ``k v`` at distance ~``d1``."""
        n = len(self.slots)
        d = 2 * self.span(d1)
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
        if self.rebind:  # the chain's key is bound once: out of the rebound keys' timelines
            self.used |= (1 << a) | (1 << b) | (3 << q)
            del self.gaps[k], self.longest[k], self.taken[k]
        self.answers += [(2 * q + 1, v, dist1, 1, self.n_chains), (2 * q + 2, w, dist2, 2, self.n_chains)]
        self.n_chains += 1
        return True

    def place(self, kind: str, d1: int, d2: int, attempts: int = 40) -> str:
        """``placed``; ``no room`` after ``attempts`` random tries; ``exhausted`` when no value is
        left for a chain's middle."""
        if kind == "query" and self.rebind:
            return self.place_rebound(self.span(d1))
        for _ in range(attempts):
            if kind == "query" and self.place_query(d1):
                return "placed"
            if kind == "chain":
                if not self.free_values:
                    return "exhausted"
                if self.place_chain(d1, d2):
                    return "placed"
        return "no room"

    def pick_value(self, before: int | None, after: int | None) -> int | None:
        """A plain binding's value, unlike the key's bindings just ``before`` and ``after`` it (None if none is)."""
        plain = self.plain_values()
        v = self.rng.choice(plain)
        if v in (before, after):
            options = [x for x in plain if x != before and x != after]
            if not options:
                return None
            v = self.rng.choice(options)
        return v

    def occupy(self, k: int, gap: list[Any], b: int, q: int, v: int) -> None:
        """Key ``k`` is bound to ``v`` from slot ``b`` to slot ``q`` inside its free stretch ``gap``."""
        gaps = self.gaps[k]
        del gaps[gaps.index(gap)]
        if gap[0] < b:
            bisect.insort(gaps, [gap[0], b - 1, gap[2], v], key=_shorter)
        if q < gap[1]:
            bisect.insort(gaps, [q + 1, gap[1], v, gap[3]], key=_shorter)
        self.longest[k] = gaps[0][1] - gaps[0][0] + 1 if gaps else 0
        self.taken[k][b : q + 1] = b"\1" * (q + 1 - b)

    def put_rebound(self, k: int, gap: list[Any], b: int, q: int) -> bool:
        """Bind ``k`` at slot ``b`` and query it at ``q`` (inside the key's free stretch ``gap``), with
        a value unlike the key's neighbouring bindings; False if no value is."""
        v = self.pick_value(gap[2], gap[3])
        if v is None:
            return False
        self.slots[b] = self.binding(k, v)
        self.slots[q] = [k, v]
        self.used |= (1 << b) | (1 << q)
        self.occupy(k, gap, b, q, v)
        self.answers.append((2 * q, v, 2 * (q - b), 1, -1))
        return True

    def place_rebound(self, span: int) -> str:
        """A binding and its query ``span`` slots apart (rebind mode), ``no room`` if none fits.

        The (key, query slot) pair is drawn uniformly among those whose binding–query stretch is
        free in the key's timeline and whose two slots are empty: first by guessing (up to
        ``self.guesses`` uniform draws over all pairs, the first that qualifies kept; fewer while
        guessing keeps failing), then, in crowded documents, by counting the qualifying pairs of
        each free stretch (slot bit masks) and drawing one of them: the same distribution either way."""
        slots, rng, keys, n = self.slots, self.rng, self.keys, len(self.slots)
        if span >= n or max(self.longest.values()) <= span:
            return "no room"
        random_, n_q, n_k = rng.random, n - span, len(keys)
        for _ in range(self.guesses):
            q = span + int(random_() * n_q)
            k = keys[int(random_() * n_k)]
            b = q - span
            if slots[q] is None and slots[b] is None and self.taken[k].find(1, b, q + 1) < 0:
                gap = next(g for g in self.gaps[k] if g[0] <= b <= g[1])
                if self.put_rebound(k, gap, b, q):
                    self.guesses = min(16, 2 * self.guesses)
                    return "placed"
        self.guesses = max(1, self.guesses // 2)
        used = self.used
        open_ = ~(used | (used << span))  # bit q: slots q and q - span are both empty
        counted, total, gaps = [], 0, self.gaps
        for k in keys:
            for g in gaps[k]:  # longest first
                if g[1] - g[0] < span:
                    break
                m = open_ & ((2 << g[1]) - (1 << (g[0] + span)))  # query slots g0 + span .. g1
                c = m.bit_count()
                if c:
                    total += c
                    counted.append((total, k, g, m))
        for _ in range(4):  # (a draw fails only when no value differs from both neighbours)
            if not total:
                return "no room"
            r = rng.randrange(total)
            j = bisect.bisect_right(counted, r, key=lambda c: c[0])
            upto, k, g, m = counted[j]
            q = _nth_bit(m, r - (upto - m.bit_count()))
            if self.put_rebound(k, g, q - span, q):
                return "placed"
        return "no room"

    def fill(self, n_distract: int) -> list[int]:
        """Unqueried distractor bindings in ``n_distract`` random empty slots, filler elsewhere."""
        plain_values = self.plain_values()
        empty = [s for s in range(len(self.slots)) if self.slots[s] is None]
        self.rng.shuffle(empty)
        if self.rebind:
            self.distract_rebound(empty[:n_distract])
            empty = []
        for s in empty[:n_distract]:
            if not self.keys:
                break
            k, v = self.keys.pop(), self.rng.choice(plain_values)
            self.slots[s] = self.binding(k, v)
        ids: list[int] = []
        for item in self.slots:
            ids.extend(item if item is not None else (self.rng.choice(self.vocab.filler), self.rng.choice(self.vocab.filler)))
        return ids

    def distract_rebound(self, slots: list[int]) -> None:
        """Distractor bindings in ``slots`` (rebind mode): each of a key whose timeline is free there
        (between one of its queries and its next binding), valued unlike its neighbouring bindings."""
        keys, rng = self.keys, self.rng
        for s in slots:
            if not keys:
                return
            start = rng.randrange(len(keys))
            for i in range(len(keys)):
                k = keys[(start + i) % len(keys)]
                if self.taken[k][s]:
                    continue
                g = next(g for g in self.gaps[k] if g[0] <= s <= g[1])
                v = self.pick_value(g[2], g[3])
                if v is not None:
                    self.slots[s] = self.binding(k, v)
                    self.occupy(k, g, s, s, v)
                    break


def make_document(rng: random.Random, length: int, vocab: TaskVocab, config: MqarConfig | None = None) -> Document:
    """One MQAR document of exactly ``length`` tokens.

    Positions are laid out in 2-token slots. Each query gets a distance from the chosen distribution
    within [min_distance, max_distance]; its query slot is drawn uniformly among the slots that
    allow it; chains are placed first (they need four free slots) and then queries, longest distance
    first, so that long distances are not crowded out (a chain that finds no room becomes a plain
    query). Keys are unique within the document (the binding is unambiguous) and a chain's middle
    value appears in no other binding (while values are left). Unused slots get unqueried distractor
    bindings (if asked) and then filler tokens.

    With ``rebind`` there are up to ``min(length // pair_every, length // 4)`` queries. Each key keeps
    a timeline of its binding–query spans, which never overlap: a key is bound again only after the
    query of its previous binding, to a value unlike its neighbouring bindings', so each answer is
    the value of the most recent binding of its key before the query and the answer's distance is
    from that binding. The (key, query slot) pair of a query is drawn uniformly among those its
    distance fits. Chains keep their own keys (bound once) and middle values (one hop binding each);
    distractor bindings go where their key's timeline is free (between a query and the key's next
    binding), unlike their neighbours too. Without ``rebind`` documents are those of the original
    generator, token for token.
    """
    p = MqarConfig() if config is None else config
    if length < 8:
        raise ConfigError("length", f"an MQAR document needs at least 8 tokens, got {length}")
    n_slots = length // 2
    lo = p.min_distance
    hi = min(p.max_distance or length, 2 * (n_slots - 1))
    if lo > hi:
        raise ConfigError("length", f"MQAR at length {length}: min_distance={lo} leaves no room")
    layout = _Layout(rng, length, vocab, lo, hi, p.rebind)
    n_queries = min(max(1, length // p.pair_every), n_slots // 2, n_slots if p.rebind else len(vocab.keys))
    n_chains = sum(rng.random() < float(p.chains) for _ in range(n_queries)) if p.chains else 0

    def draw() -> int:
        return _draw_distance(rng, lo, hi, p.distance)

    plans = [("chain", draw(), draw()) for _ in range(n_chains)]
    plans += [("query", draw(), 0) for _ in range(n_queries - n_chains)]
    plans.sort(key=lambda t: (t[0] != "chain", -max(t[1], t[2])))
    i = 0
    while i < len(plans) and layout.keys:
        kind, d1, d2 = plans[i]
        i += 1
        if layout.place(kind, d1, d2) == "no room" and kind == "chain":
            plans.append(("query", d1, 0))  # a chain that finds no room becomes a plain query
    ids = layout.fill(int(round(float(p.distractors) * n_queries)))
    if len(ids) < length:
        ids.append(rng.choice(vocab.filler))
    return Document(ids, [Answer(*a) for a in sorted(layout.answers)])


class KeyValueSizes(Protocol):
    """A config with key and value vocabularies (what :func:`config_vocab` reads)."""

    @property
    def n_keys(self) -> int: ...
    @property
    def n_values(self) -> int: ...


def config_vocab(tokenizer: TokenizerLike, config: KeyValueSizes) -> TaskVocab:
    """The tokenizer's task vocabulary for ``config`` (:func:`tokenizer_vocab`)."""
    return tokenizer_vocab(tokenizer, config.n_keys, config.n_values)


def vocab_key(config: KeyValueSizes) -> tuple[int, int]:
    """What :func:`config_vocab` reads of a config: the sizes of its key and value vocabularies."""
    return config.n_keys, config.n_values


FAMILY: DenseFamily[MqarConfig, TaskVocab] = DenseFamily(
    "mqar",
    MqarConfig,
    make_document,
    vocab=config_vocab,
    vocab_key=vocab_key,
    min_length=lambda config: 8,
    choices=lambda config: config.n_values,
    stats=("acc", "lp", "chain", "hop2_acc"),
)
