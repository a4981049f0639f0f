"""Atomic writes: the file appears only on success, with ordinary permissions."""

from __future__ import annotations

import os
import stat

import pytest

from archpool.io import atomic_path, atomic_write_text, replace_directory


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_respects_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "results.csv", "a,b\n")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "results.csv").stat().st_mode)
    assert mode == 0o666 & ~umask


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "x.json") as tmp:
        tmp.write_text("partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_replace_directory_swaps_in_the_new_copy_and_leaves_nothing_aside(tmp_path):
    target, tmp = tmp_path / "ckpt", tmp_path / ".tmp_ckpt"
    replace_directory(_dir_with(tmp, "first"), target)  # nothing there yet
    assert (target / "f").read_text() == "first" and not tmp.exists()
    replace_directory(_dir_with(tmp, "second"), target)  # an older copy there
    assert (target / "f").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def _dir_with(path, text):
    path.mkdir()
    (path / "f").write_text(text)
    return path


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoints_and_exports_get_ordinary_permissions(tmp_path, umask):
    """safetensors writes its files 0600; a checkpoint and an HF export are readable as any result is."""
    from archpool.model.checkpoint import WEIGHTS_NAME, save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.hf import export_hf
    from archpool.model.model import Decoder

    model = Decoder(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2, max_seq_len=16), seed=0)
    old = os.umask(umask)
    try:
        save_checkpoint(model, tmp_path / "ckpt")
        export_hf(model, tmp_path / "hf")
    finally:
        os.umask(old)
    for path in (tmp_path / "ckpt" / WEIGHTS_NAME, tmp_path / "hf" / "model.safetensors", tmp_path / "hf" / "config.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
