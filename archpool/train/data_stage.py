"""The trainer's view of the data stage: a run's typed ``data:`` section (:class:`DataSection`) -> a
prepared store -> ``PretrainStream`` / ``ExtensionStream`` of this rank, cut into micro-batches.

Task documents (``data.tasks``) are mixed in by share; give every pool member the same ``mix_unit``
so members with different contexts still see identical token sequences, or ``fit_context`` so that
each member's pretraining task documents are exactly one of its own sequences. The stream state (tokens
consumed by the whole job, plus the store key and tokenizer hash) is world-size independent and is
checked against the store on resume.
"""

from __future__ import annotations

from typing import Any

from archpool.data.section import DataSection
from archpool.data.sources import GeneratorSource
from archpool.data.store import Store, prepare
from archpool.data.streams import ExtensionStream, PretrainStream
from archpool.errors import ConfigError
from archpool.runtime import process_rank
from archpool.tasks import training_documents, training_documents_key
from archpool.train.data import Batch, BatchStream, RankSlicedStream, SyntheticSource
from archpool.train.distributed import barrier


def task_mix(section: DataSection, split: str, tokenizer, seq_len: int | None = None) -> tuple[list, int | None]:
    """``(extra, mix_unit)`` for the data stage's streams from the section's task mix (``seq_len``:
    the stream's sequence length, which sizes the documents under ``fit_context``)."""
    mix = section.tasks
    if mix is None:
        return [], None
    share, length_range, mix_unit = mix.for_split(split, seq_len)
    if share <= 0:
        return [], None
    names, configs = list(mix.names), mix.configs_for(split)
    source = GeneratorSource(
        "tasks",
        lambda seed: training_documents(names, None, seed, length_range, tokenizer, configs),
        cache_key=training_documents_key(names, length_range, mix.params_for(split)),
        make_from=lambda seed, start: training_documents(names, None, seed, length_range, tokenizer, configs, start=start),
    )
    return [(source, share)], mix_unit


def open_store(section: DataSection, progress: bool = False) -> Store:
    """The prepared store a ``data:`` section names; rank 0 prepares it first under torchrun."""
    if section.store:
        return Store(section.store)
    quiet = lambda *a, **k: None
    assert section.data is not None  # a section is exactly one of data and synthetic; the synthetic stream has no store
    if process_rank() == 0:
        store = prepare(section.data, progress=progress, log=print if progress else quiet)
        barrier()
        return store
    barrier()
    return prepare(section.data, progress=False, log=quiet)


class DataStageStream:
    """Adapts a data-stage stream (one item = this rank's rows of a global batch) to micro-batches."""

    def __init__(self, make, micro_batch_size: int, store, rank: int, world_size: int, doc_ids: bool, extra=()):
        self._make = make  # start_tokens -> stream
        self.store, self.rank, self.world_size, self.doc_ids = store, rank, world_size, doc_ids
        self.extra = extra
        self.stream = make(0)
        self.micro = micro_batch_size
        self._rows: list[dict] = []

    def next_batch(self) -> Batch:
        if not self._rows:
            b = next(self.stream)
            n = b["input_ids"].shape[0]
            if n % self.micro:
                raise ConfigError("train.micro_batch_size", f"{n} rows per rank do not split into micro-batches of {self.micro}")
            self._rows = [{k: v[i : i + self.micro] for k, v in b.items()} for i in range(0, n, self.micro)]
        r = self._rows.pop(0)
        return Batch(r["input_ids"], r["labels"], r.get("doc_ids"))

    def flush(self) -> None:
        """Write the generated task documents to their cross-run cache."""
        self.stream.flush()

    def state_dict(self) -> dict[str, Any]:
        if self._rows:
            raise RuntimeError("data position is only checkpointed at step boundaries")
        return dict(self.stream.state())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        current = self.stream.state()
        for key in ("seq_len", "batch_size", "seed"):
            if state.get(key) != current.get(key):
                raise ConfigError(
                    f"data.{key}", f"the checkpoint's stream has {key}={state.get(key)}, this run {current.get(key)}"
                )
        # resume() checks the store key and tokenizer hash and continues at the recorded position
        self.stream = type(self.stream).resume(
            self.store, state, rank=self.rank, world_size=self.world_size, doc_ids=self.doc_ids, extra=self.extra
        )
        self._rows = []


def build_stream(  # noqa: PLR0913 — keyword-only batch geometry and rank, as the trainer and benches name them
    section: DataSection,
    *,
    split: str,
    vocab_size: int,
    seq_len: int,
    sequences_per_step: int,
    micro_batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    doc_ids: bool = True,
) -> BatchStream:
    """The batch stream a run config's ``data:`` section describes, for ``split`` (pretrain | extension):
    the trainer's synthetic stream, or this rank's rows of the prepared store's packed stream."""
    syn = section.synthetic
    if syn is not None:
        vocab = vocab_size if syn.vocab_size is None else syn.vocab_size
        if vocab > vocab_size:
            raise ConfigError("data.synthetic.vocab_size", f"{vocab} exceeds the model's vocab_size={vocab_size}")
        mean = syn.mean_doc_len or (48 if split == "pretrain" else 4 * seq_len)
        source = SyntheticSource(
            vocab, seq_len, seed=seed if syn.seed is None else syn.seed, split=split, mean_doc_len=mean, noise=syn.noise
        )
        return RankSlicedStream(source, sequences_per_step, micro_batch_size, rank, world_size)
    store = open_store(section)
    n_vocab = store.tokenizer.vocab_size
    if n_vocab > vocab_size:
        raise ConfigError("model.vocab_size", f"{vocab_size} is smaller than the data's tokenizer vocabulary ({n_vocab})")
    order_seed = seed if section.seed is None else section.seed
    extra, mix_unit = task_mix(section, split, store.tokenizer, seq_len)

    def make(start_tokens: int):
        common: dict[str, Any] = dict(
            rank=rank, world_size=world_size, start_tokens=start_tokens, doc_ids=doc_ids, extra=extra, mix_unit=mix_unit
        )
        if split == "extension":
            kw = {k: getattr(section, k) for k in ("short_share", "long_min_tokens") if getattr(section, k) is not None}
            return ExtensionStream(store, seq_len, sequences_per_step, order_seed, **kw, **common)
        return PretrainStream(store, seq_len, sequences_per_step, order_seed, **common)

    return DataStageStream(make, micro_batch_size, store, rank, world_size, doc_ids, extra)
