"""Model checkpoints: ``config.json`` (the ModelConfig) + ``model.safetensors`` in one directory.

Weights are safetensors only; nothing here unpickles. Writes are atomic per file and the config is
written last, so a directory with a config always has complete weights beside it.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from archpool.errors import CheckpointError
from archpool.io import atomic_path, atomic_write_json
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_KEY = "archpool_format"


def save_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig, directory: str | Path, metadata: dict | None = None) -> Path:
    """Write weights (without the tied output matrix: safetensors refuses shared storage), then the config."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if cfg.tie_embeddings:
        state.pop("lm_head.weight", None)
    with atomic_path(directory / WEIGHTS_NAME) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    atomic_write_json(directory / CONFIG_NAME, {FORMAT_KEY: 1, "model": cfg.to_dict(), "metadata": metadata or {}})
    return directory


def save_checkpoint(model: Decoder, directory: str | Path, metadata: dict | None = None) -> Path:
    return save_state_dict(model.state_dict(), model.cfg, directory, metadata)


def is_archpool_checkpoint(directory: str | Path) -> bool:
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        return False
    try:
        return FORMAT_KEY in json.loads(path.read_text())
    except json.JSONDecodeError:
        return False


def load_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / CONFIG_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read archpool config ({e})") from e
    if FORMAT_KEY not in data:
        raise CheckpointError(f"{path}: not an archpool checkpoint config (no {FORMAT_KEY!r})")
    return ModelConfig.from_dict(data["model"])


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu") -> Decoder:
    directory = Path(directory)
    cfg = load_config(directory)
    weights = directory / WEIGHTS_NAME
    try:
        state = load_file(str(weights), device=str(device))
    except Exception as e:  # safetensors raises several types for truncated / missing files
        raise CheckpointError(f"{weights}: unreadable or incomplete weights ({e})") from e
    model = Decoder(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise CheckpointError(f"{weights}: weights do not match the config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    return model.to(device)
