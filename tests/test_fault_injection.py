"""Fault injection on archpool's own files: symlinked destinations, same-path import/export, the
directory lock, stale temporaries and a full disk all end in a named error, never a write elsewhere."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from archpool.cli import main
from archpool.errors import CheckpointError, LockError, StateError
from archpool.io import (
    TMP_SUFFIX,
    append_text,
    atomic_write_json,
    atomic_write_text,
    copy_regular_file,
    directory_lock,
    open_append_text,
    remove_stale_temporaries,
    require_distinct,
    sha256_file,
)
from archpool.model.checkpoint import save_checkpoint
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder
from archpool.train import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[1]


def _outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "private.txt"
    secret.parent.mkdir()
    secret.write_text("private\n")
    return secret


def _tiny_checkpoint(directory: Path) -> Path:
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, max_seq_len=32)
    return save_checkpoint(Decoder(cfg, seed=0), directory)


# ------------------------------------------------------------------------------------------ symlinks
def test_atomic_write_refuses_a_symlinked_destination(tmp_path):
    secret = _outside(tmp_path)
    link = tmp_path / "pool" / "plan.json"
    link.parent.mkdir()
    link.symlink_to(secret)
    for write in (lambda: atomic_write_text(link, "x"), lambda: atomic_write_json(link, {"a": 1})):
        with pytest.raises(StateError, match="symbolic link"):
            write()
    assert secret.read_text() == "private\n" and link.is_symlink()
    assert not [p for p in link.parent.iterdir() if p.name.endswith(TMP_SUFFIX)]


def test_appends_never_go_through_a_symlink(tmp_path):
    secret = _outside(tmp_path)
    for name in ("events.jsonl", "metrics.jsonl"):
        link = tmp_path / name
        link.symlink_to(secret)
        with pytest.raises(StateError, match="symbolic link"):
            append_text(link, '{"kind": "x"}\n')
        with pytest.raises(StateError, match="symbolic link"):
            open_append_text(link)
    assert secret.read_text() == "private\n"


def test_appends_get_ordinary_permissions(tmp_path):
    path = tmp_path / "events.jsonl"
    append_text(path, "a\n")
    append_text(path, "b\n")
    assert path.read_text() == "a\nb\n"
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_copy_regular_file_refuses_a_link_to_a_file_elsewhere(tmp_path):
    secret = _outside(tmp_path)
    link = tmp_path / "hf" / "tokenizer.json"
    link.parent.mkdir()
    link.symlink_to(secret)
    with pytest.raises(StateError, match="symbolic link"):
        copy_regular_file(link, tmp_path / "ckpt" / "tokenizer.json")
    assert not (tmp_path / "ckpt" / "tokenizer.json").exists()
    with pytest.raises(StateError, match="not a regular file"):
        copy_regular_file("/dev/null", tmp_path / "ckpt" / "x")
    copy_regular_file(secret, tmp_path / "ckpt" / "copy.txt")
    assert (tmp_path / "ckpt" / "copy.txt").read_text() == "private\n"


def test_import_hf_does_not_copy_a_symlinked_tokenizer(tmp_path, capsys):
    from archpool.model.hf import export_hf

    hf = export_hf(_tiny_checkpoint(tmp_path / "ck"), tmp_path / "hf", require_tokenizer=False)
    (hf / "tokenizer.json").symlink_to(_outside(tmp_path))
    assert main(["import-hf", str(hf), str(tmp_path / "imported")]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "imported" / "tokenizer.json").exists()


# ------------------------------------------------------------------------------------ same paths
@pytest.mark.parametrize("relation", ["same", "inside", "around"])
def test_require_distinct_refuses_overlap(tmp_path, relation):
    src = tmp_path / "src"
    dst = {"same": src, "inside": src / "out", "around": tmp_path}[relation]
    with pytest.raises(StateError, match="source"):
        require_distinct(src, dst)
    require_distinct(src, tmp_path / "elsewhere")


def test_import_hf_into_its_own_source_is_refused(tmp_path, capsys):
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    before = sha256_file(src / "config.json")
    assert main(["import-hf", str(src), str(src)]) == 2
    assert "source" in capsys.readouterr().err
    assert sha256_file(src / "config.json") == before and sorted(p.name for p in src.iterdir()) == ["config.json"]


def test_export_hf_onto_its_checkpoint_is_refused(tmp_path, capsys):
    ck = _tiny_checkpoint(tmp_path / "ck")
    before = {p.name: sha256_file(p) for p in ck.iterdir()}
    for dst in (ck, ck / "hf"):
        assert main(["export-hf", str(ck), str(dst), "--no-tokenizer"]) == 2
        assert "source" in capsys.readouterr().err
    assert {p.name: sha256_file(p) for p in ck.iterdir()} == before


# ------------------------------------------------------------------------------------------ locks
def test_a_second_lock_on_a_directory_names_the_holder(tmp_path):
    holder = directory_lock(tmp_path / "run", "run directory")
    second = directory_lock(tmp_path / "run", "run directory")
    with holder, pytest.raises(LockError, match=f"in use by pid {os.getpid()}"), second:
        pass
    with directory_lock(tmp_path / "run"):  # released with its holder
        pass


def test_the_lock_holds_across_processes_and_dies_with_its_holder(tmp_path):
    code = (
        "import sys, time\n"
        "from archpool.io import directory_lock\n"
        f"with directory_lock({str(tmp_path / 'run')!r}):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(60)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LockError, match=f"pid {child.pid}"), directory_lock(tmp_path / "run"):
            pass
    finally:
        child.kill()
        child.wait()
    with directory_lock(tmp_path / "run"):  # the kernel released the killed holder's lock
        pass


# ------------------------------------------------------------------------------------ temporaries
def test_stale_temporaries_of_killed_writers_are_removed(tmp_path):
    stale, fresh, other = tmp_path / f".plan.json.abc{TMP_SUFFIX}", tmp_path / f".x.json.def{TMP_SUFFIX}", tmp_path / "keep.tmp"
    for p in (stale, fresh, other):
        p.write_text("partial")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert fresh.exists() and other.exists()


# ------------------------------------------------------------------------------------------ disk full
def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    cfg = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=1, max_seq_len=8)
    state = Decoder(cfg, seed=0).state_dict()
    root = tmp_path / "ckpt"
    good = ckpt.write_checkpoint(root / ckpt.step_name(1), state, cfg, {"step": 1, "losses": [1.0]})
    monkeypatch.setattr("safetensors.torch.save_file", _enospc)  # imported where weights are written
    with pytest.raises(StateError, match="disk full"):
        ckpt.write_checkpoint(root / ckpt.step_name(2), state, cfg, {"step": 2, "losses": [1.0, 0.5]})
    with pytest.raises(StateError, match="disk full"):
        ckpt.write_checkpoint(good, state, cfg, {"step": 1, "losses": [1.0]})  # replacing one: the old stays whole
    assert [p.name for p in root.iterdir()] == [ckpt.step_name(1)]
    ckpt.validate(good)
    assert ckpt.load_train_state(good)["step"] == 1


def test_disk_full_while_writing_text_is_named_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(Path, "write_text", _enospc)
    with pytest.raises(StateError, match="disk full"):
        atomic_write_text(tmp_path / "status.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_train_state_that_changed_after_the_fact_is_refused(tmp_path):
    cfg = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=1, max_seq_len=8)
    d = ckpt.write_checkpoint(tmp_path / "final", Decoder(cfg, seed=0).state_dict(), cfg, {"step": 3, "losses": [3.0, 2.0, 1.0]})
    torch.save({"step": 3, "losses": [0.1, 0.1, 0.1]}, d / ckpt.STATE_NAME)  # a different reported loss
    with pytest.raises(CheckpointError, match="train_state.pt: (truncated or altered|corrupt)"):
        ckpt.load_train_state(d)
    from archpool.eval.short import final_loss

    with pytest.raises(CheckpointError, match="train_state.pt: (truncated or altered|corrupt)"):
        final_loss(d)  # the reported pretrain_loss is never read from changed bytes
