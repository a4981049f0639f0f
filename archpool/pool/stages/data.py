"""The data stage of a pool: prepare (or reuse) the pool's tokenised store once; every member opens it by path."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from archpool.data.section import DataSection
from archpool.pool.graph import StageContext
from archpool.pool.nodes import DataConfig, DataResult

if TYPE_CHECKING:
    from archpool.data.store import Store


def run(ctx: StageContext) -> DataResult:
    """Prepare the store the pool's ``data:`` section describes (the synthetic stream needs none)."""
    from archpool.data.store import prepare

    assert isinstance(ctx.config, DataConfig)
    section = ctx.config.data
    if section.data is None:  # the trainer's built-in synthetic stream: nothing to prepare
        return {"metrics": {}}
    store = prepare(section.data, progress=False, log=ctx.log)
    counts = store.manifest.get("counts", {})
    ctx.log(f"data store {store.path}: {counts}")
    return {
        "store": str(store.path),
        "key": store.key,
        "vocab_size": store.tokenizer.vocab_size,
        "counts": counts,
        "metrics": {},
    }


def store_path(ctx: StageContext) -> str | None:
    """The directory of the pool's prepared store, from the data stage's result (``None`` for the
    synthetic stream, or a node without the data stage as input)."""
    result = cast(DataResult, ctx.input_results.get("data", {}))
    return result.get("store") or None


def section(ctx: StageContext) -> DataSection:
    """The pool's ``data:`` section a training stage hands its trainer, reading the prepared store."""
    path = store_path(ctx)
    return ctx.pool.data.with_store(path) if path else ctx.pool.data


def store(ctx: StageContext) -> Store | None:
    """The pool's prepared store (``None`` for the synthetic stream)."""
    path = store_path(ctx)
    if not path:
        return None
    from archpool.data.store import Store

    return Store(Path(path))
