"""The model stage: one configurable decoder, its presets, checkpoints and HF interop.

Names resolve lazily (PEP 562) so that ``import archpool.cli.model`` does not import torch.
"""

from __future__ import annotations

from archpool.lazy import lazy_exports

_EXPORTS = {
    "ModelConfig": "archpool.model.config",
    "RopeConfig": "archpool.model.config",
    "Decoder": "archpool.model.model",
    "KVCache": "archpool.model.model",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
