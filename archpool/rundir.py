"""The run-directory layout, its records, and what a model path names.

A training run directory (``archpool train``, ``archpool extend``, a pool's pretrain/extend stage)::

    RUN/run_config.json          the run record (RunRecord; kind "pretrain" or "extension")
    RUN/ckpt/step_NNNNNN/        rolling checkpoints (the newest few)
    RUN/milestones/step_NNNNNN/  kept checkpoints
    RUN/milestones/final/        the finished model; written last, it marks the run complete
    RUN/extend/<name>/           an extension run of RUN's model (a run directory itself)

A pool keeps one directory per run, ``OUT/runs/<run>/``, beside ``OUT/plan.json``; the pool's plan says
which stage directory holds that run's model. Its eval nodes share their finished cells in ``OUT/cells/``
and the Hugging Face exports of its archpool models in ``OUT/hf/``. A checkpoint directory holds
``config.json`` with an ``archpool_format`` key; a Hugging Face model directory holds a ``config.json``
without one.

:func:`resolve_target` says what a path is and where its checkpoint, run record, tokenizer and data
config are. It reads directories and JSON only (no torch, no stage): checking a checkpoint's weights
against its manifest is the caller's step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from archpool.errors import CheckpointError, ConfigError
from archpool.io import owned_dir, owned_path

RUN_RECORD = "run_config.json"
CHECKPOINTS = "ckpt"
MILESTONES = "milestones"
FINAL = "final"
EXTEND = "extend"
POOL_RUNS = "runs"
POOL_PLAN = "plan.json"
POOL_STAGES = "stages"
POOL_EVENTS = "events.jsonl"
POOL_REPORT = "report"
POOL_CELLS = "cells"  # the pool's finished eval cells, shared by its eval nodes
POOL_EXPORTS = "hf"  # the Hugging Face exports its eval nodes run the external benchmarks on, one per model
RUN_STATUS = "status.json"
RUN_LOG = "log.txt"
RUN_METRICS = "metrics.jsonl"  # one JSON row per logged training step
CONFIG_NAME = "config.json"
FORMAT_KEY = "archpool_format"
TOKENIZER_FILE = "tokenizer.json"

TargetKind = Literal["run", "checkpoint", "hf"]
# A pool run directory -> (the stage directory holding its model, how to name that model).
PoolRunLookup = Callable[[Path], tuple[Path, str]]


# ---------------------------------------------------------------------------------------------- layout
# A pool's and a run's directories are made by archpool: each directory path here is refused (StateError)
# when an entry on the way below the pool or run directory is a symbolic link (archpool.io.owned_path), so
# no writer follows a planted link out of it. Files in them (status, logs, records) are refused as links
# by the writers themselves (archpool.io.atomic_path, open_append).
def run_dir_final(run_dir: str | Path) -> Path:
    """Where a finished run's model lives (a full checkpoint, loadable with ``load_checkpoint``)."""
    return milestone_dir(run_dir, FINAL)


def extension_root(run_dir: str | Path) -> Path:
    """The directory holding a run's extension runs, one ``<name>/`` each."""
    return owned_path(run_dir, EXTEND)


def extension_run_dir(run_dir: str | Path, name: str) -> Path:
    return owned_path(run_dir, EXTEND, name)


def checkpoints_dir(run_dir: str | Path) -> Path:
    """A run's rolling checkpoints, one ``step_NNNNNN/`` each."""
    return owned_path(run_dir, CHECKPOINTS)


def milestones_dir(run_dir: str | Path) -> Path:
    """A run's kept checkpoints: ``step_NNNNNN/`` and ``final/``."""
    return owned_path(run_dir, MILESTONES)


def milestone_dir(run_dir: str | Path, name: str) -> Path:
    """One kept checkpoint of a run (``step_000050``, or ``final``)."""
    return owned_path(run_dir, MILESTONES, name)


def pool_runs_dir(out: str | Path) -> Path:
    return owned_path(out, POOL_RUNS)


def pool_run_dir(out: str | Path, run: str) -> Path:
    return owned_path(out, POOL_RUNS, run)


def pool_run_status(out: str | Path, run: str) -> Path:
    return pool_run_dir(out, run) / RUN_STATUS


def pool_run_log(out: str | Path, run: str) -> Path:
    return pool_run_dir(out, run) / RUN_LOG


def pool_plan_path(out: str | Path) -> Path:
    return Path(out) / POOL_PLAN


def pool_events_path(out: str | Path) -> Path:
    return Path(out) / POOL_EVENTS


def pool_report_dir(out: str | Path) -> Path:
    return owned_path(out, POOL_REPORT)


def stage_dir(out: str | Path, stage: str, key: str) -> Path:
    """One stage output of a pool: ``OUT/stages/<stage>/<key>/``."""
    return owned_path(out, POOL_STAGES, stage, key)


def stage_pool_dir(directory: str | Path) -> Path | None:
    """The pool directory ``OUT`` of a stage output ``OUT/stages/<stage>/<key>/``; None for a directory
    outside that layout."""
    d = Path(directory)
    return d.parents[2] if len(d.parents) > 2 and d.parent.parent.name == POOL_STAGES else None


