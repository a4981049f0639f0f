"""Small filesystem helpers shared by every stage: atomic writes, content hashes, config files."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds.

    The file gets the permissions an ordinary ``open(path, "w")`` would give (0666 less the umask),
    not ``mkstemp``'s private 0600, so colleagues on a shared filesystem can read results."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-serialisable object, independent of key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def read_config_file(path: str | os.PathLike) -> Any:
    """The JSON (``.json``) or YAML (any other name; YAML reads JSON too) document in ``path``; a missing,
    unreadable, non-regular, oversized, non-UTF-8 or malformed file is a ``ConfigError`` naming the file.
    Parsing is bounded (:mod:`archpool.safeload`): no alias bombs, no deep nesting, no duplicate keys."""
    from archpool.safeload import load_json, load_yaml, read_text_bounded

    path = Path(path)
    text = read_text_bounded(path)
    return load_json(text, str(path)) if path.suffix == ".json" else load_yaml(text, str(path))
