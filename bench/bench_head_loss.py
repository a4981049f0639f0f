"""The LM head + cross-entropy alone: archpool's fused, chunked ``linear_cross_entropy`` vs
``F.cross_entropy(F.linear(h, W).float(), y)``, forward + backward, float32 on the CPU.

Both run in one process, calls alternating, median call time; the ratio is reference time / fused
time. Also the fused path at other chunk sizes, which is how ``MIN_CHUNK_ROWS`` was chosen.

    .venv/bin/python -m bench.bench_head_loss
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from archpool.model.loss import default_chunk_rows, linear_cross_entropy

SHAPES = [(1024, 64, 512), (2048, 128, 4096), (2048, 256, 8192), (4096, 256, 32768)]  # (tokens, d_model, vocab)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--chunks", default="128,512,2048", help="extra chunk sizes (rows) to time")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="time the first this many shapes")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"LM head + cross-entropy, forward + backward, float32, {args.threads} threads, median of {args.calls} calls\n")
    extra = [int(c) for c in args.chunks.split(",") if c]
    print(
        "| tokens x d x vocab | logits MB | reference ms | fused ms (rows/chunk) | ratio | "
        + " | ".join(f"fused @{c} rows ms" for c in extra)
        + " |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * len(extra))
    rows = []
    for n, d, v in SHAPES[: args.shapes]:
        g = torch.Generator().manual_seed(0)
        h = torch.randn(n, d, generator=g, requires_grad=True)
        w = (0.02 * torch.randn(v, d, generator=g)).requires_grad_()
        y = torch.randint(0, v, (n,), generator=g)

        def reference(h=h, w=w, y=y):
            F.cross_entropy(F.linear(h, w).float(), y, reduction="sum").backward()

        def fused(rows=None, h=h, w=w, y=y):
            return lambda: linear_cross_entropy(h, w, y, chunk_rows=rows).backward()

        fns = {"reference": reference, "fused": fused()} | {f"@{c}": fused(c) for c in extra}
        times: dict[str, list[float]] = {k: [] for k in fns}
        for i in range(args.calls + 2):
            for k, fn in fns.items():
                h.grad = w.grad = None
                t = time.perf_counter()
                fn()
                if i >= 2:
                    times[k].append(time.perf_counter() - t)
        ms = {k: 1e3 * statistics.median(t) for k, t in times.items()}
        cols = " | ".join(f"{ms[f'@{c}']:.1f}" for c in extra)
        print(
            f"| {n} x {d} x {v} | {n * v * 4 / 2**20:.0f} | {ms['reference']:.1f} | {ms['fused']:.1f} ({default_chunk_rows(n, v)}) "
            f"| **{ms['reference'] / ms['fused']:.2f}x** | {cols} |"
        )
        rows.append({"tokens": n, "d_model": d, "vocab": v, "ms": ms, "speedup": ms["reference"] / ms["fused"]})
    return {"threads": args.threads, "calls": args.calls, "shapes": rows}


NAME = "head_loss"
DESCRIPTION = "the fused, chunked LM head + cross-entropy against float32 logits + F.cross_entropy, forward + backward"
QUICK = ["--calls", "1", "--shapes", "1", "--chunks", "512"]


if __name__ == "__main__":
    main()
