"""Checkpoints: atomic, validated, pruned, resumable to the same losses, loadable as models."""

from __future__ import annotations

import shutil

import pytest
import torch

from archpool.errors import CheckpointError
from archpool.model.checkpoint import load_checkpoint
from archpool.train import checkpoint as ckpt
from archpool.train.config import RunConfig
from archpool.train.trainer import pretrain
from tests.helpers.train import read_losses, tiny_run


def _run(tmp_path, name="run", **train):
    return pretrain(RunConfig.from_dict(tiny_run(**train)), tmp_path / name)


def test_resume_after_losing_the_last_checkpoints_repeats_the_losses_bit_for_bit(tmp_path):
    full = _run(tmp_path, "full", keep_last=5)
    part = tmp_path / "part"
    shutil.copytree(tmp_path / "full", part)
    for step in (8, 12):  # as if killed just after step 4's checkpoint
        shutil.rmtree(part / "ckpt" / ckpt.step_name(step))
    shutil.rmtree(part / "milestones" / "final")
    resumed = pretrain(RunConfig.from_dict(tiny_run(keep_last=5)), part)
    assert resumed.resumed_from == 4
    assert read_losses(part) == read_losses(tmp_path / "full") == full.losses  # exact equality, not approx
    a, b = load_checkpoint(tmp_path / "full" / "milestones" / "final"), load_checkpoint(part / "milestones" / "final")
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), n


def test_truncated_checkpoint_is_rejected_and_the_previous_one_used(tmp_path):
    _run(tmp_path, keep_last=3)
    root = tmp_path / "run" / "ckpt"
    newest = root / ckpt.step_name(12)
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"model.safetensors: truncated"):
        ckpt.validate(newest)
    with pytest.warns(UserWarning, match="skipping checkpoint.*truncated"):
        assert ckpt.latest(root) == root / ckpt.step_name(8)
    state = root / ckpt.step_name(8) / "train_state.pt"  # same size, different bytes: the hash catches it
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        ckpt.validate(state.parent)
    with pytest.warns(UserWarning):
        assert ckpt.latest(root) == root / ckpt.step_name(4)
    (root / ckpt.step_name(4) / ckpt.MANIFEST_NAME).unlink()  # a directory without its manifest is incomplete
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        ckpt.validate(root / ckpt.step_name(4))
    resumed = pretrain(RunConfig.from_dict(tiny_run(keep_last=3)), tmp_path / "run")  # nothing valid: starts over
    assert resumed.resumed_from == 0 and resumed.losses == read_losses(tmp_path / "run")


def test_half_written_checkpoint_never_looks_whole(tmp_path, monkeypatch):
    model_state = {"embed.weight": torch.ones(4, 2)}
    from archpool.model.config import ModelConfig

    cfg = ModelConfig(vocab_size=4, d_model=2, n_layers=1, n_heads=1, max_seq_len=8)

    def crash(*a, **k):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.write_checkpoint(tmp_path / "ckpt" / ckpt.step_name(1), model_state, cfg, {"step": 1})
    assert ckpt.list_checkpoints(tmp_path / "ckpt") == [] and ckpt.latest(tmp_path / "ckpt") is None


def test_keep_last_prunes_but_milestones_stay(tmp_path):
    _run(tmp_path, keep_last=1, milestones=[4, 8])
    run = tmp_path / "run"
    assert [s for s, _ in ckpt.list_checkpoints(run / "ckpt")] == [12]
    for name in ("step_000004", "step_000008", "final"):
        ckpt.validate(run / "milestones" / name)
    early = load_checkpoint(run / "milestones" / "step_000004")
    assert early.cfg.d_model == 32
    state = ckpt.load_train_state(run / "milestones" / "step_000004")
    assert state["step"] == 4 and len(state["losses"]) == 4 and state["data"]["streams"][0]["global_sequences"] == 32


def test_train_state_loads_with_weights_only(tmp_path):
    _run(tmp_path, max_steps=4)
    path = tmp_path / "run" / "ckpt" / ckpt.step_name(4) / ckpt.STATE_NAME
    torch.load(path, weights_only=True)  # the trainer's own state is plain tensors and values

    class Evil:
        def __reduce__(self):
            return (print, ("pickled code ran",))

    torch.save({"step": 1, "x": Evil()}, path)
    with pytest.raises(CheckpointError, match="train_state.pt: (truncated or altered|corrupt)"):  # the manifest catches it first
        ckpt.load_train_state(path.parent)
    (path.parent / ckpt.MANIFEST_NAME).unlink()
    with pytest.raises(CheckpointError, match="unreadable training state"):  # and weights_only refuses the pickle
        ckpt.load_train_state(path.parent)
