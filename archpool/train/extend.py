"""Context extension: a recipe turns a pretrained checkpoint's RoPE into new settings and a plan
of training stages at the longer length (docs/extensibility.md).

- ``ntk`` / ``abf`` (the paper's "NTK 1-stage"): raise theta (×16 by default, 500K → 8M) and train
  one stage at the extension length; ``full_layers_only`` raises it on full-attention layers only
  and keeps the pretraining theta on sliding-window layers (Olmo 3's practice);
- ``yarn``: YaRN scaling by ``factor`` relative to the pretraining context, two stages (half the
  length, then the full length; half the tokens each) under one warmup + linear anneal;
  ``full_layers_only`` keeps plain RoPE on sliding-window layers (Olmo 3);
- ``pi``: linear position interpolation (for comparison).
The extended model's config records the new ``rope`` and an ``extension`` dict with the recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from archpool.errors import CheckpointError
from archpool.io import sha256_file
from archpool.model.config import ModelConfig
from archpool.rundir import RUN_RECORD, checkpoint_candidates, extension_run_dir, milestone_dir, read_run_record
from archpool.train import checkpoint as ckpt
from archpool.train.config import ExtensionConfig, RunConfig
from archpool.train.extension_plan import (  # the plan is config arithmetic, importable without torch
    ExtensionPlan,
    check_extension_name,
    extension_dir_name,
    extension_rope,
    plan_extension,
    qk_gain,
)
from archpool.train.trainer import Trainer, TrainResult

__all__ = [
    "ExtensionPlan",
    "check_extension_name",
    "extend",
    "extension_configs",
    "extension_dir_name",
    "extension_rope",
    "load_run_config",
    "plan_extension",
    "qk_gain",
    "raise_qk_gain",
    "resolve_source",
    "rung_dir",
]


def raise_qk_gain(cfg: ModelConfig, weights: dict[str, torch.Tensor], gain: float, full_layers_only: bool) -> dict:
    """``weights`` with every attention logit of each layer (full-attention layers only with
    ``full_layers_only``) multiplied by ``gain``: a lower softmax temperature for any architecture.

    With QK-norm the query-norm weight is scaled (the norm would undo a scaled projection); without it
    the query projection (weight and bias). RoPE rotates queries linearly, so either way every logit
    q·k / √head_dim of the layer is ``gain`` times what it was."""
    out = dict(weights)
    for i, kind in enumerate(cfg.layer_types):
        if full_layers_only and kind != "full_attention":
            continue
        names = [f"layers.{i}.attn.q_norm.weight"] if cfg.qk_norm != "none" else [f"layers.{i}.attn.q_proj.weight"]
        if cfg.qk_norm == "none" and cfg.qkv_bias:
            names.append(f"layers.{i}.attn.q_proj.bias")
        for name in names:
            if name not in out:
                raise CheckpointError(f"no {name} in the checkpoint (needed to scale the attention logits)")
            out[name] = out[name] * gain
    return out


def resolve_source(run_dir: str | Path, source: str) -> Path:
    """``final``, a milestone name (``step_000050``), a ``ckpt/`` step, or a checkpoint path."""
    run_dir = Path(run_dir)
    candidates = checkpoint_candidates(run_dir, source)
    for c in candidates:
        if c.is_dir():
            ckpt.validate(c)
            return c
    raise CheckpointError(f"{run_dir}: no checkpoint {source!r} (looked in {', '.join(str(c) for c in candidates)})")


def extend(
    run_dir: str | Path,
    ext: ExtensionConfig,
    run_cfg: RunConfig | None = None,
    progress: bool | None = None,
    out: str | Path | None = None,
) -> TrainResult:
    """Extend a pretrained run's checkpoint into ``out`` (default ``RUN/extend/<name>/``); re-running resumes."""
    run_dir = Path(run_dir)
    extension_dir_name(ext)  # before any work: the name becomes a directory
    if run_cfg is None:
        run_cfg = load_run_config(run_dir)
    source = resolve_source(run_dir, ext.source)  # verified against its manifest (size + sha256)
    source_cfg, weights = ckpt.load_weights(source)
    plan = plan_extension(source_cfg, run_cfg.train, ext, ext.source)
    if progress is not None:
        plan.train.progress = progress
    record = {
        "kind": "extension",
        "extension": ext.to_dict(),
        "source": str(source.resolve()),
        "source_sha256": sha256_file(source / ckpt.MANIFEST_NAME),
        "model": plan.model.to_dict(),
        "data": run_cfg.data.to_dict(),
        "train": plan.train.to_dict(),
    }
    gain = plan.extension.get("qk_gain", 1.0)
    if gain != 1.0:
        weights = raise_qk_gain(source_cfg, weights, gain, ext.full_layers_only)
    out_dir = Path(out) if out is not None else extension_run_dir(run_dir, ext.run_name)
    metadata = {"stage": "extension", "recipe": ext.recipe}
    trainer = Trainer(
        out_dir,
        plan.model,
        plan.train,
        run_cfg.data,
        plan.stages,
        init_state=weights,
        record=record,
        metadata=metadata,
        initial_milestone=0 in (ext.budgets or []),
    )
    return trainer.run()


def rung_dir(extension_dir: str | Path, budget: int) -> Path:
    """The checkpoint of one ladder rung (``budget`` steps) of an extension run."""
    return milestone_dir(extension_dir, ckpt.step_name(budget))


def load_run_config(run_dir: str | Path) -> RunConfig:
    """The config a pretraining run was trained with, from its run record."""
    record = read_run_record(run_dir)
    if record is None:
        raise CheckpointError(f"{run_dir}: not a pretraining run directory (no {RUN_RECORD})")
    if record.kind != "pretrain":
        raise CheckpointError(f"{Path(run_dir) / RUN_RECORD}: not a pretraining run (kind={record.kind!r})")
    return RunConfig.from_dict(record.config_sections)


def extension_configs(run_cfg: RunConfig, overrides: dict[str, Any] | None = None) -> list[ExtensionConfig]:
    """The run's extension sections (the paper's default ``ntk`` recipe when there are none)."""
    exts = run_cfg.extension or [ExtensionConfig()]
    if overrides:
        exts = [ExtensionConfig.from_dict({**e.to_dict(), **overrides}) for e in exts]
    return exts
