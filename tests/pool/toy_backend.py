"""A test double of the pool's stages (``backend: toy_backend``): exercises the orchestration without
training anything. Not part of the product: the tests put this directory on ``PYTHONPATH`` and name
the module in ``$ARCHPOOL_BACKENDS`` (tests/conftest.py), the environment's list of trusted backends.

Each stage is deterministic in its config and inputs, works in steps with a checkpoint per step
(so a kill mid-stage resumes from the last step), and logs every executed step to
``POOL_OUT/toy_steps.log``. The metrics follow a made-up but study-shaped formula (features cost
points, GQA × SWA compounds, seeds add noise) so the analysis and report have something to show.
``TOY_FAIL="run:stage[,run:stage...]"`` (run may be ``*``) makes those stages raise, to test failure
isolation, reporting and retries.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from archpool.io import atomic_write_json, sha256_json
from archpool.pool.graph import StageContext


def _unit(*parts: Any) -> float:
    """A deterministic number in [-0.5, 0.5) from ``parts``."""
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "little") / 2**32 - 0.5


def _pool_out(ctx: StageContext) -> Path:
    return ctx.out_dir.parents[2]


def _stepped(ctx: StageContext, steps: int, seconds: float, start_state: str) -> str:
    """Run ``steps`` steps, one checkpoint each, resuming after the last checkpoint found."""
    ckpt = ctx.out_dir / "ckpt"
    ckpt.mkdir(exist_ok=True)
    done = sorted(ckpt.glob("step_*.json"))
    state = json.loads(done[-1].read_text())["state"] if done else start_state
    first = len(done)
    if first:
        ctx.log(f"resuming at step {first}/{steps}")
    with open(_pool_out(ctx) / "toy_steps.log", "a") as log:
        for step in range(first, steps):
            if seconds:
                time.sleep(seconds)
            state = sha256_json([state, step])[:16]
            atomic_write_json(ckpt / f"step_{step:04d}.json", {"state": state, "step": step})
            log.write(f"{ctx.out_dir.parent.name} {ctx.out_dir.name} {step}\n")
            log.flush()
    return state


def data(ctx: StageContext) -> dict[str, Any]:
    (ctx.out_dir / "corpus.txt").write_text("toy corpus\n")
    return {"docs": 1, "metrics": {}}


def _run(ctx: StageContext) -> dict[str, Any]:
    """The run spec as its plan.json mapping (empty for pool-level nodes)."""
    return ctx.run.to_dict() if ctx.run is not None else {}


def pretrain(ctx: StageContext) -> dict[str, Any]:
    c = ctx.config  # PretrainConfig; its train is the pool's train: section as written (not the real backend)
    steps = int(c.train.get("steps", 4))
    state = _stepped(ctx, steps, float(c.train.get("step_seconds", 0)), sha256_json([c.model.to_dict(), c.init_seed]))
    run = _run(ctx)
    loss = 3.0 + 0.1 * (run.get("model", {}).get("norm") == "post") + 0.05 * _unit("loss", run.get("arch"), c.seed)
    return {"state": state, "steps": steps, "metrics": {"pretrain_loss": round(loss, 6)}}


def extend(ctx: StageContext) -> dict[str, Any]:
    r = ctx.config.recipe  # the recipe as written (not the real backend)
    steps = int(r.get("steps", 2))
    base = ctx.input_results["model"]["state"]
    state = _stepped(ctx, steps, float(r.get("step_seconds", 0)), sha256_json([base, r, ctx.config.milestone]))
    return {"state": state, "metrics": {"extension_loss": round(2.5 + 0.1 * _unit("ext", state), 6)}}


def _score(run: dict[str, Any], milestone: float, recipe: str, long_ctx: int) -> float:
    m = run["model"]
    qk = m["qk_norm"] != "none"
    gqa = m["n_kv_heads"] < m["n_heads"]
    swa = m.get("swa_pattern", "none") != "none"
    short = run["pretrain_ctx"] < long_ctx
    score = 50.0 - 4.0 * qk - 2.0 * gqa - 1.0 * swa - 6.0 * (gqa and swa) - 1.5 * short
    score -= 3.0 * (1.0 - milestone)
    return score + 1.0 * _unit("seed", run["arch"], run["seed"], recipe)


def eval(ctx: StageContext) -> dict[str, Any]:
    run = _run(ctx)
    c = ctx.config
    if c.phase == "base":
        return {"metrics": {"short_score": round(_score(run, 1.0, "base", c.long_ctx) + 10, 6)}}
    extension = ctx.input_configs["model"]  # the extend node's ExtendConfig
    score = _score(run, extension.milestone, extension.recipe["name"], c.long_ctx) + 0.1 * int(c.rung or 0)
    return {"metrics": {"long_score": round(score, 6)}}


def attention(ctx: StageContext) -> dict[str, Any]:
    run = _run(ctx)
    qk = run["model"]["qk_norm"] != "none"
    sink = 0.4 - 0.2 * qk + 0.02 * _unit("sink", run["arch"], run["seed"])
    return {"metrics": {"sink_strength": round(sink, 6), "entropy": round(2.0 + 0.5 * qk, 6)}}


class InjectedFailure(RuntimeError):
    """Raised where ``TOY_FAIL`` asks for a failure."""


def _failing(stage: str, fn):
    def run(ctx: StageContext) -> dict[str, Any]:
        label = _run(ctx).get("name", "pool")
        for item in filter(None, os.environ.get("TOY_FAIL", "").split(",")):
            run_name, _, fail_stage = item.partition(":")
            if fail_stage.strip() == stage and run_name.strip() in (label, "*"):
                raise InjectedFailure(f"injected failure in stage {stage!r} of run {label!r} (test double)")
        return fn(ctx)

    return run


STAGES = {
    name: _failing(name, fn)
    for name, fn in {"data": data, "pretrain": pretrain, "extend": extend, "eval": eval, "attention": attention}.items()
}
