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
from archpool.pool.sections import EvalSettings
from archpool.pool.stages import checkpoint, data


def run(ctx: StageContext) -> dict[str, Any]:
    from archpool.eval.api import evaluate, store_haystack
    from archpool.eval.lm import stop_token_ids
    from archpool.eval.runner import TaskRunConfig, aggregate, run_tasks
    from archpool.eval.target import load_target

    c = ctx.config
    e = EvalSettings.from_dict(c["eval"])
    at = e.lengths_at(c["phase"] == "base", int(c["long_ctx"]))
    store = data.store(ctx)
    tok = Path(store.path) / "tokenizer.json" if store is not None else None
    model = checkpoint.model_path(ctx) if checkpoint.is_checkpoint_node(ctx) else ctx.inputs["model"]
    if c.get("rung") is not None:  # one rung of an extension ladder: its checkpoint in the extension run
        from archpool.train.extend import rung_dir

        model = rung_dir(model, int(c["rung"]))
    target = load_target(model, tokenizer=tok)
    modes = list(e.modes or ["ll"])
    n, seed, params = e.n_samples, e.seed, dict(e.task_params)
    out_dir = ctx.out_dir / "eval"
    result: dict[str, Any] = {}
    tasks = e.tasks
    if tasks:
        haystack = store_haystack(store) if store is not None else None
        cfg = TaskRunConfig(list(tasks), at, modes, n, seed, params, haystack)
        stop = stop_token_ids(target.tokenizer, target.lm.backend.vocab_size)
        rs = run_tasks(
            target.lm,
            target.tokenizer,
            cfg,
            model_hash=target.model_hash,
            tokenizer_hash=target.tokenizer_hash,
            out_dir=out_dir,
            progress=False,
            stop_ids=stop,
        )
        result["tasks"] = [{k: v for k, v in r.items() if k != "samples"} for r in rs]
        result["aggregate"] = aggregate(rs)
    suites = e.suite_list()
    if suites:
        more = evaluate(
            target,
            suites=suites,
            lengths=at,
            modes=modes,
            n_samples=n,
            seed=seed,
            out_dir=out_dir,
            store=store,
            task_params=params,
            short_tasks=not tasks,
            progress=False,
        )
        result["tasks"] = result.get("tasks", []) + more.get("tasks", [])
        result["aggregate"] = {**more.get("aggregate", {}), **result.get("aggregate", {})}
        for k in ("longppl", "short"):
            if k in more:
                result[k] = more[k]
    atomic_write_json(ctx.out_dir / "eval.json", result)
    return {"metrics": eval_columns(result), "lengths": at}
