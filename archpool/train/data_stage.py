"""The trainer's view of the data stage: a run config's ``data:`` section -> a prepared store ->
``PretrainStream`` / ``ExtensionStream`` of this rank, cut into micro-batches.

``data:`` holds the data stage's ``DataConfig`` fields, plus these training-side keys:
``store`` (path of an already prepared store; default: prepare or reuse the one the config names),
``seed`` (the document order; default: ``train.seed``; every pool member should share it),
``short_share`` and ``long_min_tokens`` (the extension mix), and ``tasks`` — synthetic task
documents mixed in so tiny models learn the task formats at short context (signal.md)::

    tasks: {names: [kv_recall], share: 0.3, extension_share: 0.3, length_range: [64, 256],
            params: {kv_recall: {...}}, mix_unit: 128}

(``mix_unit``: give every pool member the same one, so members with different contexts still see
identical token sequences). The extension mix may use its own ``extension_length_range`` and
``extension_mix_unit`` (default: the pretraining ones), e.g. MQAR documents as long as the
extended context so that extension trains the long distances it is evaluated on. The stream state (tokens consumed by
the whole job, plus the store key and tokenizer hash) is world-size independent and is checked
against the store on resume.
"""
from __future__ import annotations

from typing import Any

from archpool.errors import ConfigError
from archpool.train.data import Batch

TRAIN_KEYS = ("store", "seed", "short_share", "long_min_tokens", "tasks")
TASK_KEYS = ("names", "share", "extension_share", "length_range", "params", "mix_unit", "extension_length_range",
             "extension_mix_unit")


def task_mix(data_cfg: dict[str, Any], split: str, tokenizer) -> tuple[list, int | None]:
    """``(extra, mix_unit)`` for the data stage's streams from the ``data.tasks`` section."""
    tasks = data_cfg.get("tasks")
    if not tasks:
        return [], None
    if not isinstance(tasks, dict):
        raise ConfigError("data.tasks", "must be a mapping with names, share, length_range, ...")
    unknown = sorted(set(tasks) - set(TASK_KEYS))
    if unknown:
        raise ConfigError(f"data.tasks.{unknown[0]}", f"unknown key; allowed: {', '.join(TASK_KEYS)}")
    names = list(tasks.get("names") or [])
    if not names:
        raise ConfigError("data.tasks.names", "list at least one task (e.g. [kv_recall])")
    share = float(tasks.get("extension_share", tasks.get("share", 0.0)) if split == "extension" else tasks.get("share", 0.0))
    if share <= 0:
        return [], None
    ext = split == "extension"
    range_key = "extension_length_range" if ext and tasks.get("extension_length_range") else "length_range"
    length_range = tuple(int(x) for x in tasks.get(range_key, (64, 256)))
    if len(length_range) != 2:
        raise ConfigError(f"data.tasks.{range_key}", f"give [min, max] tokens, got {tasks.get(range_key)}")
    params = tasks.get("params") or {}
    from archpool.data.sources import GeneratorSource
    from archpool.tasks import get_task, training_documents

    for name in names:
        try:
            get_task(name)
        except Exception as e:
            raise ConfigError("data.tasks.names", str(e)) from e
    source = GeneratorSource("tasks", lambda seed: training_documents(names, None, seed, length_range, tokenizer, params))
    mix_unit = tasks.get("extension_mix_unit") if ext and tasks.get("extension_mix_unit") else tasks.get("mix_unit")
    return [(source, share)], int(mix_unit) if mix_unit else None


def open_store(data_cfg: dict[str, Any], progress: bool = False):
    """The prepared store a ``data:`` section names; rank 0 prepares it first under torchrun."""
    from archpool.data.store import Store, prepare
    from archpool.train.distributed import barrier
    import os

    if data_cfg.get("store"):
        return Store(data_cfg["store"])
    from archpool.data.config import DataConfig

    cfg = DataConfig.from_dict({k: v for k, v in data_cfg.items() if k not in TRAIN_KEYS})
    quiet = lambda *a, **k: None  # noqa: E731
    if int(os.environ.get("RANK", "0")) == 0:
        store = prepare(cfg, progress=progress, log=print if progress else quiet)
        barrier()
        return store
    barrier()
    return prepare(cfg, progress=False, log=quiet)


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
            self._rows = [{k: v[i:i + self.micro] for k, v in b.items()} for i in range(0, n, self.micro)]
        r = self._rows.pop(0)
        return Batch(r["input_ids"], r["labels"], r.get("doc_ids"))

    def state_dict(self) -> dict[str, Any]:
        if self._rows:
            raise RuntimeError("data position is only checkpointed at step boundaries")
        return dict(self.stream.state())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        current = self.stream.state()
        for key in ("seq_len", "batch_size", "seed"):
            if state.get(key) != current.get(key):
                raise ConfigError(f"data.{key}", f"the checkpoint's stream has {key}={state.get(key)}, this run {current.get(key)}")
        # resume() checks the store key and tokenizer hash and continues at the recorded position
        self.stream = type(self.stream).resume(self.store, state, rank=self.rank, world_size=self.world_size,
                                               doc_ids=self.doc_ids, extra=self.extra)
        self._rows = []


def build_data_stage_stream(data_cfg: dict[str, Any], *, split: str, vocab_size: int, seq_len: int, sequences_per_step: int,
                            micro_batch_size: int, rank: int = 0, world_size: int = 1, seed: int = 0,
                            doc_ids: bool = True) -> DataStageStream:
    try:
        from archpool.data.streams import ExtensionStream, PretrainStream
    except ModuleNotFoundError as e:  # pragma: no cover - only before the data stage exists
        raise ConfigError("data", f"the data stage (archpool.data) is not available ({e}); use data: {{synthetic: {{}}}}") from e
    store = open_store(data_cfg)
    n_vocab = store.tokenizer.vocab_size
    if n_vocab > vocab_size:
        raise ConfigError("model.vocab_size", f"{vocab_size} is smaller than the data's tokenizer vocabulary ({n_vocab})")
    order_seed = int(data_cfg.get("seed", seed))
    extra, mix_unit = task_mix(data_cfg, split, store.tokenizer)

    def make(start_tokens: int):
        common = dict(rank=rank, world_size=world_size, start_tokens=start_tokens, doc_ids=doc_ids, extra=extra, mix_unit=mix_unit)
        if split == "extension":
            kw = {k: data_cfg[k] for k in ("short_share", "long_min_tokens") if data_cfg.get(k) is not None}
            return ExtensionStream(store, seq_len, sequences_per_step, order_seed, **kw, **common)
        return PretrainStream(store, seq_len, sequences_per_step, order_seed, **common)

    return DataStageStream(make, micro_batch_size, store, rank, world_size, doc_ids, extra)
