"""Extending a model that already exists: an archpool checkpoint or a Hugging Face model directory.

The recipes, their RoPE and their training plan are those of a pretraining run's extension
(:func:`archpool.train.extension_plan.plan_extension`, :mod:`archpool.train.extend`); what a model
directory lacks is its pretraining run, so

- its **pretraining context** is read from its config (an archpool extension record, a RoPE scaling's
  ``original_max_position_embeddings``, else ``max_position_embeddings``: :func:`archpool.model.features.features`
  says which) or given (``pretrain_ctx``, ``archpool extend --pretrain-ctx``) where the config cannot tell it;
- the extension's **learning rate** is given (``extension.lr``): there is no pretraining peak to take a third of;
- its **budget** is a number of steps (``steps``) of ``micro_batch_size`` sequences of the extension
  length each (``global_batch_tokens`` to change that), or a ladder of ``budgets``;
- its **data** is a prepared store, a data config or plain-text files, tokenized with the model's own tokenizer.

**Zero steps** is the RoPE change alone (with a logit gain, when asked for): an HF directory is copied
with config.json rewritten (``rope_parameters`` and ``max_position_embeddings`` only,
:func:`archpool.model.hf.rescaled_hf_config`; the weights' bytes unchanged), an archpool checkpoint is
written with its new config. **N steps** train the imported weights with the same ``Trainer`` as a run's
extension, in a resumable run directory (default ``OUT.run/`` beside ``OUT``); the final model is then
written to ``OUT`` in the source's format (an HF directory through :func:`archpool.model.hf.export_hf`).

``OUT/extension.json`` is the provenance: the source (path, format, the sha256 of its files), the recipe,
the pretraining context and where it came from, the steps, tokens and data, the extended model's
extension record and the archpool version. Re-running the same extension on an existing ``OUT`` finds it
complete; another one needs ``replace``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archpool.data.section import DataSection
from archpool.errors import ConfigError, StateError
from archpool.io import atomic_write_json, copy_regular_file, fresh_directory, require_distinct, sha256_json
from archpool.model.config import ModelConfig
from archpool.rundir import CONFIG_NAME, TOKENIZER_FILE, resolve_target, run_dir_final
from archpool.safeload import read_json_object
from archpool.train.config import ExtensionConfig, TrainConfig
from archpool.train.extension_plan import ExtensionPlan, plan_extension

EXTENSION_RECORD = "extension.json"  # the provenance of an extended model directory
RUN_SUFFIX = ".run"  # the default run directory of a trained extension: OUT.run beside OUT
# files of an HF source that describe the source itself, not copied into its zero-step extension
NOT_COPIED = (CONFIG_NAME, "archpool_config.json", "README.md", "MANIFEST.json", EXTENSION_RECORD)
TRAINING_KEYS = ("lr", "warmup_steps", "optimizer", "stages")  # of a plan's record, left out at zero steps


@dataclass(frozen=True)
class ModelSource:
    """A model directory to extend: where its weights are, their format (``hf`` or ``checkpoint``),
    archpool's config of it, its pretraining context and where that came from, and its tokenizer."""

    path: Path
    format: str
    cfg: ModelConfig
    pretrain_ctx: int
    pretrain_ctx_from: str
    tokenizer: Path | None
    sha256: str  # the source's files (weights, config, generation settings, tokenizer files)

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path.resolve()), "format": self.format, "model_sha256": self.sha256}


@dataclass
class ExtendedModel:
    """What :func:`extend_model` wrote (or found complete)."""

    out: Path
    format: str
    steps: int
    length: int
    pretrain_ctx: int
    pretrain_ctx_from: str
    run_dir: Path | None = None
    final_loss: float | None = None
    already_complete: bool = False


def read_source(path: str | Path, pretrain_ctx: int | None = None) -> ModelSource:
    """The model directory ``path`` (an archpool checkpoint, a run directory's final checkpoint, or a Hugging
    Face model directory of an importable family) with its config and pretraining context."""
    from archpool.model.checkpoint import load_config
    from archpool.model.features import features
    from archpool.model.hf import model_file_hashes, read_hf_model_config

    target = resolve_target(path)
    directory = target.checkpoint
    if target.kind == "hf":
        _, cfg = read_hf_model_config(directory)
        fmt = "hf"
    else:
        cfg = load_config(directory)
        fmt = "checkpoint"
    f = features(str(directory), pretrain_ctx=pretrain_ctx)
    return ModelSource(
        path=directory,
        format=fmt,
        cfg=cfg,
        pretrain_ctx=int(f["pretrain_ctx"]),
        pretrain_ctx_from=str(f["pretrain_ctx_from"]),
        tokenizer=_tokenizer_of(target),
        sha256=sha256_json(model_file_hashes(directory)),
    )


