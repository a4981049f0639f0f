"""A Hugging Face model directory as the external evaluation backends (lm-eval's RULER, HELMET's data) see
it: its weights' and tokenizer files' hashes (what their caches are keyed by) and the context lengths
they accept."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError, ConfigError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "chat_template.jinja")  # fmt: skip


def hf_model_dir(path: str | Path) -> Path:
    """``path`` as a Path when it is a Hugging Face model directory (it has a ``config.json``); else a
    CheckpointError saying how to make one from an archpool run."""
    model_dir = Path(path)
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(
            f"{model_dir}: not a Hugging Face model directory (no config.json); "
            "export an archpool run first: archpool export-hf RUN OUT"
        )
    return model_dir


def check_lengths(lengths: Sequence[int], field: str = "harness.lengths") -> list[int]:
    """The distinct lengths, ascending; ConfigError naming ``field`` unless each is an integer from 64 to
    ``MAX_SEQ_LEN`` (the longest context archpool accepts)."""
    from archpool.model.config import MAX_SEQ_LEN

    if isinstance(lengths, (str, bytes)) or not lengths:
        raise ConfigError(field, f"a non-empty list of token lengths, got {lengths!r}")
    for v in lengths:
        if isinstance(v, bool) or not isinstance(v, int) or not 64 <= v <= MAX_SEQ_LEN:
            raise ConfigError(field, f"token lengths are integers from 64 to {MAX_SEQ_LEN:,}, got {v!r}")
    return sorted(set(lengths))


def tokenizer_sha256(model_dir: Path) -> str:
    """sha256 over the tokenizer files of an HF directory (names and bytes); CheckpointError without any."""
    h = hashlib.sha256()
    found = False
    for name in TOKENIZER_FILES:
        p = model_dir / name
        if p.is_file():
            found = True
            h.update(name.encode() + b"\0")
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    if not found:
        raise CheckpointError(
            f"{model_dir}: no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}); the evaluation "
            "sizes its prompts with the model's own tokenizer"
        )
    return h.hexdigest()


def model_sha256(model_dir: Path) -> str:
    """The verified sha256 of an HF directory's weights (as ``archpool eval`` keys its cache)."""
    from archpool.model.hf import read_hf_config, weight_files, weights_sha256

    read_hf_config(model_dir)
    return weights_sha256(model_dir, weight_files(model_dir))


def cached_cell(
    path: Path | None, read: Callable[[Path], dict[str, Any] | None], compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """One evaluated cell: ``read(path)`` (a verified cache entry, marked ``cached``) when there is one, else
    ``compute()``, written to ``path`` with its content hash (``archpool.io.write_cache_entry``). No cache
    without a ``path``."""
    cell = read(path) if path is not None else None
    if cell is not None:
        return {**cell, "cached": True}
    cell = compute()
    if path is not None:
        from archpool.io import write_cache_entry

        write_cache_entry(path, cell)
    return cell
