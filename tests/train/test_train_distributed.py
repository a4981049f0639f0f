"""The same entry point under torchrun (gloo, 2 processes): DDP and FSDP2 match 1 process, and
checkpoints written at one world size resume at another."""

from __future__ import annotations

import shutil

import pytest

from archpool.train import checkpoint as ckpt
from tests.helpers.train import read_losses, run_cli, tiny_run, write_config


def _config(tmp_path, name, **train):
    cfg = tiny_run(max_steps=8, ckpt_every=4, keep_last=3, **train)
    cfg["model"]["tie_embeddings"] = True  # shared parameters are the awkward case for sharding
    return write_config(tmp_path / f"{name}.yaml", cfg)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_process_gloo_run_matches_one_process_and_resumes_at_world_size_one(tmp_path, parallel):
    single_cfg = _config(tmp_path, "single")
    run_cli("train", str(single_cfg), "--out", str(tmp_path / "single"))
    single = read_losses(tmp_path / "single")

    multi_cfg = _config(tmp_path, parallel, parallel=parallel)
    run_cli("train", str(multi_cfg), "--out", str(tmp_path / parallel), torchrun=2)
    multi = read_losses(tmp_path / parallel)
    assert len(multi) == len(single) == 8
    assert multi == pytest.approx(single, rel=1e-5)

    # a 2-rank checkpoint resumed by 1 process: same losses as the uninterrupted 1-process run
    run = tmp_path / parallel
    shutil.rmtree(run / "ckpt" / ckpt.step_name(8))
    shutil.rmtree(run / "milestones" / "final")
    run_cli("train", str(multi_cfg), "--out", str(run))
    assert read_losses(run) == pytest.approx(single, rel=1e-5)
    assert ckpt.load_train_state(run / "ckpt" / ckpt.step_name(4))["world_size"] == 2
    assert ckpt.load_train_state(run / "milestones" / "final")["world_size"] == 1