def _tokenizer_of(target) -> Path | None:
    """The tokenizer.json beside the model (or in its run directory), else its run's data store's."""
    if target.tokenizer_file is not None:
        return target.tokenizer_file.resolve()
    if target.data_cfg:
        from archpool.data.section import section_store_path

        store = section_store_path(target.data_cfg)
        if store is not None and (store / TOKENIZER_FILE).is_file():
            return (store / TOKENIZER_FILE).resolve()
    return None


def plan_for_model(source: ModelSource, ext: ExtensionConfig, steps: int) -> ExtensionPlan:
    """The extension plan of ``ext`` on ``source`` for ``steps`` steps (or ``ext.budgets``): the pretraining
    context the source was read with, batches of ``ext.micro_batch_size`` sequences of the extension length
    unless ``ext.global_batch_tokens`` says otherwise, and the LR of ``ext.lr``. At zero steps the plan's
    model is the RoPE change alone and its record says so."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ConfigError("--steps", f"a number of training steps >= 0, got {steps!r}")
    if steps and ext.budgets:
        raise ConfigError("--steps", "give steps or a ladder of budgets, not both")
    trains = steps > 0 or bool(ext.budgets)
    if trains and ext.lr is None:
        raise ConfigError(
            "extension.lr", "an existing model has no pretraining run to take the extension's LR from; give it (--lr)"
        )
    length = ext.target_length(source.pretrain_ctx)
    gbt = ext.global_batch_tokens or length * ext.micro_batch_size
    pretrain = TrainConfig(
        seq_len=source.pretrain_ctx, global_batch_tokens=gbt, micro_batch_size=ext.micro_batch_size, max_steps=1
    )
    if not ext.budgets:
        ext = dataclasses.replace(ext, tokens=max(1, steps) * gbt, global_batch_tokens=gbt)
    plan = plan_extension(source.cfg, pretrain, ext, str(source.path.resolve()))
    if trains:
        return plan
    record = {k: v for k, v in plan.extension.items() if k not in TRAINING_KEYS}
    record.update(steps=0, tokens=0)
    return dataclasses.replace(plan, model=plan.model.replace(extension=record), stages=[], tokens=0)


def extension_data(tokenizer: Path | None, data: str | Path | None = None, texts: list[str] | None = None) -> DataSection:
    """The data a trained extension of a model reads, in the model's own tokens (``tokenizer``): a prepared
    store (a directory with manifest.json; its tokenizer must be the model's), a data config file (its
    ``tokenizer:`` defaults to the model's) or plain-text files (``texts``). ConfigError naming the option."""
    from archpool.io import read_config_file
    from archpool.tokenizer import Tokenizer

    if (data is None) == (not texts):
        raise ConfigError(
            "--data", "a trained extension of a model reads a data store or data config (--data) or text files (--text)"
        )
    if tokenizer is None:
        raise ConfigError("--data", "the model has no tokenizer.json beside it: its training data cannot be tokenized")
    want = Tokenizer.load(tokenizer).hash
    if texts:
        missing = [t for t in texts if not Path(t).is_file()]
        if missing:
            raise ConfigError("--text", f"{missing[0]}: no such file")
        section = {"sources": [{"kind": "files", "path": [str(Path(t).resolve()) for t in texts]}], "tokenizer": str(tokenizer)}
        return DataSection.from_dict(section)
    path = Path(data)  # type: ignore[arg-type]
    if path.is_dir() and (path / "manifest.json").is_file():
        from archpool.data.store import Store

        if Store(path).tokenizer_hash != want:
            raise ConfigError("--data", f"{path}: the store was tokenized with another tokenizer than the model's {tokenizer}")
        return DataSection.from_dict({"store": str(path.resolve())})
    if not path.is_file():
        raise ConfigError(
            "--data", f"{path}: neither a prepared data store (a directory with manifest.json) nor a data config file"
        )
    config = read_config_file(path)
    if not isinstance(config, dict):
        raise ConfigError("--data", f"{path}: a data config is a mapping")
    mapping = dict(config.get("data", config))
    if mapping.get("tokenizer") is None and mapping.get("store") is None:
        mapping["tokenizer"] = str(tokenizer)
    elif mapping.get("tokenizer") is not None and Tokenizer.load(mapping["tokenizer"]).hash != want:
        raise ConfigError("--data", f"{path}: tokenizer {mapping['tokenizer']} is not the model's {tokenizer}")
    return DataSection.from_dict(mapping)


def extend_model(  # noqa: PLR0913 — the extension, then keyword-only options, one per `archpool extend` flag
    source: str | Path,
    ext: ExtensionConfig,
    out: str | Path,
    *,
    steps: int = 0,
    pretrain_ctx: int | None = None,
    data: DataSection | None = None,
    run_dir: str | Path | None = None,
    replace: bool = False,
    progress: bool | None = None,
) -> ExtendedModel:
    """Extend the model in ``source`` by ``ext`` into the new model directory ``out`` (see the module
    docstring); ``data`` (:func:`extension_data`) is read by a trained extension only."""
    src = read_source(source, pretrain_ctx)
    out = Path(out)
    require_distinct(src.path, out, "output directory")
    plan = plan_for_model(src, ext, steps)
    trains = bool(plan.stages)
    if trains and data is None:
        raise ConfigError("--data", "a trained extension reads data: give a data store or config (--data) or text files (--text)")
    request = {
        "source": src.sha256,
        "extension": ext.to_dict(),
        "pretrain_ctx": src.pretrain_ctx,
        "steps": steps,
        "data": data.to_dict() if trains and data is not None else None,
    }
    length = int(plan.extension["length"])
    done = _complete(out, request)
    result = ExtendedModel(out, src.format, plan.extension["steps"], length, src.pretrain_ctx, src.pretrain_ctx_from)
    if done is not None:
        result.already_complete, result.final_loss = True, done.get("final_loss")
        result.run_dir = Path(done["run_dir"]) if done.get("run_dir") else None
        return result
    if out.is_dir() and any(out.iterdir()):  # checked before any training; fresh_directory checks it again
        if not replace:
            raise StateError(
                f"{out}: the output directory is not empty; pass --replace to replace it whole, or choose a new directory"
            )
        why = _replaceable(out)
        if why:
            raise StateError(f"{out}: {why}; --replace replaces only this command's own output, choose a new directory")
    if trains:
        result.run_dir = Path(run_dir) if run_dir is not None else out.with_name(out.name + RUN_SUFFIX)
        require_distinct(src.path, result.run_dir, "run directory")
        trained = _train(src, ext, plan, data, result.run_dir, progress)  # type: ignore[arg-type]
        result.final_loss = trained.final_loss
    from archpool.runtime import process_rank

    if process_rank() != 0:
        return result
    provenance = _provenance(src, ext, plan, request, result, data if trains else None)
    with fresh_directory(out, replace=replace, replaceable=_replaceable) as tmp:
        if trains:
            _write_trained(src, result.run_dir, tmp)  # type: ignore[arg-type]
        else:
            _write_zero_step(src, ext, plan, tmp)
        atomic_write_json(tmp / EXTENSION_RECORD, provenance)
    return result


def _complete(out: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """The provenance in ``out`` when it records this very extension (then nothing is redone), else None."""
    path = out / EXTENSION_RECORD
    if not path.is_file():
        return None
    try:
        record = read_json_object(path)
    except ConfigError:
        return None
    return record if record.get("request") == request else None


def _replaceable(directory: Path) -> str | None:
    """Why ``directory`` is not an extended model this command wrote (None when it is one)."""
    return None if (directory / EXTENSION_RECORD).is_file() else f"it is not an extended model (no {EXTENSION_RECORD})"


def _weights(src: ModelSource):
    """The source's state dict in archpool's names (the tied output matrix restored)."""
    if src.format == "hf":
        from archpool.model.hf import import_hf

        return import_hf(src.path).state_dict()
    from archpool.train import checkpoint as ckpt

    return ckpt.load_weights(src.path)[1]


def _gained(src: ModelSource, plan: ExtensionPlan, ext: ExtensionConfig, weights):
    """``weights`` with the plan's logit gain applied (unchanged without one)."""
    gain = plan.extension.get("qk_gain", 1.0)
    if gain == 1.0:
        return weights
    from archpool.train.extend import raise_qk_gain

    return raise_qk_gain(src.cfg, weights, gain, ext.full_layers_only)


def _train(src: ModelSource, ext: ExtensionConfig, plan: ExtensionPlan, data: DataSection, run_dir: Path, progress: bool | None):
    from archpool.train.trainer import Trainer

    if progress is not None:
        plan.train.progress = progress
    record = {
        "kind": "extension",
        "extension": ext.to_dict(),
        "source": str(src.path.resolve()),
        "source_sha256": src.sha256,
        "model": plan.model.to_dict(),
        "data": data.to_dict(),
        "train": plan.train.to_dict(),
    }
    trainer = Trainer(
        run_dir,
        plan.model,
        plan.train,
        data,
        plan.stages,
        init_state=_gained(src, plan, ext, _weights(src)),
        record=record,
        metadata={"stage": "extension", "recipe": ext.recipe, "source": str(src.path.resolve())},
        initial_milestone=0 in (ext.budgets or []),
    )
    return trainer.run()


def _write_zero_step(src: ModelSource, ext: ExtensionConfig, plan: ExtensionPlan, tmp: Path) -> None:
    """The RoPE change alone: an HF source's files with a rewritten config.json (the weights rewritten only
    under a logit gain), or an archpool checkpoint with the new config."""
    from archpool.model.hf import ARCHPOOL_CONFIG_NAME, rescaled_hf_config

    gain = plan.extension.get("qk_gain", 1.0)
    if src.format == "checkpoint":
        from archpool.model.checkpoint import save_state_dict

        weights = _gained(src, plan, ext, _weights(src))
        save_state_dict(weights, plan.model, tmp, metadata={"stage": "extension", "recipe": ext.recipe, "steps": 0})
        if src.tokenizer is not None:
            copy_regular_file(src.tokenizer, tmp / TOKENIZER_FILE)
        return
    if gain != 1.0:  # the weights change: written by the exporter, as a trained extension's
        from archpool.model.hf import export_hf
        from archpool.model.model import Decoder

        model = Decoder(plan.model)
        model.load_state_dict(_gained(src, plan, ext, _weights(src)), strict=False)
        export_hf(model, tmp, tokenizer=src.path if src.tokenizer is not None else None, provenance=_export_provenance(src))
        return
    for f in sorted(src.path.iterdir()):
        if f.name not in NOT_COPIED and f.is_file() and not f.is_symlink():
            copy_regular_file(f, tmp / f.name)
    raw = read_json_object(src.path / CONFIG_NAME)
    atomic_write_json(tmp / CONFIG_NAME, rescaled_hf_config(raw, plan.model))
    atomic_write_json(tmp / ARCHPOOL_CONFIG_NAME, plan.model.to_dict())


def _write_trained(src: ModelSource, run_dir: Path, tmp: Path) -> None:
    """The trained run's final model in the source's format."""
    final = run_dir_final(run_dir)
    if src.format == "hf":
        from archpool.model.hf import export_hf

        tokenizer = src.path if src.tokenizer is not None and src.tokenizer.parent == src.path else src.tokenizer
        export_hf(final, tmp, tokenizer=tokenizer, require_tokenizer=False, provenance=_export_provenance(src))
        return
    from archpool.model.checkpoint import WEIGHTS_NAME, load_config, verify_checkpoint

    verify_checkpoint(final)
    copy_regular_file(final / WEIGHTS_NAME, tmp / WEIGHTS_NAME)
    atomic_write_json(tmp / CONFIG_NAME, read_json_object(final / CONFIG_NAME))
    load_config(tmp)  # the copy is a loadable checkpoint
    if src.tokenizer is not None:
        copy_regular_file(src.tokenizer, tmp / TOKENIZER_FILE)


def _export_provenance(src: ModelSource) -> dict[str, str]:
    return {"extended_from": str(src.path.resolve()), "extended_from_sha256": src.sha256}


def _provenance(
    src: ModelSource, ext: ExtensionConfig, plan: ExtensionPlan, request: dict[str, Any], result: ExtendedModel, data
) -> dict[str, Any]:
    from archpool.version import git_commit, package_version

    if src.pretrain_ctx_from == "given":
        ctx_note = "given (--pretrain-ctx)"
    else:
        ctx_note = f"read from the source's {src.pretrain_ctx_from}"
    return {
        "kind": "extension",
        "source": src.describe(),
        "recipe": ext.recipe,
        "extension_config": ext.to_dict(),
        "pretrain_ctx": src.pretrain_ctx,
        "pretrain_ctx_from": src.pretrain_ctx_from,
        "pretrain_ctx_note": ctx_note,
        "length": result.length,
        "steps": plan.extension["steps"],
        "tokens": plan.tokens,
        "data": None if data is None else data.to_dict(),
        "run_dir": None if result.run_dir is None else str(result.run_dir.resolve()),
        "final_loss": result.final_loss,
        "extension": plan.extension,
        "format": src.format,
        "archpool_version": package_version(),
        "archpool_commit": git_commit() or "unknown",
        "request": request,
    }
