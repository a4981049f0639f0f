"""Training checkpoints: weights, optimizer, schedule, RNG and data position, written atomically.

A checkpoint is a directory::

    step_000100/
      config.json         the ModelConfig (archpool's model-checkpoint format: load_checkpoint works)
      model.safetensors   full (gathered) weights, loadable at any world size
      train_state.pt      optimizer (by parameter name), step, RNG states, data position, loss history
      MANIFEST.json       sha256 and size of every file above; written last

It is written into a hidden temporary directory and renamed into place, so a crash never leaves a
directory that looks whole; the manifest additionally catches files damaged after the fact
(``validate`` rejects them with a clear error and ``latest`` falls back to the previous one).
``train_state.pt`` holds only tensors and plain Python values and is loaded with ``weights_only=True``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from archpool.errors import CheckpointError
from archpool.io import atomic_write_json, disk_error, replace_directory, sha256_file
from archpool.model.checkpoint import MANIFEST_NAME, WEIGHTS_NAME, load_safetensors, save_state_dict, verify_files
from archpool.model.config import ModelConfig

STATE_NAME = "train_state.pt"
STEP_RE = re.compile(r"^step_(\d+)$")


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def write_checkpoint(
    directory: str | Path,
    model_state: dict[str, torch.Tensor],
    cfg: ModelConfig,
    train_state: dict[str, Any] | None,
    metadata: dict | None = None,
) -> Path:
    """Write a checkpoint directory atomically (temp dir + rename). Replaces an existing one."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_{directory.name}.", dir=directory.parent))
    try:
        _write_into(tmp, directory, model_state, cfg, train_state, metadata)
    except OSError as e:  # disk full, quota: the temporary directory goes, the previous checkpoint stays
        raise disk_error(directory, e) from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return directory


def _write_into(
    tmp: Path,
    directory: Path,
    model_state: dict[str, torch.Tensor],
    cfg: ModelConfig,
    train_state: dict | None,
    metadata: dict | None,
) -> None:
    """Fill ``tmp`` (weights, train state, manifest last) and rename it onto ``directory``."""
    save_state_dict(model_state, cfg, tmp, metadata)
    if train_state is not None:
        save_train_state(train_state, tmp / STATE_NAME)
    files = sorted(p.name for p in tmp.iterdir())
    manifest = {
        "files": {n: {"sha256": sha256_file(tmp / n), "bytes": (tmp / n).stat().st_size} for n in files},
        "step": (train_state or {}).get("step"),
    }
    for n in files:
        _fsync(tmp / n)
    atomic_write_json(tmp / MANIFEST_NAME, manifest)
    _fsync_dir(tmp)
    replace_directory(tmp, directory)
    _fsync_dir(directory.parent)


LOW_SPACE = 16 * 2**20  # bytes free below which a failed write is taken for a full disk


def save_train_state(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` of a training state, its failures as ``OSError``: torch's zip writer reports a failed
    write as a ``RuntimeError`` without an errno, so a filesystem with less than ``LOW_SPACE`` left is
    taken to be full (ENOSPC) and anything else is an I/O error carrying torch's message."""
    try:
        torch.save(state, path)
    except RuntimeError as e:
        free = shutil.disk_usage(path.parent).free
        code = errno.ENOSPC if free < LOW_SPACE else errno.EIO
        raise OSError(code, f"{os.strerror(code)}: the training state's write failed ({e}); {free:,} bytes free") from e


def validate(directory: str | Path, check_hashes: bool = True) -> dict[str, str]:
    """Raise ``CheckpointError`` naming the problem if ``directory`` is not a complete checkpoint;
    return the verified ``{file: sha256}`` (empty with ``check_hashes=False``)."""
    return verify_files(directory, None, check_hashes)


def list_checkpoints(ckpt_root: str | Path) -> list[tuple[int, Path]]:
    """Step directories under ``ckpt_root``, oldest first (temporary directories ignored)."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = STEP_RE.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest(ckpt_root: str | Path) -> Path | None:
    """The newest valid checkpoint; corrupt or incomplete ones are skipped with a warning."""
    for _step, path in reversed(list_checkpoints(ckpt_root)):
        try:
            validate(path)
            return path
        except CheckpointError as e:
            warnings.warn(f"skipping checkpoint: {e}", stacklevel=2)
    return None


def prune(ckpt_root: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` step directories, and stale temporary ones."""
    root = Path(ckpt_root)
    for _step, path in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)
    clean_temporaries(root)


def link_copy(src: Path, dst: Path) -> None:
    """Copy a checkpoint directory by hard links (cheap), atomically replacing ``dst``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".tmp_{dst.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, tmp, symlinks=True, copy_function=link)  # a planted link stays a link (and fails validation)
    replace_directory(tmp, dst)


def clean_temporaries(root: str | Path) -> None:
    root = Path(root)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp_", ".old_")):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def load_train_state(directory: str | Path) -> dict[str, Any]:
    """The training state of a checkpoint, its bytes verified against ``MANIFEST.json`` first (size and
    sha256, as for the weights), loaded with ``weights_only=True``; CheckpointError names what is wrong."""
    path = Path(directory) / STATE_NAME
    verify_files(directory, (STATE_NAME,))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, missing file, unsafe pickle
        raise CheckpointError(f"{path}: unreadable training state ({e})") from e


def load_weights(directory: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Model config and full state dict (tied output matrix restored) of a checkpoint directory."""
    from archpool.model.checkpoint import load_config

    directory = Path(directory)
    cfg = load_config(directory)
    state = load_safetensors(directory / WEIGHTS_NAME)
    if cfg.tie_embeddings and "lm_head.weight" not in state and "embed.weight" in state:
        state["lm_head.weight"] = state["embed.weight"]
    return cfg, state


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
