"""Shared helpers for the train-stage tests: tiny run configs on the synthetic token source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).parent / "torchrun"


def few_steps(steps: int, log_every: int) -> dict:
    """A ``train:`` section for a tiny model trained ``steps`` steps on a word corpus (one checkpoint at the end)."""
    return {
        "lr": 1e-2,
        "warmup_steps": 2,
        "global_batch_tokens": 512,
        "micro_batch_size": 4,
        "max_steps": steps,
        "log_every": log_every,
        "ckpt_every": steps,
        "progress": False,
        "seed": 0,
    }


def tiny_run(**train) -> dict:
    return {
        "model": {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 32},
        "data": {"synthetic": {}},
        "train": {
            "lr": 1e-2,
            "warmup_steps": 2,
            "global_batch_tokens": 256,
            "micro_batch_size": 4,
            "max_steps": 12,
            "log_every": 1,
            "ckpt_every": 4,
            "progress": False,
            **train,
        },
    }


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def child_env(threads: int = 2) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    env.pop("WORLD_SIZE", None)
    return env


def run_cli(*args: str, torchrun: int = 0, timeout: float = 240) -> subprocess.CompletedProcess:
    """``archpool ARGS`` in a fresh process (under ``torchrun --nproc-per-node N`` when asked)."""
    if torchrun:
        cmd = [str(TORCHRUN), "--nproc-per-node", str(torchrun), "--master-port", str(_free_port()), "-m", "archpool.cli", *args]
    else:
        cmd = [sys.executable, "-m", "archpool.cli", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=child_env(1 if torchrun else 2), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
