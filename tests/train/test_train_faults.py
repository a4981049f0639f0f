"""A run directory under fault: a second writer, a damaged final milestone, a damaged record or metrics
log, and a full disk mid-run."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest

from archpool.errors import LockError, StateError
from archpool.io import directory_lock
from archpool.rundir import RUN_METRICS as METRICS
from archpool.rundir import RUN_RECORD, run_dir_final
from archpool.train import checkpoint as ckpt
from archpool.train.callbacks import truncate_metrics
from archpool.train.config import RunConfig
from archpool.train.trainer import pretrain
from tests.helpers.train import read_losses, tiny_run


def _pretrain(run_dir, **train):
    return pretrain(RunConfig.from_dict(tiny_run(**train)), run_dir)


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_second_writer_of_a_run_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    with directory_lock(run, "run directory"), pytest.raises(LockError, match=f"run directory is in use by pid {os.getpid()}"):
        _pretrain(run)
    assert not (run / "ckpt").exists() and not (run / METRICS).exists()


def test_a_corrupt_final_milestone_is_rebuilt_from_the_newest_intact_checkpoint(tmp_path):
    run = tmp_path / "run"
    first = _pretrain(run, keep_last=3)
    weights = run_dir_final(run) / "model.safetensors"
    expected = json.loads((run_dir_final(run) / ckpt.MANIFEST_NAME).read_text())["files"]["model.safetensors"]["sha256"]
    # a separate copy of the file (not the hard link shared with ckpt/step_000012), then damaged
    shutil.copyfile(weights, weights.with_suffix(".copy"))
    os.replace(weights.with_suffix(".copy"), weights)
    _flip_a_byte(weights)
    with pytest.warns(UserWarning, match="rebuilding the final milestone"):
        again = _pretrain(run, keep_last=3)
    assert again.already_complete and again.losses == first.losses
    assert ckpt.validate(run_dir_final(run))["model.safetensors"] == expected

    _flip_a_byte(weights)  # now the shared bytes: step 12 is damaged too, so steps 9..12 are retrained
    with pytest.warns(UserWarning, match="rebuilding the final milestone"):
        third = _pretrain(run, keep_last=3)
    assert third.resumed_from == 8 and third.losses == first.losses == read_losses(run)
    assert ckpt.validate(run_dir_final(run))["model.safetensors"] == expected


def test_a_truncated_run_record_is_a_named_error(tmp_path):
    run = tmp_path / "run"
    _pretrain(run, max_steps=4)
    record = run / RUN_RECORD
    record.write_bytes(record.read_bytes()[:20])
    with pytest.raises(StateError, match="run_config.json: truncated or corrupt.*delete it"):
        _pretrain(run, max_steps=4)


def test_garbage_lines_in_metrics_are_dropped_with_a_warning(tmp_path):
    path = tmp_path / METRICS
    rows = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3)]
    garbage = bytes(b for b in range(256) if b not in b"\r\n")
    path.write_bytes((rows[0] + "\n").encode() + garbage + b"\n" + (rows[1] + "\n" + rows[2] + '\n{"step": 4, "lo').encode())
    with pytest.warns(UserWarning, match="dropped 1 damaged line"):
        truncate_metrics(path, 2)
    assert path.read_text().splitlines() == rows[:2]


def test_disk_full_mid_run_is_named_and_the_run_resumes(tmp_path, monkeypatch):
    import safetensors.torch as mc  # archpool.model.checkpoint imports save_file where it writes weights

    real, calls = mc.save_file, []

    def fills_up(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second checkpoint (step 8) finds the disk full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(mc, "save_file", fills_up)
    run = tmp_path / "run"
    with pytest.raises(StateError, match="step_000008: disk full"):
        _pretrain(run)
    assert [p.name for p in (run / "ckpt").iterdir()] == [ckpt.step_name(4)]  # no partial checkpoint
    ckpt.validate(run / "ckpt" / ckpt.step_name(4))
    monkeypatch.setattr(mc, "save_file", real)
    resumed = _pretrain(run)
    assert resumed.resumed_from == 4 and resumed.losses == read_losses(run)


_FSIZE_WRITER = """
import resource, signal, sys, torch
from archpool.errors import StateError
from archpool.model.config import ModelConfig
from archpool.train import checkpoint as ckpt
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=32)
weights = {"w": torch.zeros(8)}
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    ckpt.write_checkpoint(sys.argv[1], weights, cfg, {"step": 3, "optimizer": {"m": torch.randn(200_000)}})
except StateError as e:
    print("StateError:", e)
"""


def test_a_train_state_write_that_really_fails_is_a_named_error_and_keeps_nothing(tmp_path):
    """A real failed write (the file-size limit, in a child process): torch.save's RuntimeError becomes
    the named write error and no partial checkpoint is left."""
    import subprocess
    import sys

    target = tmp_path / "ckpt" / "step_000003"
    out = subprocess.run([sys.executable, "-c", _FSIZE_WRITER, str(target)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"StateError: {target}: cannot write (") and "training state's write failed" in out.stdout
    assert not target.exists() and list((tmp_path / "ckpt").iterdir()) == []


def test_a_train_state_write_on_a_full_disk_is_named_disk_full(tmp_path, monkeypatch):
    from archpool.model.config import ModelConfig

    def torch_zip_writer_fails(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(ckpt.torch, "save", torch_zip_writer_fails)
    monkeypatch.setattr(ckpt.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 0))
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=32)
    target = tmp_path / "step_000001"
    with pytest.raises(StateError, match="step_000001: disk full while writing"):
        ckpt.write_checkpoint(target, {"w": ckpt.torch.zeros(2)}, cfg, {"step": 1})
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == []
