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
