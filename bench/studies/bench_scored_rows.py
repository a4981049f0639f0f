"""The demo's compiled training step with the LM head scoring every row against only the rows whose
target counts, on the demo's own batches, interleaved in one process.

    nice -n 5 .venv/bin/python -m bench.studies.bench_scored_rows --rounds 10 --json bench/results/scored_rows.json

The demo's batches (seed 0: 80% answer-only MQAR documents at 128 tokens, 32 rows) ignore most of
their targets (the share over the first ``--batches`` is reported). ``every row`` replaces ``archpool.model.loss._scored_rows`` by the identity,
which is what the head did before; both models start from the same weights and see the same 8
batches per round, compiled per block as ``train.compile: true`` does, 1 thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument(
        "--batches", type=int, default=20, help="batches whose ignored-target share is reported; the first 8 are timed"
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)

    import archpool.model.loss as L
    from archpool.model.model import Decoder
    from archpool.train.optim import build_optimizer
    from bench.demo_stream import demo_streams

    pool, make_stream = demo_streams()
    stream = make_stream()
    batches = [next(stream) for _ in range(args.batches)]
    ignored = [float((b["labels"] == L.IGNORE_INDEX).float().mean()) for b in batches]
    batches = batches[:8]  # timed
    cfg = next(r for r in pool.runs if r.name == "base_s0").model
    scored_rows = L._scored_rows

    def make():
        model = Decoder(cfg, seed=0)
        for block in model.layers:
            block.compile()
        opt = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)

        def step(b) -> None:
            model(b["input_ids"], targets=b["labels"]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    steps = {"every row": make(), "scored rows": make()}

    def ms_per_step(name: str) -> float:
        L._scored_rows = scored_rows if name == "scored rows" else (lambda h, t: (h, t))
        try:
            t = time.perf_counter()
            for b in batches:
                steps[name](b)
            return (time.perf_counter() - t) / len(batches) * 1e3
        finally:
            L._scored_rows = scored_rows

    for name in steps:  # compile and warm up
        ms_per_step(name)
        ms_per_step(name)
    ms: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(args.rounds):
        for name in list(steps)[r % 2 :] + list(steps)[: r % 2]:
            ms[name].append(ms_per_step(name))
    ratios = [a / b for a, b in zip(ms["every row"], ms["scored rows"])]
    out = {
        "ignored_fraction": {"mean": statistics.mean(ignored), "min": min(ignored), "max": max(ignored)},
        "ms_per_step": ms,
        "median_ms": {k: statistics.median(v) for k, v in ms.items()},
        "speedup": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
