"""A run's ``data:`` section, typed: the data stage's ``DataConfig`` plus the training-side stream settings.

The one owner of that section: every stage that reads a run's data (the pool's data node, the
trainer's streams, eval, attention, export) builds a ``DataSection`` from the mapping at the edge
(YAML, ``run_config.json``) and uses its fields. ``to_dict`` gives back the mapping as written (run
records and stage keys hash it). Training-side keys:

- ``store``: path of an already prepared store (default: prepare or reuse the one the config names);
- ``seed``: the document order (default: ``train.seed``; every pool member should share it);
- ``short_share``, ``long_min_tokens``: the extension mix;
- ``tasks``: synthetic task documents mixed in so tiny models learn the task formats (docs/tiny-scale.md)::

      tasks: {names: [mqar], share: 0.8, extension_share: 0.8, length_range: [64, 256],
              params: {mqar: {...}}, mix_unit: 128, extension_length_range: [..], extension_mix_unit: ..,
              fit_context: false}

  ``fit_context: true`` sizes the pretraining task documents to each run's own sequence length
  (one document per sequence, ``length_range`` and ``mix_unit`` ignored for that split);

- ``synthetic: {seed, mean_doc_len, noise, vocab_size}`` instead of any data: the trainer's built-in
  synthetic stream (no store).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, overload

from archpool.config import Config, check_keys, check_mapping, rerooted
from archpool.data.config import DataConfig
from archpool.data.store import store_path
from archpool.errors import ConfigError
from archpool.tasks import TaskConfig, get_task, task_configs

TRAIN_KEYS = ("store", "seed", "short_share", "long_min_tokens", "tasks")


@overload
def _int(value: Any, name: str, minimum: int = 0, *, optional: Literal[False]) -> int: ...
@overload
def _int(value: Any, name: str, minimum: int = 0, optional: bool = True) -> int | None: ...
def _int(value: Any, name: str, minimum: int = 0, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(name, f"an integer >= {minimum}{' or null' if optional else ''}, got {value!r}")
    return value


@overload
def _fraction(value: Any, name: str, *, optional: Literal[False]) -> float: ...
@overload
def _fraction(value: Any, name: str, optional: bool = True) -> float | None: ...
def _fraction(value: Any, name: str, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ConfigError(name, f"a fraction in [0, 1], got {value!r}")
    return float(value)


def _range(value: Any, name: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(name, f"give [min, max] tokens, got {value!r}")
    lo, hi = (_int(v, name, 1, optional=False) for v in value)
    if lo > hi:
        raise ConfigError(name, f"min {lo} > max {hi}")
    return lo, hi


@dataclass(frozen=True)
class TaskMix(Config):
    """Synthetic task documents mixed into the training streams (``data.tasks``)."""

    names: tuple[str, ...]
    share: float = 0.0
    extension_share: float | None = None  # default: ``share``
    length_range: tuple[int, int] = (64, 256)
    params: dict[str, Any] = field(default_factory=dict)
    mix_unit: int | None = None
    extension_length_range: tuple[int, int] | None = None  # default: ``length_range``
    extension_mix_unit: int | None = None  # default: ``mix_unit``
    fit_context: bool = False  # pretraining task documents fill exactly one sequence of the run
    extension_params: dict[str, Any] = field(default_factory=dict)  # per task, over ``params`` in the extension mix
    # every task's typed config per split (``pretrain``, ``extension``), built from the two mappings above
    configs: dict[str, dict[str, TaskConfig]] = field(init=False, repr=False, compare=False)

    PATH = "data.tasks"
    KEY = "key"

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", self._split_configs())
        super().__post_init__()

    def _split_configs(self) -> dict[str, dict[str, TaskConfig]]:
        """Per split, every task's typed config: ``params`` over the task's defaults, and in the
        extension mix ``extension_params`` laid over those task by task (errors name the mapping the
        value came from, under ``PATH``)."""
        names = list(self.names)
        given = task_configs(self.params, f"{self.PATH}.params", names)
        pretrain = {t: given.get(t) or get_task(t).config for t in names}
        laid = task_configs(self.extension_params, f"{self.PATH}.extension_params", names, base=pretrain)
        return {"pretrain": pretrain, "extension": {**pretrain, **laid}}

    @classmethod
    def keys(cls) -> list[str]:
        """The keys of the ``tasks:`` mapping (the derived ``configs`` is none)."""
        return [f.name for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> TaskMix:
        """The ``tasks:`` mapping, every value checked and normalised (ranges to tuples, fractions to floats)."""
        prefix = cls.PATH if path is None else path
        check_mapping(d, prefix, "a mapping with names, share, length_range, ...")
        check_keys(d, cls.keys(), prefix, cls.KEY)
        names = d.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{prefix}.names", f"list at least one task name (e.g. [mqar]), got {names!r}")
        for name in names:
            try:
                get_task(name)
            except ConfigError as e:
                raise ConfigError(f"{prefix}.names", e.message) from None
        fit = d.get("fit_context", False)
        if not isinstance(fit, bool):
            raise ConfigError(f"{prefix}.fit_context", f"true or false, got {fit!r}")
        params, extension_params = d.get("params"), d.get("extension_params")
        try:
            return cls(
                names=tuple(names),
                share=_fraction(d.get("share", 0.0), f"{prefix}.share", optional=False),
                extension_share=_fraction(d.get("extension_share"), f"{prefix}.extension_share"),
                # null: TaskMix's own field check refuses it, naming the field
                length_range=cast("tuple[int, int]", _range(d.get("length_range", (64, 256)), f"{prefix}.length_range")),
                params={} if params is None else params,
                mix_unit=_int(d.get("mix_unit"), f"{prefix}.mix_unit", 1),
                extension_length_range=_range(d.get("extension_length_range"), f"{prefix}.extension_length_range"),
                extension_mix_unit=_int(d.get("extension_mix_unit"), f"{prefix}.extension_mix_unit", 1),
                fit_context=fit,
                extension_params={} if extension_params is None else extension_params,
            )
        except ConfigError as e:
            raise rerooted(e, cls.PATH, prefix) from None

    def params_for(self, split: str) -> dict[str, Any]:
        """Generator parameters per task for the ``pretrain`` or ``extension`` stream, as written (what
        the stream's document cache is keyed by): ``params``, with ``extension_params`` laid over them
        task by task in the extension mix (e.g. MQAR's ``max_distance`` kept at the pretraining
        context, so retrieval beyond it is never trained)."""
        if split != "extension" or not self.extension_params:
            return self.params
        return {t: {**self.params.get(t, {}), **self.extension_params.get(t, {})} for t in {*self.params, *self.extension_params}}

    def configs_for(self, split: str) -> dict[str, TaskConfig]:
        """Every task's typed config in the ``pretrain`` or ``extension`` stream (:meth:`params_for`'s
        mapping, typed)."""
        return self.configs["extension" if split == "extension" else "pretrain"]

    def for_split(self, split: str, seq_len: int | None = None) -> tuple[float, tuple[int, int], int | None]:
        """(share, length range, mix unit) of the ``pretrain`` or ``extension`` stream.

        With ``fit_context`` the pretraining stream's task documents are sized to its sequence
        length ``seq_len``: ``seq_len - 1`` tokens each (the EOS completes a unit) in mix units of
        ``seq_len``, whatever ``length_range`` and ``mix_unit`` say, so each is one whole sequence
        of the run (a model pretrained at 64 gets 64-token documents, one at 128 128-token ones)."""
        if split == "extension":
            share = self.share if self.extension_share is None else self.extension_share
            return share, self.extension_length_range or self.length_range, self.extension_mix_unit or self.mix_unit
        if self.fit_context:
            if not isinstance(seq_len, int) or seq_len < 2:
                raise ConfigError("data.tasks.fit_context", f"needs the run's sequence length, got {seq_len!r}")
            return self.share, (seq_len - 1, seq_len - 1), seq_len
        return self.share, self.length_range, self.mix_unit


def _check_task_tokens(mix: TaskMix, task_tokens: int, prefix: str) -> None:
    """The mix's dense tasks fit the tokenizer's reserved task tokens in both streams (checked before the
    store is prepared, not when its first document is made)."""
    for split, key in (("pretrain", "params"), ("extension", "extension_params")):
        for name, config in mix.configs_for(split).items():
            why = config.reserved_tokens_error(task_tokens)
            if why:
                raise ConfigError(f"{prefix}.{key}.{name}", why)


@dataclass(frozen=True)
class SyntheticData(Config):
    """The trainer's built-in synthetic stream (``data.synthetic``)."""

    seed: int | None = None
    mean_doc_len: int | None = None
    noise: float = 0.1
    vocab_size: int | None = None

    PATH = "data.synthetic"

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> SyntheticData:
        """The ``synthetic:`` mapping (empty or null: every default)."""
        prefix = cls.PATH if path is None else path
        d = d or {}
        check_mapping(d, prefix, "a mapping (seed, mean_doc_len, noise, vocab_size) or empty")
        check_keys(d, cls.keys(), prefix)
        return cls(
            seed=_int(d.get("seed"), f"{prefix}.seed"),
            mean_doc_len=_int(d.get("mean_doc_len"), f"{prefix}.mean_doc_len", 1),
            noise=_fraction(d.get("noise", 0.1), f"{prefix}.noise", optional=False),
            vocab_size=_int(d.get("vocab_size"), f"{prefix}.vocab_size", 2),
        )


