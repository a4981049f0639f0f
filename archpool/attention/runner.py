"""Targets of the attention analysis (``archpool.rundir.Target``): their data store and their model.

A target is a run directory (``run_config.json`` + ``milestones/final``), an archpool checkpoint
directory, or a Hugging Face model directory.
"""

from __future__ import annotations

from pathlib import Path

import torch

from archpool.errors import CheckpointError, DataError
from archpool.rundir import Target


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

        return load_checkpoint(target.checkpoint, device=device, verify=not verified)
    if backend == "archpool":
        from archpool.model.hf import import_hf

        return import_hf(target.checkpoint).to(device)
    from archpool.attention.capture import load_hf_for_capture

    check_hf_model_dir(target.checkpoint)
    try:
        return load_hf_for_capture(target.checkpoint, device=device, dtype=torch.float32 if device == "cpu" else None)
    except (RuntimeError, ValueError, TypeError, KeyError, OSError) as e:  # weights that do not fit the config, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{target.checkpoint}: transformers cannot load this model ({type(e).__name__}: {first})") from None


def check_hf_model_dir(hf_dir: Path) -> None:
    """The ``config.json`` of a Hugging Face model directory (and of its language model, for a multimodal
    wrapper's ``text_config``) within archpool's size bounds, before transformers allocates anything."""
    from archpool.model.hf.config import check_hf_sizes, read_hf_config

    raw = read_hf_config(hf_dir)
    where = str(Path(hf_dir) / "config.json")
    check_hf_sizes(raw, where)
    if isinstance(raw.get("text_config"), dict):
        check_hf_sizes(raw["text_config"], f"{where}: text_config")
