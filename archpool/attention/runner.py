"""Targets of the attention analysis: what a path names, its data store, and its model.

A target is a run directory (``run_config.json`` + ``milestones/final``), an archpool checkpoint
directory, or a Hugging Face model directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from archpool.errors import DataError


@dataclass
class Target:
    path: Path
    kind: str  # run | checkpoint | hf
    model_dir: Path
    data_cfg: dict[str, Any] | None = None
    name: str = ""


def resolve_target(path: str | Path) -> Target:
    """A run directory (its final checkpoint), an archpool checkpoint, or a Hugging Face model directory."""
    from archpool.rundir import resolve_target as resolve_path

    found = resolve_path(path)
    p = found.path
    name = p.parent.parent.name if found.kind == "checkpoint" and p.name == "final" else p.name
    return Target(p, found.kind, found.checkpoint, found.data_cfg, name=name)


def store_for(target: Target, store: str | Path | None) -> Path | None:
    """The data store to read held-out text from: explicit, the run's ``data.store``, or the store its config names."""
    if store is not None:
        return Path(store)
    from archpool.data.section import section_store_path

    d = target.data_cfg or {}
    path = section_store_path(d)
    if path is None or d.get("store") or (path / "manifest.json").is_file():
        return path
    raise DataError(f"{target.path}: the run's data store {path} is not prepared; run `archpool data prepare` or pass --store")


def load_model(target: Target, backend: str = "auto", device: str = "cpu", verified: bool = False):
    """Our ``Decoder`` for archpool targets; for HF directories the transformers model itself
    (``backend='hf'``, the default) or its import into our Decoder (``backend='archpool'``).
    ``verified``: the caller already checked the files (``weights_digest``), so they are not hashed again."""
    if target.kind in ("run", "checkpoint"):
        from archpool.model.checkpoint import load_checkpoint

        return load_checkpoint(target.model_dir, device=device, verify=not verified)
    if backend == "archpool":
        from archpool.model.hf import import_hf

        return import_hf(target.model_dir).to(device)
    from archpool.attention.capture import load_hf_for_capture

    return load_hf_for_capture(target.model_dir, device=device, dtype=torch.float32 if device == "cpu" else None)
