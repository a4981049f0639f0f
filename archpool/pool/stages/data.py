"""The data stage of a pool: prepare (or reuse) the pool's tokenised store once; every member opens it by path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.data.section import DataSection
from archpool.pool.graph import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    """Train-side keys (``tasks`` mixing, ``short_share``, ...) pass through to the trainers."""
    from archpool.data.store import prepare

    section = ctx.config["data"]
    if section.data is None:  # the trainer's built-in synthetic stream: nothing to prepare
        return {"data_cfg": section.to_dict(), "metrics": {}}
    store = prepare(section.data, progress=False, log=ctx.log)
    counts = store.manifest.get("counts", {})
    ctx.log(f"data store {store.path}: {counts}")
    return {
        "data_cfg": {**section.to_dict(), "store": str(store.path)},
        "store": str(store.path),
        "key": store.key,
        "vocab_size": store.tokenizer.vocab_size,
        "counts": counts,
        "metrics": {},
    }


def section(ctx: StageContext) -> DataSection:
    """The ``data:`` section a training stage hands its trainer, with the prepared store's path."""
    return DataSection.from_dict(ctx.input_results.get("data", {}).get("data_cfg"))


def store(ctx: StageContext):
    """The pool's prepared store (``None`` for the synthetic stream)."""
    path = ctx.input_results.get("data", {}).get("store")
    if not path:
        return None
    from archpool.data.store import Store

    return Store(Path(path))