def pool_cells_dir(out: str | Path) -> Path:
    """The pool's finished eval cells, one file per cell named by its cache key: ``OUT/cells/`` (made here)."""
    return owned_dir(out, POOL_CELLS)


def pool_exports_dir(out: str | Path) -> Path:
    """The pool's Hugging Face exports of its archpool models, one ``<key>/`` per model: ``OUT/hf/`` (made here)."""
    return owned_dir(out, POOL_EXPORTS)


def checkpoint_candidates(run_dir: str | Path, source: str) -> list[Path]:
    """Where a checkpoint named ``source`` may be, in order: ``final``, a milestone name
    (``step_000050``), a ``ckpt/`` step, a checkpoint path, or a path inside the run."""
    run_dir = Path(run_dir)
    if source == FINAL:
        return [run_dir_final(run_dir)]
    return [milestones_dir(run_dir) / source, checkpoints_dir(run_dir) / source, Path(source), run_dir / source]


def is_archpool_checkpoint(directory: str | Path) -> bool:
    """Whether ``directory`` holds a readable ``config.json`` with the ``archpool_format`` key."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        return False
    from archpool.safeload import read_json_object

    try:
        return FORMAT_KEY in read_json_object(path)
    except ConfigError:
        return False


def is_pool_run(path: Path) -> bool:
    """Whether ``path`` is a pool's ``runs/<run>/`` directory (no run record of its own)."""
    return not (path / RUN_RECORD).is_file() and path.parent.name == POOL_RUNS and (path.parent.parent / POOL_PLAN).is_file()


# ---------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class ExtensionRecord:
    """What an extension run records about its recipe: the ``extension`` section it ran and the
    pretraining context its model config keeps (``model.extension.pretrain_seq_len``)."""

    recipe: str | None
    name: str | None
    length: int | None
    pretrain_seq_len: int | None
    source: str | None

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> ExtensionRecord:
        ext = record["extension"] if isinstance(record.get("extension"), dict) else {}
        model = record["model"] if isinstance(record.get("model"), dict) else {}
        model_ext = model["extension"] if isinstance(model.get("extension"), dict) else {}
        return cls(
            recipe=ext.get("recipe"),
            name=ext.get("name"),
            length=ext.get("length"),
            pretrain_seq_len=model_ext.get("pretrain_seq_len"),
            source=record.get("source"),
        )


@dataclass(frozen=True)
class RunRecord:
    """A run directory's ``run_config.json``: the sections the run was trained with, as written."""

    kind: str | None  # "pretrain" | "extension"
    model: dict[str, Any]
    data: dict[str, Any] | None
    train: dict[str, Any]
    extension: ExtensionRecord | None  # extension runs only
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> RunRecord:
        kind = record.get("kind")
        return cls(
            kind=kind,
            model=record.get("model") or {},
            data=record.get("data") or None,
            train=record.get("train") or {},
            extension=ExtensionRecord.from_dict(record) if kind == "extension" else None,
            raw=record,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> RunRecord:
        """The record in ``path``; CheckpointError naming the file when it is not readable JSON."""
        from archpool.safeload import read_json_file

        path = Path(path)
        try:
            data = read_json_file(path)
        except ConfigError as e:
            raise CheckpointError(f"{path}: unreadable run record ({e.message})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: unreadable run record (not a JSON object)")
        return cls.from_dict(data)

    @property
    def config_sections(self) -> dict[str, Any]:
        """The record's ``model``, ``data``, ``train`` and ``extension`` sections, as written."""
        return {k: self.raw[k] for k in ("model", "data", "train", "extension") if k in self.raw}

    @property
    def train_seq_len(self) -> int | None:
        return self.train.get("seq_len")

    @property
    def recipe_label(self) -> str:
        """`` [ntk to 512 tokens]`` for an extension run's recipe, else empty."""
        ext = self.raw["extension"] if isinstance(self.raw.get("extension"), dict) else {}
        if not ext.get("recipe"):
            return ""
        return f" [{ext['recipe']}" + (f" to {ext['length']} tokens]" if ext.get("length") else "]")


def read_run_record(run_dir: str | Path) -> RunRecord | None:
    """The run record of ``run_dir``; None when it has none."""
    path = Path(run_dir) / RUN_RECORD
    return RunRecord.from_file(path) if path.is_file() else None


# ---------------------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """What a model path names. ``kind``: ``run`` (a run directory, pretraining or extension),
    ``checkpoint`` (an archpool checkpoint or milestone) or ``hf`` (a Hugging Face model directory)."""

    path: Path  # the path as given
    kind: TargetKind
    checkpoint: Path  # the directory holding the weights and config.json
    run_dir: Path | None = None  # the run directory whose record describes the checkpoint
    record: RunRecord | None = None  # that run's record
    description: str = ""  # how to name the model to a user

    @property
    def record_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / RUN_RECORD

    @property
    def name(self) -> str:
        """A short name for tables: the run's for its final milestone, else the path's last part."""
        if self.kind == "checkpoint" and self.path.name == FINAL:
            return self.path.parent.parent.name
        return self.path.name

    @property
    def data_cfg(self) -> dict[str, Any] | None:
        """The recorded ``data:`` section of the run (None without a run record or data section)."""
        return None if self.record is None else self.record.data

    @property
    def tokenizer_file(self) -> Path | None:
        """A tokenizer.json beside the checkpoint, else in its run directory."""
        for d in filter(None, (self.checkpoint, self.run_dir)):
            if (d / TOKENIZER_FILE).is_file():
                return d / TOKENIZER_FILE
        return None


def resolve_target(
    path: str | Path,
    *,
    extended: bool = False,
    extension: str | None = None,
    pool_run: PoolRunLookup | None = None,
) -> Target:
    """What ``path`` is, in this order: a pool's ``runs/<run>/`` (with ``pool_run``), a run directory,
    an archpool checkpoint or milestone, a Hugging Face model directory. CheckpointError otherwise, or
    when a run has no final checkpoint yet.

    A run directory resolves to its final checkpoint, or with ``extended`` to its extended model under
    ``extend/<name>/`` when it has one (``extension`` picks one of several). The two differ because
    export-hf and ``archpool.load`` hand over the last model trained, while eval, attention and features
    measure the run they are given (a pool evaluates each extension as a target of its own).
    ``pool_run`` maps a pool run to its stage directory: the pool's plan decides that, and the pool
    sits above this module, so the caller passes the lookup (without one a pool run is no target).
    A checkpoint's run record is the one in its parent or grandparent (``RUN/milestones/<name>``,
    ``RUN/ckpt/<step>``)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run, checkpoint or model directory")
    description = ""
    model_dir = path
    if pool_run is not None and is_pool_run(path):
        model_dir, description = pool_run(path)
    record = read_run_record(model_dir)
    if record is not None:
        return _run_target(path, model_dir, record, extended, extension, description)
    if is_archpool_checkpoint(path):
        return _checkpoint_target(path)
    if (path / CONFIG_NAME).is_file():
        return Target(path, "hf", path, description="Hugging Face model")
    accepted = "a run directory (run_config.json), " + ("a pool run (runs/<run>/), " if pool_run else "")
    raise CheckpointError(
        f"{path}: neither {accepted}an archpool checkpoint (config.json with archpool_format) "
        "nor a Hugging Face model directory (no config.json)"
    )


