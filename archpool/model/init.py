"""Shared initialisation: each parameter's initial value is a function of (seed, name, shape).

Two pool members that differ in one axis therefore start from bit-identical weights wherever a
parameter's name and shape agree, and only the parameters the axis changes (QK-norm weights, K/V
projections under GQA, a widened MLP) are drawn afresh — the paper's "reused where possible".
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn


def parameter_seed(seed: int, name: str, shape: tuple[int, ...]) -> int:
    digest = hashlib.sha256(f"{seed}|{name}|{tuple(shape)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def is_norm_weight(name: str, param: torch.Tensor) -> bool:
    return param.ndim == 1 and "norm" in name


def is_residual_output(name: str) -> bool:
    """Projections writing into the residual stream get a depth-scaled std (GPT-2 / OLMo practice)."""
    return name.endswith("o_proj.weight") or name.endswith("down_proj.weight")


@torch.no_grad()
def init_weights(model: nn.Module, seed: int, std: float, n_layers: int) -> None:
    """Initialise every parameter of ``model`` deterministically from (seed, name, shape)."""
    for name, param in model.named_parameters():
        if is_norm_weight(name, param):
            param.fill_(1.0)
            continue
        g = torch.Generator(device="cpu").manual_seed(parameter_seed(seed, name, tuple(param.shape)))
        s = std / math.sqrt(2 * n_layers) if is_residual_output(name) else std
        value = torch.empty(param.shape, dtype=torch.float32)
        nn.init.trunc_normal_(value, mean=0.0, std=s, a=-3 * s, b=3 * s, generator=g)
        param.copy_(value.to(param.dtype))
