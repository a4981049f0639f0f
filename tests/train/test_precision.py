"""``train.dtype``: auto is bfloat16 on CUDA and on a bf16 CPU from the measured model size; the
resolved precision is recorded with the checkpoints, and bf16 training on CPU tracks float32."""

from __future__ import annotations

import json

import pytest

import archpool.train.precision as precision
from archpool.rundir import run_dir_final
from archpool.train.config import RunConfig
from archpool.train.trainer import pretrain
from tests.helpers.train import tiny_run


@pytest.mark.parametrize(
    "dtype,device,d_model,has_bf16,want",
    [
        ("auto", "cuda", 64, False, "bfloat16"),
        ("auto", "cpu", 64, True, "float32"),  # measured slower at small widths
        ("auto", "cpu", 255, True, "float32"),
        ("auto", "cpu", 256, True, "bfloat16"),
        ("auto", "cpu", 4096, False, "float32"),  # no native bf16: emulated, never pays
        ("float32", "cuda", 4096, True, "float32"),
        ("bfloat16", "cpu", 32, False, "bfloat16"),  # an explicit choice is kept
    ],
)
def test_auto_resolves_by_device_size_and_cpu(monkeypatch, dtype, device, d_model, has_bf16, want):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    assert precision.resolve_dtype(dtype, device, d_model) == want


def test_the_resolved_dtype_is_recorded_and_bf16_tracks_float32(tmp_path):
    runs = {}
    for dtype in ("float32", "bfloat16"):
        runs[dtype] = pretrain(RunConfig.from_dict(tiny_run(dtype=dtype, max_steps=8)), tmp_path / dtype).losses
        meta = json.loads((run_dir_final(tmp_path / dtype) / "config.json").read_text())["metadata"]
        assert meta["dtype"] == dtype
    assert runs["bfloat16"] != runs["float32"]  # autocast really ran
    assert runs["bfloat16"] == pytest.approx(runs["float32"], rel=0.02)
