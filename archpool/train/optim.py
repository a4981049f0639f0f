"""Optimizer and learning-rate schedule.

AdamW with decoupled weight decay applied to matrices only: norms, biases and embeddings are left
undecayed unless configured. The LR schedule is a pure function of the step, so resuming needs
nothing but the step number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False, decay_norms: bool = False) -> list[dict]:
    """Two AdamW groups, ``decay`` and ``no_decay``, by parameter name and shape."""
    embedding_params = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) in embedding_params:
            (decay if decay_embeddings else no_decay).append(p)
        elif p.ndim < 2 and "norm" in name:
            (decay if decay_norms else no_decay).append(p)
        elif p.ndim < 2:  # biases and other vectors
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "name": "decay"}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "name": "no_decay"})
    return groups


def build_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    decay_embeddings: bool = False,
    decay_norms: bool = False,
) -> torch.optim.AdamW:
    groups = param_groups(model, weight_decay, decay_embeddings, decay_norms)
    params = [p for g in groups for p in g["params"]]
    on_cuda = bool(params) and all(p.is_cuda for p in params)
    sharded = any(hasattr(p, "placements") for p in params)  # FSDP2 DTensors: the foreach path
    if on_cuda and not sharded:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
    # CPU: the per-parameter loop (bit-for-bit reproducible and identical for plain and sharded parameters)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=on_cuda)


@dataclass
class LRSchedule:
    """Warmup (linear from ``peak / warmup`` to ``peak``), then a decay that reaches ``final`` one step
    after the last: every one of ``total`` steps updates the weights (with ``final = 0`` the last step
    still runs at ``peak / decay_steps``, so N steps are N effective steps and a 1-step run with no
    warmup runs at ``peak``).

    ``cosine`` and ``linear`` decay over all post-warmup steps; ``wsd`` (warmup-stable-decay) holds
    ``peak`` and decays linearly over the last ``decay_fraction`` of the steps; ``constant`` holds
    ``peak`` after the warmup (an extension ladder: every rung is a prefix of one run).
    """

    peak: float
    final: float
    warmup: int
    total: int
    kind: str = "cosine"
    decay_fraction: float = 0.2

    def __call__(self, step: int) -> float:
        """LR of the 0-based optimizer ``step``."""
        if step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        if self.kind == "constant":
            return self.peak
        decay_steps = self.total - self.warmup
        if self.kind == "wsd":
            decay_steps = max(1, min(decay_steps, round(self.decay_fraction * self.total)))
        start = self.total - decay_steps
        if step < start:
            return self.peak
        p = min(1.0, (step - start) / max(1, decay_steps))
        if self.kind == "cosine":
            return self.final + (self.peak - self.final) * 0.5 * (1 + math.cos(math.pi * p))
        return self.peak + (self.final - self.peak) * p

    def state_dict(self) -> dict:
        return asdict(self)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
