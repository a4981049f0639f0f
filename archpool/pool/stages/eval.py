"""The eval stage of a pool run: task suites (or a task list) at the pool's lengths on the pretrained
model (``phase: base``), an extended one, or one rung of an extension ladder (``rung``: its
checkpoint after that many steps); LongPPL / perplexity where asked. Columns follow
:mod:`archpool.columns`. Every finished cell (a task × length × mode, an lm-eval or HELMET cell) is kept
in the node's ``cells/`` as it finishes (keyed by the whole model), so a node stopped midway resumes
without scoring a finished cell again."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.columns import eval_columns
from archpool.io import atomic_write_json
from archpool.pool.graph import StageContext
from archpool.pool.nodes import EvalConfig, EvalResult
from archpool.pool.stages import checkpoint, data

if TYPE_CHECKING:
    from archpool.eval.harness import RulerSettings
    from archpool.eval.helmet_data import HelmetDataSettings
    from archpool.eval.target import LoadedModel

STAGE_KEYS = ("tasks", "aggregate", "longppl", "short")  # what eval.json holds of an evaluation, in this order
CELLS = "cells"  # the node's cache of finished cells (tasks, lm-eval and HELMET cells): a stopped node resumes there


def run(ctx: StageContext) -> EvalResult:
    from archpool.eval.api import evaluate
    from archpool.eval.target import load_target

    c = ctx.config
    assert isinstance(c, EvalConfig)
    request = dataclasses.replace(c.eval.request(c.base, c.long_ctx, ctx.out_dir / "eval"), cache_dir=ctx.out_dir / CELLS)
    assert request.lengths is not None  # a phase's request always names its lengths
    store = data.store(ctx)
    tok = Path(store.path) / "tokenizer.json" if store is not None else None
    # a checkpoint run's model; else the input's (one rung of a ladder: its checkpoint in the extension run)
    model = checkpoint.model_path(ctx) if c.checkpoint is not None else checkpoint.extended_model(ctx, c.rung)
    target = load_target(model, tokenizer=tok)
    result: dict[str, Any] = {}
    if request.tasks or request.suites:
        res = evaluate(target, request, store=store, progress=False)
        result = {k: res[k] for k in STAGE_KEYS if k in res}
    metrics = eval_columns(result)
    harness = c.eval.harness
    if harness is not None and (harness.ruler is not None or harness.helmet_data is not None):
        model_dir = hf_dir(ctx, target)  # exported once for both suites
        lengths = list(request.lengths)
        if harness.ruler is not None:  # lm-evaluation-harness's RULER (archpool.eval.harness)
            result["harness"] = harness_ruler(ctx, harness.ruler, model_dir, lengths)
            metrics.update(result["harness"]["columns"])
        if harness.helmet_data is not None:  # HELMET's own data (archpool.eval.helmet_data)
            result["helmet_data"] = helmet_data(ctx, harness.helmet_data, model_dir, lengths)
            metrics.update(result["helmet_data"]["columns"])
    atomic_write_json(ctx.out_dir / "eval.json", result)
    return {"metrics": metrics, "lengths": list(request.lengths)}


def harness_ruler(ctx: StageContext, settings: RulerSettings, model_dir: Path, lengths: list[int]) -> dict[str, Any]:
    """lm-eval's RULER tasks of ``settings`` (``eval.harness.ruler``) on the node's model (``model_dir``, from
    :func:`hf_dir`), at their own lengths or the phase's. Results and the per-sample log go to the node's
    ``harness/``; its columns join the node's metrics."""
    from archpool.eval.harness import harness_request_from, run_ruler
    from archpool.pool.checkpoints import downloads_allowed

    request = harness_request_from(settings, lengths, ctx.out_dir / "harness", ctx.out_dir / CELLS, downloads_allowed())
    return run_ruler(model_dir, request, log=ctx.log)


def helmet_data(ctx: StageContext, settings: HelmetDataSettings, model_dir: Path, lengths: list[int]) -> dict[str, Any]:
    """HELMET's datasets of ``settings`` (``eval.harness.helmet_data``; its ``path`` relative to the pool file)
    on the node's model (``model_dir``, from :func:`hf_dir`), at their own lengths or the phase's. Results
    and the per-sample log go to the node's ``helmet_data/``; its columns join the node's metrics."""
    from archpool.eval.helmet_data import request_from, run_helmet_data

    request = request_from(settings, lengths, ctx.pool.base_dir, ctx.out_dir / "helmet_data", ctx.out_dir / CELLS)
    return run_helmet_data(model_dir, request, log=ctx.log)


def hf_dir(ctx: StageContext, target: LoadedModel) -> Path:
    """The node's model as a Hugging Face directory: one as it is, an archpool checkpoint exported into the
    node's own ``hf/`` with the tokenizer it was evaluated with."""
    if target.kind == "hf":
        return Path(target.checkpoint)
    from archpool.model.hf import export_hf

    # replace: a node run again after a failure finds its own earlier export
    return Path(export_hf(target.checkpoint, ctx.out_dir / "hf", tokenizer=target.tokenizer, replace=True))
