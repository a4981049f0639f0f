"""The eval stage of a pool run: task suites (or a task list) at the pool's lengths on the pretrained
model (``phase: base``), an extended one, or one rung of an extension ladder (``rung``: its
checkpoint after that many steps); LongPPL / perplexity where asked. Columns follow
:mod:`archpool.columns`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.columns import eval_columns
from archpool.io import atomic_write_json
from archpool.pool.graph import StageContext
from archpool.pool.stages import checkpoint, data

STAGE_KEYS = ("tasks", "aggregate", "longppl", "short")  # what eval.json holds of an evaluation, in this order


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.eval.api import evaluate
    from archpool.eval.target import load_target

    c = ctx.config
    request = c["eval"].request(c["phase"] == "base", int(c["long_ctx"]), ctx.out_dir / "eval")
    store = data.store(ctx)
    tok = Path(store.path) / "tokenizer.json" if store is not None else None
    model = checkpoint.model_path(ctx) if checkpoint.is_checkpoint_node(ctx) else ctx.inputs["model"]
    if c.get("rung") is not None:  # one rung of an extension ladder: its checkpoint in the extension run
        from archpool.train.extend import rung_dir

        model = rung_dir(model, int(c["rung"]))
    target = load_target(model, tokenizer=tok)
    result: dict[str, Any] = {}
    if request.tasks or request.suites:
        res = evaluate(target, request, store=store, progress=False)
        result = {k: res[k] for k in STAGE_KEYS if k in res}
    atomic_write_json(ctx.out_dir / "eval.json", result)
    return {"metrics": eval_columns(result), "lengths": list(request.lengths)}
