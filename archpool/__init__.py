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
    from archpool.errors import CheckpointError
    from archpool.model.checkpoint import is_archpool_checkpoint, load_checkpoint

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run, checkpoint or model directory")
    if not is_archpool_checkpoint(path) and (path / "config.json").is_file():
        from archpool.model.hf import import_hf

        return import_hf(path).to(device)
    from archpool.cli.model import resolve_export_source

    try:
        source = resolve_export_source(path, require_tokenizer=False)
    except CheckpointError as e:
        raise CheckpointError(f"{e} (nor a Hugging Face model directory: no config.json)") from None
    return load_checkpoint(source.checkpoint, device=device)
