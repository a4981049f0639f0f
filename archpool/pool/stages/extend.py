"""The extension stage of a pool run: one recipe from the final model or a milestone, to the pool's length."""

from __future__ import annotations

import dataclasses
from typing import Any

from archpool import study
from archpool.pool.graph import StageContext
from archpool.pool.stages import data


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.train.extend import extend, load_run_config

    c = ctx.config
    pre_dir = ctx.inputs["model"]
    milestone = float(c["milestone"])
    source = "final" if milestone >= 1.0 else ctx.input_results["model"]["milestones"][f"{milestone:g}"]
    # the recipe's ExtensionConfig, resolved to the pool's length when the pool was parsed
    ext = c["recipe"] if source == "final" else dataclasses.replace(c["recipe"], source=source)
    run_cfg = dataclasses.replace(load_run_config(pre_dir), data=data.section(ctx))  # the pool's typed data section
    res = extend(pre_dir, ext, run_cfg, progress=False, out=ctx.out_dir)
    return {"metrics": {"extension_loss": study.final_loss(res.losses)}, "tokens": res.tokens, "length": ext.length}
