"""Per-layer geometry: which layers slide, the window each attends within and the RoPE theta each
rotates by. Every module that needs a layer's window or theta (the model, its export, the
extension recipes, the attention probes) reads it here. No torch.
"""

from __future__ import annotations

from archpool.model.config import ModelConfig, RopeConfig
from archpool.study import SLIDING


def layer_type(cfg: ModelConfig, layer: int) -> str:
    """``full_attention`` or ``sliding_attention``: the type of layer ``layer`` (``cfg.layer_types``)."""
    return cfg.layer_types[layer]


def type_window(cfg: ModelConfig, kind: str) -> int | None:
    """The window of a layer of type ``kind``: ``cfg.window`` tokens on sliding layers (query
    included, as transformers' ``sliding_window``), ``None`` (full causal) otherwise."""
    return cfg.window if kind == SLIDING else None


def window_of(cfg: ModelConfig, layer: int) -> int | None:
    """The window of layer ``layer``; ``None`` for full causal attention."""
    return type_window(cfg, layer_type(cfg, layer))


def layer_windows(cfg: ModelConfig) -> list[int | None]:
    """``window_of`` for every layer, in order."""
    return [type_window(cfg, kind) for kind in cfg.layer_types]


def plain_rope(rope: RopeConfig, kind: str) -> bool:
    """Whether layers of type ``kind`` keep plain RoPE, unscaled: sliding layers under ``full_layers_only``."""
    return rope.full_layers_only and kind == SLIDING


def type_theta(rope: RopeConfig, kind: str) -> float:
    """The RoPE base of layers of type ``kind`` before any scaling: ``rope.sliding_theta`` on layers
    that keep plain RoPE when it is set, ``rope.theta`` otherwise."""
    if plain_rope(rope, kind) and rope.sliding_theta is not None:
        return rope.sliding_theta
    return rope.theta


def theta_for(cfg: ModelConfig, layer: int) -> float:
    """The RoPE base of layer ``layer`` before any scaling (``type_theta``)."""
    return type_theta(cfg.rope, layer_type(cfg, layer))
