"""The extension stage of a pool run: one recipe from the final model or a milestone, to the pool's length."""

from __future__ import annotations

import dataclasses

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.nodes import ExtendConfig, ExtendResult, PretrainConfig, PretrainResult
from archpool.pool.sections import milestone_key
from archpool.pool.stages import data


def run(ctx: StageContext) -> ExtendResult:
    from archpool.train.config import RunConfig
    from archpool.train.extend import extend

    c, pre = ctx.config, ctx.input_configs["model"]
    assert isinstance(c, ExtendConfig) and isinstance(pre, PretrainConfig)
    source = "final" if c.from_final else milestone_source(ctx.input_results["model"], c.milestone)
    # the recipe's ExtensionConfig, resolved to the pool's length when the pool was parsed
    ext = c.recipe if source == "final" else dataclasses.replace(c.recipe, source=source)
    # the pretraining's typed sections from the plan (the pool's data section reading the prepared store)
    run_cfg = RunConfig(model=pre.model.to_dict(), data=data.section(ctx), train=pre.train)
    res = extend(ctx.inputs["model"], ext, run_cfg, progress=False, out=ctx.out_dir)
    return {"metrics": {"extension_loss": study.final_loss(res.losses)}, "tokens": res.tokens, "length": ext.length}


def milestone_source(pretrained: PretrainResult, fraction: float) -> str:
    """The checkpoint the pretrain stage saved at the milestone ``fraction`` of pretraining."""
    return pretrained["milestones"][milestone_key(fraction)]
