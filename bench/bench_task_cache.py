"""The demo's pretraining stream with and without the cross-run cache of task documents, against a
demo training step, in one process.

    .venv/bin/python -m bench.bench_task_cache --batches 40 --repeats 5 --json bench/results/task_cache.json

The stream is the demo's (80% MQAR at 128 tokens, 4,096-token batches of 32 rows, seed 0): ``cold``
generates every task document (what every run did before the cache; the first run of a seed still
does), ``warm`` reads them from the cache (under the demo's data store) that another run wrote; the
bench writes it first. Rounds interleave the two; the batches
must be identical. The step is the demo's base model (tiny, vocab 1280) on one of those batches:
forward + loss + backward + AdamW, compiled per block as ``train.compile: true`` does, 1 thread
(the demo runs 2 jobs on 2 cores). Data share = stream ms per batch / step ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="timed training steps per round")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from archpool.model.model import Decoder
    from bench.demo_stream import demo_streams

    pool, stream = demo_streams()

    writer = stream(cached=True)
    want = [next(writer) for _ in range(args.batches + 1)]
    writer.flush()

    def ms_per_batch(cached: bool) -> float:
        s = stream(cached)
        got = [next(s)]
        t = time.perf_counter()
        got += [next(s) for _ in range(args.batches)]
        dt = (time.perf_counter() - t) / args.batches * 1e3
        assert all(torch.equal(a[k], b[k]) for a, b in zip(got, want, strict=True) for k in a)
        return dt

    model = Decoder(pool.runs[0].model, seed=0)  # the baseline, seed 0
    for block in model.layers:
        block.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = want[0]["input_ids"], want[0]["labels"]

    def step() -> None:
        loss = model(x, targets=y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()

    def ms_per_step() -> float:
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        return (time.perf_counter() - t) / args.steps * 1e3

    rows: dict[str, list[float]] = {"cold": [], "warm": [], "step": []}
    for _ in range(args.repeats):
        rows["cold"].append(ms_per_batch(False))
        rows["warm"].append(ms_per_batch(True))
        rows["step"].append(ms_per_step())
    med = {k: statistics.median(v) for k, v in rows.items()}
    out = {
        "batches": args.batches,
        "identical_batches": True,
        "ms": {k: [round(x, 3) for x in v] for k, v in rows.items()},
        "median_ms": {k: round(v, 3) for k, v in med.items()},
        "speedup_warm_over_cold": round(med["cold"] / med["warm"], 2),
        "speedup_range": [
            round(min(c / w for c, w in zip(rows["cold"], rows["warm"])), 2),
            round(max(c / w for c, w in zip(rows["cold"], rows["warm"])), 2),
        ],
        "data_share_of_step": {"cold": round(med["cold"] / med["step"], 4), "warm": round(med["warm"] / med["step"], 4)},
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


NAME = "task_cache"
DESCRIPTION = "the demo's pretraining stream with task documents read from the cross-run cache against generated"
FULL = ["--batches", "40", "--repeats", "5"]
QUICK = ["--batches", "2", "--repeats", "1", "--steps", "1"]


if __name__ == "__main__":
    main()
