"""The extension stage of a pool run: one recipe from the final model or a milestone, to the pool's length;
for a checkpoint run the pool extends, the recipe on its model (:func:`checkpoint_extension`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.nodes import CheckpointExtendConfig, ExtendConfig, ExtendResult, PretrainConfig, PretrainResult
from archpool.pool.sections import milestone_key
from archpool.pool.stages import checkpoint, data
from archpool.train.config import ExtensionConfig, TrainConfig

MODEL, RUN = "model", "run"  # a checkpoint extension's directories in its node: the extended model, its training run


def run(ctx: StageContext) -> ExtendResult:
    from archpool.train.config import RunConfig
    from archpool.train.extend import extend

    if isinstance(ctx.config, CheckpointExtendConfig):
        return checkpoint_extension(ctx, ctx.config)
    c, pre = ctx.config, ctx.input_configs["model"]
    assert isinstance(c, ExtendConfig) and isinstance(pre, PretrainConfig)
    assert isinstance(c.recipe, ExtensionConfig) and isinstance(pre.train, TrainConfig)  # the real backend's configs
    source = "final" if c.from_final else milestone_source(cast(PretrainResult, ctx.input_results["model"]), c.milestone)
    # the recipe's ExtensionConfig, resolved to the pool's length when the pool was parsed
    ext = c.recipe if source == "final" else dataclasses.replace(c.recipe, source=source)
    # the pretraining's typed sections from the plan (the pool's data section reading the prepared store)
    run_cfg = RunConfig(model=pre.model.to_dict(), data=data.section(ctx), train=pre.train)
    res = extend(ctx.inputs["model"], ext, run_cfg, progress=False, out=ctx.out_dir)
    assert ext.length is not None  # resolved to the pool's length when the pool was parsed
    return {"metrics": {"extension_loss": study.final_loss(res.losses)}, "tokens": res.tokens, "length": ext.length}


def checkpoint_extension(ctx: StageContext, c: CheckpointExtendConfig) -> ExtendResult:
    """A checkpoint run's model extended by the node's recipe (:func:`archpool.train.extend_model.extend_model`)
    into the node's ``model/`` (its training run, with ``steps``, in ``run/``), at the run's pretraining
    context; the model's tokenizer is kept beside both, so every rung of a ladder reads its own tokens."""
    from archpool.io import copy_regular_file
    from archpool.pool.checkpoints import CheckpointRunSpec
    from archpool.train.extend_model import extend_model, extension_data, read_source

    run = ctx.run
    assert isinstance(run, CheckpointRunSpec) and run.extend is not None
    assert isinstance(c.recipe, ExtensionConfig)  # the real backend's config
    source = checkpoint.model_path(ctx)
    config_ctx = run.pretrain_ctx_from in ("pretrain_ctx", "design", "published")  # else the model's config says it
    src = read_source(source, run.pretrain_ctx if config_ctx else None)
    trains = bool(c.steps or c.recipe.budgets)
    section = extension_data(src.tokenizer, run.extend.get("data"), run.extend.get("text")) if trains else None
    if src.tokenizer is not None:
        copy_regular_file(src.tokenizer, ctx.out_dir / "tokenizer.json")
    res = extend_model(
        source,
        c.recipe,
        ctx.out_dir / MODEL,
        steps=c.steps,
        pretrain_ctx=run.pretrain_ctx if config_ctx else None,
        data=section,
        run_dir=ctx.out_dir / RUN,
        replace=True,  # a node run again after a failure replaces its own earlier output
        progress=False,
    )
    metrics = {} if res.final_loss is None else {"extension_loss": float(res.final_loss)}
    out: ExtendResult = {"metrics": metrics, "tokens": 0, "length": res.length, "model": str(res.out)}
    if res.run_dir is not None:
        out["run"] = str(Path(res.run_dir))
    return out


def milestone_source(pretrained: PretrainResult, fraction: float) -> str:
    """The checkpoint the pretrain stage saved at the milestone ``fraction`` of pretraining."""
    return pretrained["milestones"][milestone_key(fraction)]
