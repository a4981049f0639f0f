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

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from archpool.errors import CheckpointError, ConfigError
from archpool.io import sha256_file
from archpool.model.config import ModelConfig, RopeConfig
from archpool.names import check_name
from archpool.study import THETA_RECIPES
from archpool.train import checkpoint as ckpt
from archpool.train.config import ExtensionConfig, RunConfig, TrainConfig
from archpool.train.trainer import RUN_RECORD, Stage, Trainer, TrainResult, run_dir_final

RESERVED_NAMES = ("base",)  # "base" prefixes the pre-extension columns of pool results


def check_extension_name(name: str) -> str:
    """``name`` if it can be the extension's directory under ``RUN/extend/``; else a ConfigError."""
    return check_name("extension.name", name, reserved=RESERVED_NAMES)


def extension_dir_name(ext: ExtensionConfig) -> str:
    """The checked directory name of ``ext`` under ``RUN/extend/`` (an explicit empty name is an error)."""
    return check_extension_name(ext.run_name if ext.name is None else ext.name)


@dataclass
class ExtensionPlan:
    model: ModelConfig  # the extended model's config (new rope, max_seq_len, extension record)
    train: TrainConfig  # optimizer / schedule / batch for the extension phase
    stages: list[Stage]
    tokens: int


def extension_rope(base: RopeConfig, ext: ExtensionConfig, pretrain_len: int, length: int) -> RopeConfig:
    """The RoPE settings a recipe gives a model pretrained at ``pretrain_len`` and extended to ``length``."""
    factor = float(ext.factor) if ext.factor is not None else length / pretrain_len
    if ext.recipe in THETA_RECIPES:
        theta = float(ext.new_theta) if ext.new_theta is not None else base.theta * ext.theta_ratio
        if ext.full_layers_only:  # Olmo 3: raise theta on full-attention layers, sliding ones keep theirs
            local = base.sliding_theta if base.full_layers_only and base.sliding_theta is not None else base.theta
            return RopeConfig(theta=theta, type="default", full_layers_only=True, sliding_theta=local)
        return RopeConfig(theta=theta, type="default")
    if ext.new_theta is not None:
        raise ConfigError(
            "extension.new_theta", f"{ext.recipe!r} keeps theta and scales positions; new_theta applies to ntk / abf"
        )
    if ext.recipe == "pi":
        return RopeConfig(theta=base.theta, type="linear", factor=factor, full_layers_only=ext.full_layers_only)
    return RopeConfig(
        theta=base.theta,
        type="yarn",
        factor=factor,
        original_max_seq_len=pretrain_len,
        beta_fast=ext.beta_fast,
        beta_slow=ext.beta_slow,
        full_layers_only=ext.full_layers_only,
    )


