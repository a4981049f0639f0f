"""The extension stage of a pool run: one recipe from the final model or a milestone, to the pool's length."""

from __future__ import annotations

from typing import Any

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.sections import extension_config


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.train.extend import extend, load_run_config

    c = ctx.config
    pre_dir = ctx.inputs["model"]
    milestone = float(c["milestone"])
    source = "final" if milestone >= 1.0 else ctx.input_results["model"]["milestones"][f"{milestone:g}"]
    # pools extend every member to one length: ``length_ratio`` x the pool's long context (paper: 8 x 8K)
    ext = extension_config(c["recipe"], int(c["long_ctx"]), source)
    res = extend(pre_dir, ext, load_run_config(pre_dir), progress=False, out=ctx.out_dir)
    return {"metrics": {"extension_loss": study.final_loss(res.losses)}, "tokens": res.tokens, "length": ext.length}
