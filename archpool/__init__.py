"""archpool: controlled architecture pools."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from archpool.version import git_commit, package_version, version_string

__all__ = ["git_commit", "load", "package_version", "version_string"]

if TYPE_CHECKING:  # pragma: no cover
    from archpool.model.model import Decoder


def load(path: str | Path, device: str = "cpu") -> Decoder:
    """Our ``Decoder`` from anything the CLI accepts as a model source: a run directory (``archpool
    train``/``extend``; a pool's ``runs/<run>/`` or ``stages/<stage>/<key>/``; the extended model when the
    run has one, as ``archpool export-hf``), an archpool checkpoint or milestone, or a Hugging Face model
    directory (llama, mistral, ministral, qwen2, qwen3, olmo2, olmo3; needs ``archpool[hf]``).
    ``load(path)(input_ids)`` returns logits (B, T, vocab)."""
    from archpool.model.checkpoint import load_checkpoint
    from archpool.pool.lookup import pool_run_lookup
    from archpool.rundir import resolve_target

    target = resolve_target(path, extended=True, pool_run=pool_run_lookup())
    if target.kind == "hf":
        from archpool.model.hf import import_hf

        return import_hf(target.checkpoint).to(device)
    return load_checkpoint(target.checkpoint, device=device)
