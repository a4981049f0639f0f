"""The pretraining stage of a pool run: the trainer at the run's pretraining context, with milestones."""

from __future__ import annotations

from typing import Any

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.nodes import PretrainConfig, PretrainResult
from archpool.pool.sections import milestone_steps
from archpool.pool.stages import data
from archpool.train.config import TrainConfig


def run(ctx: StageContext) -> PretrainResult:
    from archpool.train.checkpoint import step_name
    from archpool.train.trainer import Trainer

    c = ctx.config
    assert isinstance(c, PretrainConfig) and isinstance(c.train, TrainConfig)  # the real backend's config
    cfg, tcfg = c.model, c.train  # ModelConfig, and the run's TrainConfig (PoolSpec.pretrain_config)
    steps = milestone_steps(c.milestones, tcfg.total_steps())
    section = data.section(ctx)
    record: dict[str, Any] = {
        "kind": "pretrain",
        "model": cfg.to_dict(),
        "data": section.to_dict(),
        "train": tcfg.to_dict(),
        "extension": [],
        "model_resolved": cfg.to_dict(),
        "init_seed": c.init_seed,
    }
    meta = {"stage": "pretrain", "run": ctx.run.name if ctx.run is not None else None}
    res = Trainer(ctx.out_dir, cfg, tcfg, section, record=record, metadata=meta, init_seed=c.init_seed).run()
    stability = res.stability or {}
    metrics = {"pretrain_loss": study.final_loss(res.losses)}
    if isinstance(stability.get("score"), (int, float)):
        metrics["stability"] = stability["score"]
    return {"metrics": metrics, "steps": res.steps, "milestones": {k: step_name(v) for k, v in steps.items()}}
