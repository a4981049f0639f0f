"""An extension's plan without torch: the RoPE a recipe gives, the extended model's config with its
extension record, the training settings and stages, and the QK-norm gain of a remedy
(docs/extensibility.md). Pool validation plans every extension with it before any work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from archpool.errors import ConfigError
from archpool.model.config import ModelConfig, RopeConfig
from archpool.model.geometry import type_theta
from archpool.names import check_recipe_name
from archpool.study import SLIDING, THETA_RECIPES
from archpool.train.config import ExtensionConfig, Stage, TrainConfig


def check_extension_name(name: str) -> str:
    """``name`` if it can be the extension's directory under ``RUN/extend/``; else a ConfigError."""
    return check_recipe_name("extension.name", name)


def extension_dir_name(ext: ExtensionConfig) -> str:
    """The checked directory name of ``ext`` under ``RUN/extend/`` (an explicit empty name is an error)."""
    return check_extension_name(ext.run_name if ext.name is None else ext.name)


@dataclass
class ExtensionPlan:
    model: ModelConfig  # the extended model's config (new rope, max_seq_len, extension record)
    train: TrainConfig  # optimizer / schedule / batch for the extension phase
    stages: list[Stage]
    tokens: int

    @property
    def extension(self) -> dict[str, Any]:
        """The extension record :func:`plan_extension` writes into the extended model's config."""
        assert self.model.extension is not None
        return self.model.extension


def extension_rope(base: RopeConfig, ext: ExtensionConfig, pretrain_len: int, length: int) -> RopeConfig:
    """The RoPE settings a recipe gives a model pretrained at ``pretrain_len`` and extended to ``length``."""
    factor = float(ext.factor) if ext.factor is not None else length / pretrain_len
    if ext.recipe in THETA_RECIPES:
        theta = float(ext.new_theta) if ext.new_theta is not None else base.theta * ext.theta_ratio
        if ext.full_layers_only:  # Olmo 3: raise theta on full-attention layers, sliding ones keep theirs
            return RopeConfig(theta=theta, type="default", full_layers_only=True, sliding_theta=type_theta(base, SLIDING))
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
    length = ext.target_length(pre_len)
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
