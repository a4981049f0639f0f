"""A model directory as the evaluation caches see it: the hash of the whole model (weights, config.json,
generation settings and tokenizer files: what every eval cache is keyed by), the tokenizer files' hash, and
the context lengths the external backends (lm-eval's RULER, HELMET's data) accept."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError, ConfigError
from archpool.model.hf.weights import TOKENIZER_FILES


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


JSON_TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json")  # read as JSON objects by transformers


def check_tokenizer_files(model_dir: Path) -> None:
    """DataError naming the file when a tokenizer file of ``model_dir`` does not read whole: ``tokenizer.json``
    as the ``tokenizers`` library loads it, the JSON files transformers reads beside it as JSON objects. Run
    before a backend loads its model, so a damaged tokenizer is one line, not a traceback mid-evaluation."""
    from archpool.errors import DataError
    from archpool.safeload import read_json_object
    from archpool.tokenizer import Tokenizer

    for name in JSON_TOKENIZER_FILES:
        path = model_dir / name
        if path.is_file():
            try:
                read_json_object(path)
            except ConfigError as e:
                raise DataError(f"{path}: not a readable tokenizer file ({e.message})") from None
    if (model_dir / "tokenizer.json").is_file():
        Tokenizer.load(model_dir)


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
    """The whole model's sha256, as every eval cache keys its cells: the verified weights, config.json (RoPE,
    context, attention settings), generation_config.json, archpool_config.json and the tokenizer files of an
    HF directory or an archpool checkpoint (:func:`archpool.model.hf.model_file_hashes`), so a config-only
    change (a RoPE rescaling, a longer context) is another model with its own cells."""
    from archpool.io import sha256_json
    from archpool.model.hf import model_file_hashes

    return sha256_json(model_file_hashes(model_dir))


def cell_logger(log: Callable[[str], None] | None, progress: bool) -> Callable[[str], None] | None:
    """Where a backend reports each cell as it finishes: ``log``, else standard error with ``progress``."""
    if log is not None or not progress:
        return log
    import sys

    return lambda line: print(line, file=sys.stderr, flush=True)


def report_cell(log: Callable[[str], None] | None, suite: str, done: int, total: int, what: str, cell: dict[str, Any]) -> None:
    """One line per finished cell (``done`` of ``total``): kept from an earlier run (the cache), skipped or scored."""
    if log is None:
        return
    state = "kept from an earlier run" if cell.get("cached") else ("skipped" if "skipped" in cell else "scored")
    score = cell.get("score")
    shown = f" {score:.1f}" if isinstance(score, (int, float)) and not isinstance(score, bool) else ""
    log(f"{suite}: cell {done}/{total} {what}: {state}{shown}")


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
