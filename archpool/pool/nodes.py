"""The typed contract between the plan and the stage functions: each stage's config and result.

A node's config is one of these frozen dataclasses, built once by :func:`archpool.pool.plan.build_plan`
from the pool's typed sections and the node's references (run, recipe, milestone, rung, phase). Its
``to_dict()`` is what the node's content key hashes and what ``node.json`` records; plan.json holds
the pool once and each node's references, never these configs (the worker builds them again from the
pool and checks their keys). A stage returns the matching ``*Result`` mapping, which its ``DONE``
marker records.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypedDict

from archpool.attention.settings import Settings as AttentionSettings
from archpool.data.section import DataSection
from archpool.model.config import ModelConfig
from archpool.pool.sections import EvalSettings
from archpool.train.config import ExtensionConfig, TrainConfig

BASE, EXTENDED = "base", "extended"  # an eval's phase: before extension (``base_`` columns) or after
OPTIONAL = ("rung", "checkpoint", "content", "texts", "text")  # fields a config omits when unset


class _StageConfig:
    """``to_dict``: each typed section as its own ``to_dict()``, optional fields only when set."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in OPTIONAL:
                continue
            out[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
        return out


@dataclass(frozen=True)
class DataConfig(_StageConfig):
    """The pool's data stage: its ``data:`` section, prepared once for every run."""

    data: DataSection
    backend: str


@dataclass(frozen=True)
class PretrainConfig(_StageConfig):
    """A run's pretraining: its model at its context and seed; ``train`` is the run's ``TrainConfig``
    (the pool's ``train:`` section as written for a backend other than ``real``)."""

    model: ModelConfig
    seq_len: int
    seed: int
    init_seed: int
    train: TrainConfig | dict[str, Any]
    milestones: list[float]


@dataclass(frozen=True)
class ExtendConfig(_StageConfig):
    """One recipe extending a run from the end of pretraining (``milestone`` 1) or a milestone; ``recipe``
    is the ``ExtensionConfig`` resolved to the pool's length (the recipe as written for another backend)."""

    recipe: ExtensionConfig | dict[str, Any]
    milestone: float
    seed: int
    long_ctx: int
    pretrain_ctx: int

    @property
    def from_final(self) -> bool:
        return self.milestone >= 1.0


@dataclass(frozen=True)
class CheckpointExtendConfig(_StageConfig):
    """A checkpoint run's model (``checkpoint``, with its ``content`` key) extended by one recipe
    (:func:`archpool.train.extend_model.extend_model`): the RoPE change alone (``steps`` 0) or ``steps`` of
    training on ``data`` (the run's text files or data store, with their content hashes), from the
    pretraining context ``pretrain_ctx``; ``recipe`` is the pool's, resolved to its length."""

    recipe: ExtensionConfig | dict[str, Any]
    steps: int
    pretrain_ctx: int
    long_ctx: int
    checkpoint: str
    content: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class EvalConfig(_StageConfig):
    """An evaluation of one model: before extension (``phase`` base) or after, at one ``rung`` of a
    ladder; a checkpoint run's names its model (``checkpoint``) and that model's ``content`` key.
    ``to_dict`` holds of ``eval`` only what this node's scores depend on (:func:`scored_eval_settings`)."""

    eval: EvalSettings
    phase: str
    seq_len: int
    long_ctx: int
    rung: int | None = None
    checkpoint: str | None = None
    content: str | None = None

    @property
    def base(self) -> bool:
        return self.phase == BASE

    def to_dict(self) -> dict[str, Any]:
        """The config with ``eval`` as :func:`scored_eval_settings` gives it: what the node's scores depend on."""
        out = super().to_dict()
        out["eval"] = scored_eval_settings(self.eval, self.base, self.long_ctx)
        return out


PHASE_FIELDS = ("lengths", "length_ratios", "base_lengths", "base_length_ratios")  # resolved per phase
PLAN_FIELDS = ("enabled", "base")  # which eval nodes a pool has, not what one scores


def scored_eval_settings(settings: EvalSettings, base: bool, long_ctx: int) -> dict[str, Any]:
    """The ``eval:`` section as one phase's eval node scores it: its lengths resolved
    (:meth:`EvalSettings.lengths_at`, so another phase's lengths do not reach it), without the fields that
    only say which eval nodes the pool has. Each task's cells are keyed by their own settings
    (:mod:`archpool.pool.stages.eval`), so a node re-keyed by one task's settings scores only that task."""
    out = {k: v for k, v in settings.to_dict().items() if k not in PHASE_FIELDS + PLAN_FIELDS}
    out["lengths"] = settings.lengths_at(base, long_ctx)
    return out


@dataclass(frozen=True)
class AttentionConfig(_StageConfig):
    """The attention analysis of one model at ``analysis_len``; a checkpoint run's also names the shared
    texts it reads (``texts``: name -> sha256; ``text``: ``texts`` or ``filler``)."""

    attention: AttentionSettings
    seq_len: int
    long_ctx: int
    analysis_len: int
    checkpoint: str | None = None
    content: str | None = None
    texts: dict[str, str] | None = None
    text: str | None = None


StageConfig = DataConfig | PretrainConfig | ExtendConfig | CheckpointExtendConfig | EvalConfig | AttentionConfig


class StageResult(TypedDict, total=False):
    """What every stage returns (its ``DONE`` marker's ``result``): metrics for the run's results row."""

    metrics: dict[str, Any]


class DataResult(StageResult, total=False):
    store: str  # the prepared store's directory (absent for the synthetic stream)
    key: str
    vocab_size: int
    counts: dict[str, Any]


class PretrainResult(StageResult, total=False):
    steps: int
    milestones: dict[str, str]  # sections.milestone_key(fraction) -> the checkpoint's step name


class ExtendResult(StageResult, total=False):
    tokens: int
    length: int
    model: str  # a checkpoint run's extension: the extended model's directory
    run: str  # ... and the directory of its training run (a ladder's rungs are its milestones)


class EvalResult(StageResult, total=False):
    lengths: list[int]


class AttentionResult(StageResult, total=False):
    json: str  # the analysis's JSON file
