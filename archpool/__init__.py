"""archpool: controlled architecture pools."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from archpool.model.model import Decoder


def load(path: str | Path, device: str = "cpu") -> Decoder:
    """Our ``Decoder`` from an archpool checkpoint directory or a Hugging Face model directory
    (llama, mistral, ministral, qwen2, qwen3, olmo2, olmo3; needs ``archpool[hf]``).
    ``load(path)(input_ids)`` returns logits (B, T, vocab)."""
    from archpool.errors import CheckpointError
    from archpool.model.checkpoint import is_archpool_checkpoint, load_checkpoint

    path = Path(path)
    if is_archpool_checkpoint(path):
        return load_checkpoint(path, device=device)
    if (path / "config.json").is_file():
        from archpool.model.hf import import_hf

        return import_hf(path).to(device)
    raise CheckpointError(f"{path}: neither an archpool checkpoint nor a Hugging Face model directory (no config.json)")
