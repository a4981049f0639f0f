"""The demo pool's pretraining stream, as the benches that time a demo step build it."""

from __future__ import annotations


def demo_streams():
    """``(pool, make_stream)``: the demo pool, and a function that opens its pretraining batch stream
    (seed 0, 80% MQAR documents at 128 tokens, 32 rows); ``make_stream(cached=False)`` generates
    every task document instead of reading the cross-run cache."""
    from archpool.data.store import prepare
    from archpool.data.streams import PretrainStream
    from archpool.pool.spec import load_pool
    from archpool.train.data_stage import task_mix

    pool = load_pool("demo")
    section = pool.data
    store = prepare(section.data, progress=False, log=lambda *a, **k: None)
    ((source, share),) = task_mix(section, "pretrain", store.tokenizer)[0]

    def make_stream(cached: bool = True) -> PretrainStream:
        src = source.with_cache_key(source.cache_key if cached else None)
        return PretrainStream(store, 128, 32, 0, extra=[(src, share)], mix_unit=section.tasks.mix_unit)

    return pool, make_stream
