"""The model stage: one configurable decoder, its presets, checkpoints and HF interop."""
from archpool.model.config import ModelConfig, RopeConfig
from archpool.model.model import Decoder, KVCache

__all__ = ["ModelConfig", "RopeConfig", "Decoder", "KVCache"]
