"""The attention stage of a pool run: sinks, entropy and retrieval heads of the extended model, or of
the pretrained one before extension (``base_attn_*`` columns), at the same lengths for both; a checkpoint
run's (and its extension's) on the pool's shared text."""

from __future__ import annotations

from pathlib import Path

from archpool.pool.graph import StageContext
from archpool.pool.nodes import AttentionConfig, AttentionResult
from archpool.pool.stages import checkpoint, data


def run(ctx: StageContext) -> AttentionResult:
    from archpool.attention.stage import pool_stage

    c = ctx.config
    assert isinstance(c, AttentionConfig)
    if c.checkpoint is not None or c.text is not None:  # a checkpoint run's model, or its extension
        return _checkpoint(ctx, c)
    store = data.store_path(ctx)
    res = pool_stage(
        ctx.inputs["model"],
        ctx.out_dir,
        store=store,
        settings=c.attention,
        seq_len=c.seq_len,
        long_ctx=c.analysis_len,
        log=ctx.log,
    )
    return {"metrics": res["metrics"], "json": res["json"]}


def _checkpoint(ctx: StageContext, c: AttentionConfig) -> AttentionResult:
    """A checkpoint run's model on one text shared by every checkpoint run of the pool, whatever its
    format (archpool run, archpool checkpoint, HF directory), so their columns are comparable: the
    pool's ``texts``, else deterministic filler sentences (:func:`archpool.tasks.haystack.pseudo_sentences`)."""
    from archpool.attention.settings import analysis_settings
    from archpool.attention.stage import RESULT_NAME, analyze_target

    settings = analysis_settings(c.attention, c.seq_len, c.analysis_len)
    texts = ctx.pool.texts or [str(_filler_text(ctx.out_dir))]
    out = ctx.out_dir / RESULT_NAME
    model = checkpoint.model_path(ctx) if c.checkpoint is not None else checkpoint.extended_model(ctx)
    r = analyze_target(model, settings, texts=texts, out=out, log=ctx.log)
    return {"metrics": r["metrics"], "json": str(out)}


def _filler_text(out_dir: Path) -> Path:
    import random

    from archpool.tasks.haystack import pseudo_sentences

    path = out_dir / "filler.txt"
    path.write_text(" ".join(pseudo_sentences(random.Random(0), 2000)) + "\n")
    return path
