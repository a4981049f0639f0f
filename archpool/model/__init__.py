"""The model stage: one configurable decoder, its presets, checkpoints and HF interop.

Names resolve lazily (PEP 562) so that ``import archpool.model.cli`` does not import torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ModelConfig": "archpool.model.config",
    "RopeConfig": "archpool.model.config",
    "Decoder": "archpool.model.model",
    "KVCache": "archpool.model.model",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'archpool.model' has no attribute {name!r}")
