"""The pretraining stage of a pool run: the trainer at the run's pretraining context, with milestones."""

from __future__ import annotations

from typing import Any

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.stages import data


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.model.config import ModelConfig
    from archpool.train.checkpoint import step_name
    from archpool.train.config import TrainConfig
    from archpool.train.trainer import Trainer

    c = ctx.config
    cfg = ModelConfig.from_dict(c["model"])
    train = {"progress": False, **c["train"], "seq_len": c["seq_len"], "seed": c["seed"]}
    total = TrainConfig.from_dict({**train, "milestones": []}).total_steps()
    milestone_steps = {f"{m:g}": max(1, round(m * total)) for m in c.get("milestones") or []}
    train["milestones"] = sorted(set(milestone_steps.values()))
    tcfg = TrainConfig.from_dict(train)
    section = data.section(ctx)
    record = {
        "kind": "pretrain",
        "model": c["model"],
        "data": section.to_dict(),
        "train": tcfg.to_dict(),
        "extension": [],
        "model_resolved": cfg.to_dict(),
        "init_seed": c["init_seed"],
    }
    meta = {"stage": "pretrain", "run": (ctx.run or {}).get("name")}
    res = Trainer(ctx.out_dir, cfg, tcfg, section, record=record, metadata=meta, init_seed=c["init_seed"]).run()
    stability = res.stability or {}
    metrics = {"pretrain_loss": study.final_loss(res.losses)}
    if isinstance(stability.get("score"), (int, float)):
        metrics["stability"] = stability["score"]
    return {"metrics": metrics, "steps": res.steps, "milestones": {k: step_name(v) for k, v in milestone_steps.items()}}
