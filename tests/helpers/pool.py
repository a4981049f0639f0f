"""Shared helpers for the pool tests: toy pools (no training) and a CLI runner in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BACKEND_DIR = REPO / "tests" / "pool"  # holds toy_backend, the pool's stage test double


def toy_pool(tmp_path: Path, **over) -> Path:
    """A 2x2 factorial (qk_norm x swa) toy pool, 2 seeds, one milestone, two recipes."""
    spec = dict(
        name="toy",
        backend="toy_backend",
        seeds=[0, 1],
        milestones=[0.5],
        train=dict(steps=4, step_seconds=0.0),
        extension=[dict(name="ntk", steps=2), dict(name="yarn", steps=2)],
        factorial=dict(axes=dict(qk_norm=["none", "layerwise"], swa=[False, True])),
    )
    spec.update(over)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def pool_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "archpool", *args]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child `archpool` process: this checkout and the toy backend importable."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(BACKEND_DIR)]), **extra)


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = child_env(**(env or {}))
    return subprocess.run(pool_cmd(*args), cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)


class PlainConfig(dict):
    """A stage config for tests of the graph's mechanics: a mapping that is its own plain form."""

    def to_dict(self) -> dict:
        return dict(self)


def real_synthetic_pool(tmp_path: Path, name: str, max_steps: int, extension_tokens: int) -> Path:
    """A pool of the real stages on the synthetic stream, small enough for signal and kill tests: two
    runs (swa off / on), one seed, checkpointed every 4 steps, one ntk extension to 2x,
    no evaluation or attention."""
    spec = dict(
        name=name,
        seeds=[0],
        data=dict(synthetic=dict(seed=0)),
        train=dict(max_steps=max_steps, global_batch_tokens=2048, micro_batch_size=8, log_every=2, ckpt_every=4, warmup_steps=2),
        extension=[dict(name="ntk", tokens=extension_tokens, length_ratio=2)],
        eval=dict(enabled=False),
        attention=dict(enabled=False),
        factorial=dict(axes=dict(swa=[False, True])),
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