def _run_target(path: Path, run_dir: Path, record: RunRecord, extended: bool, extension: str | None, description: str) -> Target:
    """A run directory's final checkpoint, or (``extended``, a pretraining run) its extended model."""
    chosen = None
    if extended and record.kind != "extension":
        chosen = pick_extension(finished_extensions(run_dir), extension, run_dir)
    if chosen is not None:
        run_dir = chosen[1]
        record = read_run_record(run_dir) or record
        description = "extended model"
    elif not description:
        if record.kind == "extension":
            description = "extended model"
        elif not extended:
            description = "final pretraining milestone"
        else:
            description = "final pretraining milestone (no extension found)"
    return Target(path, "run", final_checkpoint(run_dir), run_dir, record, description + record.recipe_label)


def _checkpoint_target(path: Path) -> Target:
    """An archpool checkpoint, with the run record of ``RUN/milestones/<name>`` or ``RUN/ckpt/<step>``."""
    for d in (path.parent, path.parent.parent):
        record = read_run_record(d)
        if record is not None:
            return Target(path, "checkpoint", path, d, record, f"checkpoint {path.name} of run {d}")
    return Target(path, "checkpoint", path, description=f"checkpoint {path.name}")


def final_checkpoint(run_dir: Path) -> Path:
    """The run's final checkpoint; CheckpointError while the run has none."""
    final = run_dir_final(run_dir)
    if not is_archpool_checkpoint(final):
        raise CheckpointError(f"{run_dir}: run has no final checkpoint yet ({final})")
    return final


def finished_extensions(run_dir: Path) -> dict[str, Path]:
    """The run's extension runs under ``extend/`` that have a final checkpoint, by directory name."""
    return {
        d.name: d
        for d in sorted(extension_root(run_dir).glob("*"))
        if (d / RUN_RECORD).is_file() and is_archpool_checkpoint(run_dir_final(d))
    }


def pick_extension(candidates: dict[str, Any], extension: str | None, where: Path) -> tuple[str, Any] | None:
    """One of several extensions: the one named (its name, or a ``:name`` / ``/name`` suffix), the only
    one, None for none, or a CheckpointError listing them."""
    if extension is not None:
        hits = [k for k in candidates if k == extension or k.endswith(f":{extension}") or k.endswith(f"/{extension}")]
        if len(hits) != 1:
            raise CheckpointError(f"{where}: no single extension {extension!r} (has: {', '.join(candidates) or 'none'})")
        return hits[0], candidates[hits[0]]
    if not candidates:
        return None
    if len(candidates) > 1:
        raise CheckpointError(
            f"{where}: several extended models ({', '.join(candidates)}); choose one with "
            "--extension NAME, or --pretrained for the pretraining checkpoint"
        )
    return next(iter(candidates.items()))
