"""Rotary position embeddings and their context-extension scalings (theta change, PI, NTK-aware, YaRN).

Frequencies follow transformers' ``modeling_rope_utils`` conventions (``rotate_half`` layout, YaRN's
attention factor applied to cos and sin), so exported models match transformers exactly.
"""

from __future__ import annotations

import math

import torch

from archpool.model.config import RopeConfig
from archpool.model.geometry import plain_rope, type_theta


def rope_frequencies(rope: RopeConfig, head_dim: int, layer_type: str = "full_attention") -> tuple[torch.Tensor, float]:
    """Inverse frequencies (head_dim / 2,) and the cos/sin scale for one layer type."""
    base = type_theta(rope, layer_type)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    scaled = rope.type != "default" and not plain_rope(rope, layer_type)
    if not scaled:
        return 1.0 / (base**exponents), 1.0
    if rope.type == "linear":
        return 1.0 / (base**exponents) / rope.factor, 1.0
    if rope.type == "ntk":
        ntk_base = base * rope.factor ** (head_dim / (head_dim - 2))
        return 1.0 / (ntk_base**exponents), 1.0
    return _yarn_frequencies(rope, head_dim, exponents)


def _yarn_frequencies(rope: RopeConfig, dim: int, exponents: torch.Tensor) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): interpolate low frequencies, keep high ones, ramp in between."""
    base, factor, original = rope.theta, rope.factor, rope.original_max_seq_len
    assert original is not None

    def correction_dim(n_rotations: float) -> float:
        return (dim * math.log(original / (n_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(rope.beta_fast)), 0)
    high: float = min(math.ceil(correction_dim(rope.beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp
    pos_freqs = base**exponents
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_weight) + (1.0 / pos_freqs) * extrapolation_weight
    return inv_freq, rope.yarn_attention_factor()


def rope_cos_sin(
    inv_freq: torch.Tensor, scale: float, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (T, head_dim) for integer ``positions`` of shape (T,)."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape (B, H, T, D) by position; cos/sin are (T, D) or (B, 1, T, D)."""
    return x * cos + rotate_half(x) * sin
