"""MQAR document generation on the demo's task settings: milliseconds per document at the pretraining
and the extension length, and the demo's pretraining stream (80% MQAR, 4,096-token batches at 128)
per batch, in one process, 1 thread.

    .venv/bin/python -m bench.bench_mqar_generator --docs 400 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path


def ms_per_doc(module, vocab, params, n: int, length: int) -> float:
    t = time.perf_counter()
    for s in range(n):
        module.make_document(random.Random(s), length, vocab, params)
    return (time.perf_counter() - t) / n * 1e3


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=400)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, default=40, help="timed batches of the pretraining stream")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from archpool.data.store import prepare
    from archpool.pool.spec import load_pool
    from archpool.tasks import mqar, task_vocab
    from archpool.train.data_stage import build_stream

    pool = load_pool("demo")
    section = pool.data
    store = prepare(section.data, progress=False, log=lambda *a, **k: None)
    params = section.tasks.configs_for("pretrain")["mqar"]
    vocab = task_vocab(store.tokenizer, params)
    rows: dict[int, list[float]] = {128: [], 1024: []}
    for _ in range(args.repeats):
        for length, times in rows.items():
            times.append(ms_per_doc(mqar, vocab, params, args.docs, length))

    stream = build_stream(
        section.with_store(store.path),
        split="pretrain",
        vocab_size=store.tokenizer.vocab_size,
        seq_len=128,
        sequences_per_step=32,
        micro_batch_size=32,
        seed=0,
    )
    stream.next_batch()
    t = time.perf_counter()
    n_batches = args.batches
    for _ in range(n_batches):
        stream.next_batch()
    batch_ms = (time.perf_counter() - t) / n_batches * 1e3

    out = {
        "docs_per_repeat": args.docs,
        "ms_per_doc": {str(k): [round(x, 4) for x in v] for k, v in rows.items()},
        "ms_per_doc_median": {str(k): round(statistics.median(v), 4) for k, v in rows.items()},
        "pretrain_stream_ms_per_4096_token_batch": round(batch_ms, 2),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


NAME = "mqar_generator"
DESCRIPTION = "MQAR document generation (ms per document at 128 and 1,024 tokens) and the demo's pretraining stream"
FULL = ["--docs", "400", "--repeats", "5"]
QUICK = ["--docs", "10", "--repeats", "1", "--batches", "2"]


if __name__ == "__main__":
    main()
