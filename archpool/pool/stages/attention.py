"""The attention stage of a pool run: sinks, entropy and retrieval heads of the extended model, or of
the pretrained one before extension (``base_attn_*`` columns), at the same lengths for both."""

from __future__ import annotations

from typing import Any

from archpool.pool.graph import StageContext
from archpool.pool.sections import attention_settings


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.attention.runner import pool_stage

    c = ctx.config
    _, settings = attention_settings(c["attention"])
    length = c.get("analysis_len") or int(ctx.input_results["model"].get("length") or 0) or None
    res = pool_stage(
        ctx.inputs["model"],
        ctx.out_dir,
        store=ctx.input_results.get("data", {}).get("store"),
        settings=settings,
        seq_len=int(c["seq_len"]),
        long_ctx=length,
        log=ctx.log,
    )
    return {"metrics": res["metrics"], "json": res["json"]}