@dataclass(frozen=True)
class DataSection:
    """A run's ``data:`` section: exactly one of ``data`` (a store to prepare or open) or ``synthetic``."""

    data: DataConfig | None = None
    synthetic: SyntheticData | None = None
    store: str | None = None
    seed: int | None = None
    short_share: float | None = None
    long_min_tokens: int | None = None
    tasks: TaskMix | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Any, prefix: str = "data") -> DataSection:
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ConfigError(prefix, f"must be a mapping, got {type(d).__name__}")
        raw = copy.deepcopy(d)
        if "synthetic" in d:
            extra = sorted(set(d) - {"synthetic", "seed"}, key=str)
            if extra:
                raise ConfigError(f"{prefix}.{extra[0]}", "the synthetic stream takes no data-stage or task settings")
            return cls(
                synthetic=SyntheticData.from_dict(d["synthetic"], f"{prefix}.synthetic"),
                seed=_int(d.get("seed"), f"{prefix}.seed"),
                raw=raw,
            )
        data = DataConfig.from_dict({k: v for k, v in d.items() if k not in TRAIN_KEYS}, prefix)
        store = d.get("store")
        if store is not None and (not isinstance(store, str) or not store):
            raise ConfigError(f"{prefix}.store", f"a path of a prepared store, got {store!r}")
        tasks = TaskMix.from_dict(d["tasks"], f"{prefix}.tasks") if d.get("tasks") else None
        if tasks is not None:
            _check_task_tokens(tasks, data.task_tokens, f"{prefix}.tasks")
        return cls(
            data=data,
            store=store,
            seed=_int(d.get("seed"), f"{prefix}.seed"),
            short_share=_fraction(d.get("short_share"), f"{prefix}.short_share"),
            long_min_tokens=_int(d.get("long_min_tokens"), f"{prefix}.long_min_tokens", 1),
            tasks=tasks,
            raw=raw,
        )

    def to_dict(self) -> dict[str, Any]:
        """The section as written (run records and stage keys hash it)."""
        return copy.deepcopy(self.raw)

    def with_store(self, path: str | Path) -> DataSection:
        """This section, reading the prepared store at ``path`` (recorded in its mapping too)."""
        if not str(path):
            raise ConfigError("data.store", "a path of a prepared store, got ''")
        return dataclasses.replace(self, store=str(path), raw={**self.raw, "store": str(path)})

    def store_path(self) -> Path | None:
        """The store this section reads: its ``store`` when it records one, else the store of its
        ``DataConfig`` (which may not be prepared yet); ``None`` for the synthetic stream."""
        if self.data is None:
            return None
        if self.store:
            return Path(self.store)
        return store_path(self.data)


def section_store_path(data: dict[str, Any] | None) -> Path | None:
    """The store a recorded ``data:`` section reads (``None`` for none recorded or the synthetic stream)."""
    return DataSection.from_dict(data).store_path() if data else None
