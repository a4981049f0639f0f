"""bfloat16 autocast against float32 on this CPU: training-step speed and loss parity, per model size.

    nice -n 5 .venv/bin/python -m bench.bench_cpu_bf16 --json bench/results/cpu_bf16.json

archpool's Decoder (llama3 family: full attention, GQA as the preset, no QK-norm) at each preset size, one training step
= forward + fused head loss + backward + AdamW, exactly as the trainer runs it (``torch.autocast``
to bfloat16 around forward and loss, float32 weights and optimizer). Both precisions live in one
process and alternate step by step; the ratio is float32 ms / bfloat16 ms per round, reported as the
median [min–max] of ``--repeats`` rounds. Loss parity: both start from the same weights and see
the same batches for ``--parity-steps`` steps; the table gives the largest relative difference of
the per-step losses. ``TrainConfig.dtype: auto`` uses the sizes this measures to pay
(``archpool.train.config.cpu_bf16_pays``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from pathlib import Path

GEOMETRY = {"tiny": (128, 8), "small": (256, 8), "base": (512, 4), "100m": (512, 2)}  # T, rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=list(GEOMETRY), choices=list(GEOMETRY))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=6, help="timed steps per precision per round")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parity-steps", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder
    from archpool.train.optim import build_optimizer

    torch.set_num_threads(args.threads)
    out = {"threads": args.threads, "cpu_bf16": bool(torch.cpu._is_avx512_bf16_supported()), "sizes": {}}
    for size in args.sizes:
        T, rows = GEOMETRY[size]
        cfg = ModelConfig.preset("llama3", size=size, max_seq_len=T)
        g = torch.Generator().manual_seed(0)
        batches = [torch.randint(0, cfg.vocab_size, (rows, T + 1), generator=g) for _ in range(4)]
        base = Decoder(cfg, seed=0)
        sides = {}
        for name in ("float32", "bfloat16"):
            model = copy.deepcopy(base)
            opt = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)
            ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if name == "bfloat16" else contextlib.nullcontext
            sides[name] = (model, opt, ctx)

        def step(name: str, batch, sides=sides) -> float:
            model, opt, ctx = sides[name]
            with ctx():
                loss = model(batch[:, :-1], targets=batch[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return float(loss)

        losses = {"float32": [], "bfloat16": []}
        for i in range(args.parity_steps):  # same start, same batches: the loss curves side by side
            for name in losses:
                losses[name].append(step(name, batches[i % len(batches)]))
        rel = max(abs(a - b) / abs(a) for a, b in zip(losses["float32"], losses["bfloat16"]))
        times = {"float32": [], "bfloat16": []}
        for _ in range(args.repeats):
            for name in times:
                t = time.perf_counter()
                for i in range(args.steps):
                    step(name, batches[i % len(batches)])
                times[name].append((time.perf_counter() - t) / args.steps * 1e3)
        ratios = [a / b for a, b in zip(times["float32"], times["bfloat16"])]
        out["sizes"][size] = {
            "d_model": cfg.d_model,
            "n_layers": cfg.n_layers,
            "vocab": cfg.vocab_size,
            "tokens_per_step": rows * T,
            "ms": {k: [round(x, 1) for x in v] for k, v in times.items()},
            "speedup_median": round(statistics.median(ratios), 3),
            "speedup_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "loss_first_last": {k: [round(v[0], 4), round(v[-1], 4)] for k, v in losses.items()},
            "max_rel_loss_diff": round(rel, 5),
        }
        print(size, json.dumps(out["sizes"][size]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


NAME = "cpu_bf16"
DESCRIPTION = "bfloat16 autocast against float32 per CPU training step and model size (what train.dtype: auto uses)"
QUICK = ["--sizes", "tiny", "--steps", "1", "--repeats", "1", "--parity-steps", "2"]


if __name__ == "__main__":
    main()
