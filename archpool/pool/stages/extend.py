"""The extension stage of a pool run: one recipe from the final model or a milestone, to the pool's length."""

from __future__ import annotations

from typing import Any

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.sections import extension_config


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.io import sha256_file
    from archpool.train import checkpoint as ckpt
    from archpool.train.extend import load_run_config, plan_extension, resolve_source
    from archpool.train.trainer import Trainer

    c = ctx.config
    pre_dir = ctx.inputs["model"]
    run_cfg = load_run_config(pre_dir)
    milestone = float(c["milestone"])
    source = "final" if milestone >= 1.0 else ctx.input_results["model"]["milestones"][f"{milestone:g}"]
    # pools extend every member to one length: ``length_ratio`` x the pool's long context (paper: 8 x 8K)
    ext = extension_config(c["recipe"], int(c["long_ctx"]), source)
    src = resolve_source(pre_dir, source)
    source_cfg, weights = ckpt.load_weights(src)
    plan = plan_extension(source_cfg, run_cfg.train, ext, source)
    plan.train.progress = False
    record = {
        "kind": "extension",
        "extension": ext.to_dict(),
        "source": str(src.resolve()),
        "source_sha256": sha256_file(src / ckpt.MANIFEST_NAME),
        "model": plan.model.to_dict(),
        "data": run_cfg.data.to_dict(),
        "train": plan.train.to_dict(),
    }
    res = Trainer(
        ctx.out_dir,
        plan.model,
        plan.train,
        run_cfg.data,
        plan.stages,
        init_state=weights,
        record=record,
        metadata={"stage": "extension", "recipe": ext.recipe},
    ).run()
    return {"metrics": {"extension_loss": study.final_loss(res.losses)}, "tokens": res.tokens, "length": plan.model.max_seq_len}
