"""Token streams for training and evaluation, deterministic, resumable and shardable.

A *token stream* is an infinite sequence of tokens addressed by a global offset; ``read(start, n)``
returns ``n`` tokens and their document ids. ``DocStream`` lays the store's documents back to back,
EOS after each, in a seeded order per epoch (epoch ``e`` is the permutation drawn from
``[seed, e]``), so any offset can be read directly. The stream does not depend on the context
length: members pretrained at 4K and 8K read the same tokens; sequence ``s`` of length ``T`` is
tokens ``[s·T, s·T + T + 1)`` (inputs and shifted labels), so one 8K sequence is exactly two 4K
ones.

``PretrainStream`` / ``ExtensionStream`` cut sequences and group them into batches:

- ``batch_size`` is the *global* batch; rank ``r`` of ``world_size`` gets rows
  ``[r·B/W, (r+1)·B/W)`` of each batch, so the ranks' slices partition the single-process batch.
- ``position`` is the number of tokens the whole job has consumed (``batches · B · T``).
  ``state()`` returns it with the stream's settings; ``start_tokens=state["tokens"]`` (or
  ``PretrainStream.resume(store, state)``) continues so that batch k after a resume equals batch k
  of an uninterrupted run, with any ``world_size``.
- Each batch is ``{"input_ids": LongTensor(b, T), "labels": LongTensor(b, T)}`` plus, with
  ``doc_ids=True``, ``"doc_ids": LongTensor(b, T)`` (equal ids = same document, for
  intra-document attention masking; an EOS belongs to the document it ends).

Extra document sources (``archpool.data.sources.DocumentSource``: ``name`` + ``documents(seed)``,
e.g. synthetic tasks) are mixed in with ``extra=[(source, share)]``: the stream is cut into units
of ``mix_unit`` tokens (default: the sequence length) and each unit is drawn from one component
with the given shares by a seeded generator; components keep their own position, so the mix is
deterministic and resumable. To keep 4K and 8K members identical *with* extras, give both the
same ``mix_unit`` (the shorter context).

``ExtensionStream`` is the long-document mix: documents at least ``long_min_tokens`` long
(default: the extension length) from the training and extension splits, plus ``short_share`` of
ordinary pretraining data, packed at the extension length. ``validation_set`` /
``validation_sequences`` give the held-out short and long documents, disjoint from training.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from archpool.data.generated import MAX_CACHED_TOKENS, GeneratedCache, GeneratedPrefix
from archpool.data.store import Store
from archpool.errors import ConfigError, DataError

_STREAM_BITS = 48  # doc ids of component c are offset by c << 48, so components never collide


class DocStream:
    """Store documents ``doc_indices`` back to back, EOS after each, seeded order per epoch."""

    def __init__(self, store: Store, doc_indices: np.ndarray, seed: int, *, stream_id: int = 0):
        self.store = store
        self.docs = np.asarray(doc_indices, dtype=np.int64)
        if len(self.docs) == 0:
            raise DataError(f"{store.path}: no documents for this stream")
        self.seed = int(seed)
        self.eos = store.eos_id
        self.lengths = store.lengths[self.docs].astype(np.int64) + 1  # + EOS
        self.epoch_tokens = int(self.lengths.sum())
        self.id_base = stream_id << _STREAM_BITS
        self._epoch: tuple[int, np.ndarray, np.ndarray] | None = None

    def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if self._epoch is None or self._epoch[0] != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.docs))
            ends = np.cumsum(self.lengths[order])
            self._epoch = (epoch, order, ends)
        return self._epoch[1], self._epoch[2]

    def read(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` tokens from global offset ``start``: ids, document ids, and target flags (all set)."""
        toks = np.empty(n, dtype=np.int64)
        ids = np.empty(n, dtype=np.int64)
        pos, filled = int(start), 0
        while filled < n:
            epoch, within = divmod(pos, self.epoch_tokens)
            order, ends = self._order(epoch)
            k = int(np.searchsorted(ends, within, side="right"))
            doc_start = int(ends[k] - self.lengths[order[k]])
            off = within - doc_start
            d = self.docs[order[k]]
            doc = self.store.doc(int(d))
            take = min(n - filled, int(ends[k]) - within)
            body = min(take, max(0, len(doc) - off))
            toks[filled : filled + body] = doc[off : off + body]
            if body < take:  # the EOS after the document
                toks[filled + body] = self.eos
            ids[filled : filled + take] = self.id_base + epoch * len(self.docs) + k
            filled += take
            pos += take
        return toks, ids, np.ones(n, dtype=bool)