def plan_extension(source_cfg: ModelConfig, pretrain: TrainConfig, ext: ExtensionConfig, source: str) -> ExtensionPlan:
    pre_len = pretrain.resolved_seq_len(source_cfg.max_seq_len)
    length = ext.length or ext.length_ratio * pre_len
    if length <= pre_len:
        raise ConfigError("extension.length", f"must exceed the pretraining context {pre_len}, got {length}")
    if ext.recipe == "yarn" and length % 2:
        raise ConfigError("extension.length", f"yarn's first stage runs at length / 2; use an even length, got {length}")
    pretrain_tokens = pretrain.total_steps() * pretrain.global_batch_tokens
    tokens = ext.tokens or max(1, round(ext.token_fraction * pretrain_tokens))
    unit = length * ext.micro_batch_size
    gbt = ext.global_batch_tokens or unit * math.ceil(pretrain.global_batch_tokens / unit)
    if gbt % length:
        raise ConfigError("extension.global_batch_tokens", f"{gbt} is not a multiple of the extension length {length}")
    n_stages = 2 if ext.recipe == "yarn" else 1
    steps = max(ext.budgets) if ext.budgets else max(n_stages, math.ceil(tokens / gbt))
    warmup = ext.warmup_steps if ext.warmup_steps is not None else (max(1, round(0.05 * steps)) if steps > 1 else 0)
    if warmup > steps:
        raise ConfigError("extension.warmup_steps", f"{warmup} warmup steps exceed the {steps}-step extension")
    if n_stages == 2:
        first = steps // 2
        stages = [Stage("yarn_stage1", length // 2, first, "extension"), Stage("yarn_stage2", length, steps - first, "extension")]
    else:
        stages = [Stage(ext.recipe, length, steps, "extension")]
    rope = extension_rope(source_cfg.rope, ext, pre_len, length)
    lr = ext.lr or ext.lr_ratio * pretrain.lr  # the extension's own LR, not the pretraining peak
    record = {
        "recipe": ext.recipe,
        "name": ext.run_name,
        "source": source,
        "pretrain_seq_len": pre_len,
        "length": length,
        "tokens": steps * gbt,
        "steps": steps,
        "theta_before": source_cfg.rope.theta,
        "theta": rope.theta,
        "rope_type": rope.type,
        "factor": rope.factor,
        "full_layers_only": rope.full_layers_only,
        "stages": [{"name": s.name, "seq_len": s.seq_len, "steps": s.steps} for s in stages],
        "lr": lr,
        "warmup_steps": warmup,
        "optimizer": "fresh AdamW",
    }
    if ext.budgets:
        record["budgets"] = sorted(ext.budgets)
    gain = qk_gain(ext, length / pre_len)
    if gain != 1.0:
        record["qk_gain"] = gain
    model = source_cfg.replace(rope=rope, max_seq_len=max(length, source_cfg.max_seq_len), extension=record)
    train = TrainConfig.from_dict(
        {
            **pretrain.to_dict(),
            "lr": lr,
            "final_lr_ratio": ext.final_lr_ratio,
            "warmup_steps": warmup,
            "schedule": "constant" if ext.budgets else "linear",
            "weight_decay": pretrain.weight_decay if ext.weight_decay is None else ext.weight_decay,
            "global_batch_tokens": gbt,
            "micro_batch_size": ext.micro_batch_size,
            "seq_len": length,
            "max_steps": steps,
            "max_tokens": None,
            "milestones": sorted(b for b in ext.budgets or [] if b > 0),
            "intra_doc_mask": pretrain.intra_doc_mask if ext.intra_doc_mask is None else ext.intra_doc_mask,
            "ckpt_every": ext.ckpt_every or pretrain.ckpt_every,
            "log_every": ext.log_every or pretrain.log_every,
        }
    )
    return ExtensionPlan(model, train, stages, steps * gbt)


def qk_gain(ext: ExtensionConfig, scale: float) -> float:
    """The factor a recipe multiplies the QK-norm query gains by at an extension by ``scale`` (1: none)."""
    if ext.qk_gain is not None:
        return float(ext.qk_gain)
    if ext.qk_gain_alpha is not None:
        return 1.0 + float(ext.qk_gain_alpha) * math.log(scale)
    return 1.0


def raise_qk_gain(cfg: ModelConfig, weights: dict[str, torch.Tensor], gain: float, full_layers_only: bool) -> dict:
    """``weights`` with every QK-norm layer's query-norm weight × ``gain`` (only full-attention layers
    with ``full_layers_only``): each attention logit of those layers is multiplied by ``gain``."""
    if cfg.qk_norm == "none":
        raise ConfigError("extension.qk_gain", "raises the QK-norm gain; this model has no QK-norm")
    out = dict(weights)
    for i, kind in enumerate(cfg.layer_types):
        if full_layers_only and kind != "full_attention":
            continue
        name = f"layers.{i}.attn.q_norm.weight"
        if name not in out:
            raise CheckpointError(f"no {name} in the checkpoint of a QK-norm model")
        out[name] = out[name] * gain
    return out


def resolve_source(run_dir: str | Path, source: str) -> Path:
    """``final``, a milestone name (``step_000050``), a ``ckpt/`` step, or a checkpoint path."""
    run_dir = Path(run_dir)
    candidates = (
        [run_dir_final(run_dir)]
        if source == "final"
        else [
            run_dir / "milestones" / source,
            run_dir / "ckpt" / source,
            Path(source),
            run_dir / source,
        ]
    )
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
    gain = plan.model.extension.get("qk_gain", 1.0)
    if gain != 1.0:
        weights = raise_qk_gain(source_cfg, weights, gain, ext.full_layers_only)
    out_dir = Path(out) if out is not None else run_dir / "extend" / ext.run_name
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
        initial_milestone=bool(ext.budgets) and 0 in ext.budgets,
    )
    return trainer.run()


def rung_dir(extension_dir: str | Path, budget: int) -> Path:
    """The checkpoint of one ladder rung (``budget`` steps) of an extension run."""
    return Path(extension_dir) / "milestones" / ckpt.step_name(budget)


def load_run_config(run_dir: str | Path) -> RunConfig:
    path = Path(run_dir) / RUN_RECORD
    if not path.is_file():
        raise CheckpointError(f"{run_dir}: not a pretraining run directory (no {RUN_RECORD})")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable run record ({e})") from None
    if not isinstance(data, dict) or data.get("kind") != "pretrain":
        kind = data.get("kind") if isinstance(data, dict) else None
        raise CheckpointError(f"{path}: not a pretraining run (kind={kind!r})")
    return RunConfig.from_dict({k: data[k] for k in ("model", "data", "train", "extension") if k in data})


def extension_configs(run_cfg: RunConfig, overrides: dict[str, Any] | None = None) -> list[ExtensionConfig]:
    """The run's extension sections (the paper's default ``ntk`` recipe when there are none)."""
    exts = run_cfg.extension or [ExtensionConfig()]
    if overrides:
        exts = [ExtensionConfig.from_dict({**e.to_dict(), **overrides}) for e in exts]
    return exts
