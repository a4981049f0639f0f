"""archpool: controlled architecture pools."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from archpool.model.model import Decoder


def package_version() -> str:
    """The installed distribution's version (package metadata); ``unknown`` when archpool is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("archpool")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def git_commit() -> str | None:
    """The short commit of the git checkout holding this package (``+dirty`` with uncommitted changes to
    tracked files), or None outside a checkout or without git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if commit and dirty else commit or None


def version_string() -> str:
    """``archpool <version>`` plus ``(commit <sha>)`` when running from a git checkout."""
    commit = git_commit()
    return f"archpool {package_version()}" + (f" (commit {commit})" if commit else "")


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