class GeneratedStream:
    """Documents from a ``DocumentSource``, encoded on the fly, EOS after each. Reads are served
    from a forward buffer; reading behind it replays the source from the start (deterministic).

    A source may yield text or token documents (an object with ``ids`` and ``scored``, one flag per
    token: is it a training target?). Token documents skip the tokenizer, and their unscored tokens
    (e.g. MQAR's random keys and filler) get no loss: dense supervision on the answers only.

    With a ``cache`` (``archpool.data.generated``), the documents another stream already generated
    for this source and seed are read from it, and what this stream generates from document 0 is
    recorded and written back: when the recording doubles what the cache holds, and on ``flush()``."""

    def __init__(self, source, tokenizer, seed: int, *, stream_id: int = 0, cache: GeneratedCache | None = None):
        self.source, self.tokenizer, self.seed = source, tokenizer, int(seed)
        self.id_base = stream_id << _STREAM_BITS
        self.cache = cache
        self._reset()

    def _reset(self) -> None:
        self._base = 0  # global offset of self._toks[0]
        self._toks = np.empty(0, dtype=np.int64)
        self._ids = np.empty(0, dtype=np.int64)
        self._scored = np.empty(0, dtype=bool)
        self._n_docs = 0
        prefix = self.cache.load(self.seed) if self.cache is not None else None
        self._saved = 0 if prefix is None else prefix.n_tokens  # tokens the cache holds
        self._record: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = [] if self.cache is not None else None
        self._recorded = 0
        if prefix is not None:
            self._toks, self._ids, self._scored = prefix.toks, self.id_base + prefix.doc_index(), prefix.scored
            self._n_docs = len(prefix.ends)
            self._record = (
                [(prefix.toks, prefix.scored, np.diff(prefix.ends, prepend=0))] if prefix.n_tokens < MAX_CACHED_TOKENS else None
            )
            self._recorded = prefix.n_tokens
        self._it: Iterator | None = None  # the source's documents after the first self._n_docs, made on demand

    def _documents(self) -> Iterator:
        if self._it is None:  # past a cached prefix: the source's own skip, else it replays the prefix once
            if hasattr(self.source, "documents_from"):
                self._it = iter(self.source.documents_from(self.seed, self._n_docs))
            else:
                self._it = itertools.islice(iter(self.source.documents(self.seed)), self._n_docs, None)
        return self._it

    def _extend(self, need_end: int) -> None:
        tparts, iparts, sparts = [self._toks], [self._ids], [self._scored]
        end = self._base + len(self._toks)
        if end >= need_end:
            return
        docs = self._documents()
        while end < need_end:
            try:
                text = next(docs)
            except StopIteration:
                raise DataError(f"extra source {self.source.name}: ran out of documents; make documents(seed) infinite") from None
            if isinstance(text, str):
                ids = self.tokenizer.encode(text) + [self.tokenizer.eos_id]
                scored = np.ones(len(ids), dtype=bool)
            else:  # a token document: ids + per-token target flags; its EOS is not a target
                ids = [*text.ids, self.tokenizer.eos_id]
                scored = np.append(np.asarray(text.scored, dtype=bool), False)
            toks = np.asarray(ids, dtype=np.int64)
            tparts.append(toks)
            iparts.append(np.full(len(ids), self.id_base + self._n_docs, dtype=np.int64))
            sparts.append(scored)
            self._n_docs += 1
            end += len(ids)
            self._remember(toks, scored)
        self._toks, self._ids = np.concatenate(tparts), np.concatenate(iparts)
        self._scored = np.concatenate(sparts)
        if self._record is not None and self._recorded >= 2 * max(self._saved, 1 << 14):
            self.flush()

    def _remember(self, toks: np.ndarray, scored: np.ndarray) -> None:
        """Record a generated document for the cache, up to ``MAX_CACHED_TOKENS``."""
        if self._record is None:
            return
        if self._recorded + len(toks) > MAX_CACHED_TOKENS:
            self.flush()
            self._record = None
            return
        self._record.append((toks, scored, np.array([len(toks)])))
        self._recorded += len(toks)

    def flush(self) -> None:
        """Write what this stream generated from document 0 to the cache, if it is more than it holds."""
        if self.cache is None or not self._record or self._recorded <= self._saved:
            return
        toks, scored, lens = (np.concatenate(part) for part in zip(*self._record))
        self._record = [(toks, scored, lens)]
        self.cache.save(self.seed, GeneratedPrefix(toks, np.cumsum(lens), scored))
        self._saved = self._recorded

    def read(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if start < self._base:
            self._reset()
        self._extend(start + n)
        lo = start - self._base
        toks, ids, scored = self._toks[lo : lo + n].copy(), self._ids[lo : lo + n].copy(), self._scored[lo : lo + n].copy()
        drop = lo  # everything before ``start`` is no longer needed for forward reads
        self._toks, self._ids, self._scored = self._toks[drop:], self._ids[drop:], self._scored[drop:]
        self._base += drop
        return toks, ids, scored


class MixedStream:
    """Units of ``unit`` tokens, each from one component chosen with ``shares`` by a seeded draw."""

    BLOCK = 4096  # units per seeded draw

    def __init__(self, components: Sequence[Any], shares: Sequence[float], unit: int, seed: int):
        weights = np.asarray(shares, dtype=np.float64)
        if len(components) != len(weights) or len(weights) == 0:
            raise ConfigError("extra", "one share per component")
        if (weights < 0).any() or not weights.sum() > 0:
            raise ConfigError("extra", f"shares must be >= 0 with a positive sum, got {list(weights)}")
        self.components = list(components)
        self.p = weights / weights.sum()
        self.unit, self.seed = int(unit), int(seed)
        self._prefix = [np.zeros(len(weights), dtype=np.int64)]  # counts per component before block b
        self._choices: dict[int, np.ndarray] = {}

    def _block(self, b: int) -> np.ndarray:
        if b not in self._choices:
            if len(self._choices) > 8:
                self._choices.clear()
            rng = np.random.default_rng([self.seed, 0x6D1C, b])
            self._choices[b] = rng.choice(len(self.p), size=self.BLOCK, p=self.p)
        return self._choices[b]

    def _locate(self, u: int) -> tuple[int, int]:
        """Component of unit ``u`` and its index among that component's units."""
        b, i = divmod(u, self.BLOCK)
        while len(self._prefix) <= b:
            nb = len(self._prefix) - 1
            self._prefix.append(self._prefix[-1] + np.bincount(self._block(nb), minlength=len(self.p)))
        ch = self._block(b)
        c = int(ch[i])
        return c, int(self._prefix[b][c] + np.count_nonzero(ch[:i] == c))

    def flush(self) -> None:
        """Write the generated components' documents to their caches."""
        for c in self.components:
            if hasattr(c, "flush"):
                c.flush()

    def read(self, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        toks = np.empty(n, dtype=np.int64)
        ids = np.empty(n, dtype=np.int64)
        scored = np.empty(n, dtype=bool)
        pos, filled = int(start), 0
        while filled < n:
            u, within = divmod(pos, self.unit)
            c, local = self._locate(u)
            take = min(n - filled, self.unit - within)
            t, d, m = self.components[c].read(local * self.unit + within, take)
            toks[filled : filled + take], ids[filled : filled + take], scored[filled : filled + take] = t, d, m
            filled += take
            pos += take
        return toks, ids, scored


# --------------------------------------------------------------------------------------- batches
class _Batches:
    """Global batches of ``seq_len``-token sequences cut from ``stream`` (the main documents with the extra
    sources ``extra_names`` mixed in); ``state()`` records the store, the extras and the subclass's ``settings``."""

    kind = "stream"

    def __init__(
        self,
        store: Store,
        stream,
        extra_names: list,
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int,
        world_size: int,
        start_tokens: int,
        doc_ids: bool,
        settings: dict,
    ):
        for name, v in (("seq_len", seq_len), ("batch_size", batch_size), ("world_size", world_size)):
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise ConfigError(name, f"must be a positive integer, got {v!r}")
        if batch_size % world_size:
            raise ConfigError("batch_size", f"global batch {batch_size} is not divisible by world_size={world_size}")
        if not 0 <= rank < world_size:
            raise ConfigError("rank", f"must be in [0, {world_size}), got {rank}")
        per_batch = batch_size * seq_len
        if start_tokens < 0 or start_tokens % per_batch:
            raise ConfigError(
                "start_tokens", f"must be a multiple of batch_size*seq_len={per_batch} (a batch boundary), got {start_tokens}"
            )
        self.stream, self.seq_len, self.batch_size, self.seed = stream, int(seq_len), int(batch_size), int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.local_batch = self.batch_size // self.world_size
        self.doc_ids = doc_ids
        self.batch_index = start_tokens // per_batch
        self.settings = {"store": store.key, "tokenizer_hash": store.tokenizer_hash, "extra": extra_names, **settings}

    def flush(self) -> None:
        """Write generated task documents to their cache (at the end of training; also done as they grow)."""
        if hasattr(self.stream, "flush"):
            self.stream.flush()

    @property
    def position(self) -> int:
        """Tokens consumed by the whole job so far (all ranks)."""
        return self.batch_index * self.batch_size * self.seq_len

    def state(self) -> dict:
        return {
            "kind": self.kind,
            "tokens": self.position,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "seed": self.seed,
            **self.settings,
        }

    def sequence(self, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Global sequence ``s``: ``seq_len + 1`` tokens, their document ids and target flags."""
        return self.stream.read(s * self.seq_len, self.seq_len + 1)

    def batch(self, k: int) -> dict:
        """Batch ``k`` (global numbering), this rank's rows."""
        import torch

        first = k * self.batch_size + self.rank * self.local_batch
        rows = [self.sequence(s) for s in range(first, first + self.local_batch)]
        toks = np.stack([r[0] for r in rows])
        labels = toks[:, 1:].copy()
        labels[~np.stack([r[2][1:] for r in rows])] = -100  # tokens that are no training target
        out = {"input_ids": torch.from_numpy(toks[:, :-1].copy()), "labels": torch.from_numpy(labels)}
        if self.doc_ids:
            out["doc_ids"] = torch.from_numpy(np.stack([r[1][:-1] for r in rows]))
        return out

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        b = self.batch(self.batch_index)
        self.batch_index += 1
        return b


def _with_extras(main, extra, store: Store, seq_len: int, mix_unit: int | None, seed: int, first_id: int):
    """``main`` alone, or a ``MixedStream`` of ``main`` (at what the extra sources' shares leave) and the
    extra sources at their shares, with the sources' ``[name, share]``. A source with a ``cache_key``
    caches its documents under the store (``archpool.data.generated``)."""
    extra = list(extra or [])
    main_share = 1.0 - sum(s for _, s in extra)
    if not extra:
        return main, []
    comps, shares, names = [main], [main_share], []
    for i, item in enumerate(extra):
        try:
            src, share = item
        except (TypeError, ValueError):
            raise ConfigError("extra", "give (DocumentSource, share) pairs") from None
        if not hasattr(src, "documents"):
            raise ConfigError("extra", f"{src!r} is not a DocumentSource (needs documents(seed))")
        if not 0 < share < 1:
            raise ConfigError("extra", f"share of {getattr(src, 'name', src)!r} must be in (0, 1), got {share}")
        key = getattr(src, "cache_key", None)
        cache = GeneratedCache(store.path / "generated", key, store.tokenizer_hash, store.tokenizer.vocab_size) if key else None
        comps.append(GeneratedStream(src, store.tokenizer, seed + 1000 + i, stream_id=first_id + i, cache=cache))
        shares.append(share)
        names.append([getattr(src, "name", f"extra{i}"), share])
    if shares[0] <= 0:
        raise ConfigError("extra", f"extra shares sum to {sum(shares[1:])}; they must leave a positive share for the main data")
    return MixedStream(comps, shares, mix_unit or seq_len, seed), names


class PretrainStream(_Batches):
    """Pretraining batches: the training split in a seeded document order, packed at ``seq_len``."""

    kind = "pretrain"

    def __init__(
        self,
        store: Store,
        seq_len: int,
        batch_size: int,
        seed: int = 0,
        *,
        rank: int = 0,
        world_size: int = 1,
        start_tokens: int = 0,
        doc_ids: bool = False,
        extra: Sequence[tuple[Any, float]] = (),
        mix_unit: int | None = None,
    ):
        main = DocStream(store, store.docs("train"), seed, stream_id=0)
        stream, names = _with_extras(main, extra, store, seq_len, mix_unit, seed, 1)
        settings = {"mix_unit": mix_unit or (seq_len if extra else None)}
        super().__init__(store, stream, names, seq_len, batch_size, seed, rank, world_size, start_tokens, doc_ids, settings)

    @classmethod
    def resume(cls, store: Store, state: dict, *, rank: int = 0, world_size: int = 1, extra=(), doc_ids: bool = False):
        return cls(store, **_resumed(store, state, cls.kind, rank, world_size, extra, doc_ids))


class ExtensionStream(_Batches):
    """The long-document mix for context extension (like Olmo 3's Longmino), packed at ``seq_len``."""

    kind = "extension"

    def __init__(
        self,
        store: Store,
        seq_len: int,
        batch_size: int,
        seed: int = 0,
        *,
        short_share: float = 0.3,
        long_min_tokens: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        start_tokens: int = 0,
        doc_ids: bool = False,
        extra: Sequence[tuple[Any, float]] = (),
        mix_unit: int | None = None,
    ):
        if not 0 <= short_share < 1:
            raise ConfigError("short_share", f"must be in [0, 1), got {short_share}")
        want = long_min_tokens or seq_len
        cand = store.docs("train", "extension")
        long_docs = cand[store.lengths[cand] >= want]
        threshold = want
        if len(long_docs) == 0:
            threshold = max(1, want // 4)
            long_docs = cand[store.lengths[cand] >= threshold]
            if len(long_docs) == 0:
                raise DataError(
                    f"{store.path}: no training document has {threshold} tokens or more for a {seq_len}-token extension mix"
                )
            warnings.warn(
                f"no document reaches {want} tokens; the extension mix uses documents of >= {threshold} tokens", stacklevel=2
            )
        self.long_docs = long_docs
        self.long_min_tokens = threshold
        comps = [DocStream(store, long_docs, seed, stream_id=0)]
        shares = [1.0 - short_share]
        if short_share > 0:
            comps.append(DocStream(store, store.docs("train"), seed + 1, stream_id=1))
            shares.append(short_share)
        main = MixedStream(comps, shares, mix_unit or seq_len, seed) if len(comps) > 1 else comps[0]
        stream, names = _with_extras(main, extra, store, seq_len, mix_unit, seed + 7, 2)
        settings = {"short_share": short_share, "long_min_tokens": long_min_tokens, "mix_unit": mix_unit}
        super().__init__(store, stream, names, seq_len, batch_size, seed, rank, world_size, start_tokens, doc_ids, settings)

    @classmethod
    def resume(cls, store: Store, state: dict, *, rank: int = 0, world_size: int = 1, extra=(), doc_ids: bool = False):
        resumed = _resumed(store, state, cls.kind, rank, world_size, extra, doc_ids)
        return cls(store, **resumed, short_share=state["short_share"], long_min_tokens=state.get("long_min_tokens"))


def _resumed(store: Store, state: dict, kind: str, rank: int, world_size: int, extra, doc_ids: bool) -> dict[str, Any]:
    """The arguments (after the store) that continue a ``kind`` stream from its ``state()`` on ``rank`` of
    ``world_size``: its sequence length, batch, seed and mix unit, from the batch it had reached."""
    if state.get("kind") != kind:
        raise DataError(f"resume: state is for a {state.get('kind')!r} stream, not {kind!r}")
    store.require_tokenizer(state.get("tokenizer_hash"), where="resume")
    if state.get("store") not in (None, store.key):
        raise DataError(f"resume: state was written for store {state.get('store')}, this is {store.key}")
    start = int(state["tokens"])
    return dict(
        seq_len=state["seq_len"],
        batch_size=state["batch_size"],
        seed=state["seed"],
        rank=rank,
        world_size=world_size,
        start_tokens=start,
        doc_ids=doc_ids,
        extra=extra,
        mix_unit=state.get("mix_unit"),
    )


# ------------------------------------------------------------------------------------ validation
@dataclass
class ValidationSet:
    """Held-out documents as token arrays: ``short`` (perplexity), ``long`` (LongPPL, haystacks)."""

    short: list[np.ndarray]
    long: list[np.ndarray]
    short_indices: np.ndarray
    long_indices: np.ndarray


def validation_set(store: Store, min_long_tokens: int | None = None) -> ValidationSet:
    """The held-out documents; ``min_long_tokens`` keeps only long ones at least that long."""
    si, li = store.docs("val_short"), store.docs("val_long")
    if min_long_tokens:
        li = li[store.lengths[li] >= min_long_tokens]
    return ValidationSet([np.asarray(store.doc(int(i))) for i in si], [np.asarray(store.doc(int(i))) for i in li], si, li)


def validation_texts(store: Store, kind: str = "long", min_tokens: int = 0) -> list[str]:
    """Decoded held-out documents (``short`` or ``long``), e.g. as haystacks for long-context tasks."""
    idx = store.docs({"short": "val_short", "long": "val_long"}[kind])
    return [store.text(int(i)) for i in idx if store.lengths[i] >= min_tokens]


def validation_sequences(store: Store, seq_len: int, kind: str = "short", max_sequences: int | None = None):
    """Held-out evaluation rows, LongTensor ``(N, seq_len + 1)``.

    ``short``: the held-out short documents (EOS after each) packed back to back in store order;
    ``long``: the first ``seq_len + 1`` tokens of every held-out long document that long.
    """
    import torch

    if kind not in ("short", "long"):
        raise ConfigError("kind", f"must be 'short' or 'long', got {kind!r}")
    rows: list[np.ndarray] = []
    if kind == "long":
        for i in store.docs("val_long"):
            if store.lengths[i] >= seq_len + 1:
                rows.append(np.asarray(store.doc(int(i))[: seq_len + 1], dtype=np.int64))
                if max_sequences and len(rows) >= max_sequences:
                    break
    else:
        idx = store.docs("val_short")
        if len(idx):
            flat = np.concatenate([np.append(np.asarray(store.doc(int(i)), dtype=np.int64), store.eos_id) for i in idx])
            n = (len(flat) - 1) // seq_len
            if max_sequences:
                n = min(n, max_sequences)
            rows = [flat[r * seq_len : r * seq_len + seq_len + 1] for r in range(n)]
    if not rows:
        raise DataError(f"{store.path}: no held-out {kind} documents long enough for {seq_len}-token sequences")
    return torch.from_numpy(np.stack(rows))
