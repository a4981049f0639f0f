"""What a CPU step could reach at best: the matmul peak against the tiny step, and the whole-model
forward with attention made free against full causal attention: the most any CPU kernel work
could give, against which the measured speed-ups are read.

    nice -n 10 .venv/bin/python -m bench.bench_cpu_ceilings --json bench/results/cpu_ceilings.json

1 thread, float32. Three measurements:

- **matmul peak**: the best ``torch.mm`` rate over square sizes 512–2048 and every shape the tiny
  step multiplies (best of several calls each), the ceiling every other figure is a fraction of.
  At 1 thread the step's own small shapes run faster than 2048³.
- **tiny step** (bench_train.py's ``tiny``: d 64, 4 layers, vocab 512, 128 × 8 tokens; eager and
  compiled per block as ``train.compile: true`` does): model FLOPs per step as bench_gpu.py counts
  them (6 × matmul parameters + causal attention, per token), divided by the step time = its
  fraction of the peak. ``mm only``: the step's matmul FLOPs (6 × matmul parameters per token) over
  the time its ``mm``/``addmm`` kernels take by themselves (profiler self time) — what the matmuls
  reach inside the step.
- **free elementwise** (the tiny step, eager): RoPE replaced by the identity and each RMSNorm by
  its weight alone, interleaved with the real step. The ratio bounds what fusing those elementwise
  chains could give.
- **free attention** (the ``base`` size, olmo3 family, W 256, forward under ``no_grad``): the full
  causal model against the same model whose attention returns V without computing anything. Their
  ratio bounds any attention speed-up of the whole forward, sliding windows included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def best_seconds(fn, calls: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def matmul_gflops(m: int, k: int, n: int, calls: int = 10) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    return 2 * m * k * n / best_seconds(lambda: torch.mm(a, b, out=out), calls) / 1e9


def tiny_step(compiled: bool, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from bench.bench_gpu import flops_per_token
    from bench.bench_train import _data, build, make_step

    model, loss_of = build("archpool+compile" if compiled else "archpool", "tiny")
    step = make_step(model, loss_of)
    data = _data("tiny", steps + 4)
    for tokens in data[:4]:
        step(tokens)
    cfg, tokens_per_step = model.cfg, data[0, :, 1:].numel()
    mm_flops = 6 * (cfg.num_params(include_embeddings=False) + cfg.vocab_size * cfg.d_model) * tokens_per_step
    flops = flops_per_token(cfg, data.shape[-1] - 1) * tokens_per_step
    times = []
    for tokens in data[4:]:
        t = time.perf_counter()
        step(tokens)
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for tokens in data[4:8]:
            step(tokens)
    mm_us = sum(
        e.self_cpu_time_total for e in prof.key_averages() if e.key in ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm")
    )
    mm_seconds = mm_us / 1e6 / 4
    return {
        "step_ms": seconds * 1e3,
        "model_gflop_per_step": flops / 1e9,
        "mm_gflop_per_step": mm_flops / 1e9,
        "gflops": flops / seconds / 1e9,
        "mm_ms": mm_seconds * 1e3,
        "mm_only_gflops": mm_flops / mm_seconds / 1e9,
    }


def tiny_shapes() -> list[tuple[int, int, int]]:
    """(m, k, n) of every matmul in the tiny step's forward and backward (d 64, ff 176, vocab 512, 1024 tokens)."""
    n, d, ff, v = 1024, 64, 176, 512
    fwd = [(n, d, d), (n, d, ff), (n, ff, d), (n, d, v)]
    grads = [(n, d, d), (d, n, d), (n, ff, d), (d, n, ff), (n, d, ff), (ff, n, d), (n, v, d), (v, n, d)]
    return fwd + grads


def free_elementwise(rounds: int) -> dict:
    import archpool.model.model as M
    from bench.bench_train import _data, build, make_step

    rope, norm = M.apply_rope, M.RMSNorm.forward
    model, loss_of = build("archpool", "tiny")
    step = make_step(model, loss_of)
    data = _data("tiny", 12)
    cases = ("real", "no RoPE", "norms = weight", "neither")

    def ms_per_step(case: str) -> float:
        M.apply_rope = rope if case in ("real", "norms = weight") else (lambda x, cos, sin: x)
        M.RMSNorm.forward = norm if case in ("real", "no RoPE") else (lambda self, x: x * self.weight)
        try:
            t = time.perf_counter()
            for tokens in data:
                step(tokens)
            return (time.perf_counter() - t) / len(data) * 1e3
        finally:
            M.apply_rope, M.RMSNorm.forward = rope, norm

    for case in cases:
        ms_per_step(case)
    ms: dict[str, list[float]] = {c: [] for c in cases}
    for _ in range(rounds):
        for case in cases:
            ms[case].append(ms_per_step(case))
    return {
        c: {"ms": statistics.median(v), "ceiling": statistics.median([a / b for a, b in zip(ms["real"], v)])}
        for c, v in ms.items()
    }


def free_attention(T: int, rounds: int) -> dict:
    import archpool.model.model as M
    from archpool.model.config import ModelConfig
    from archpool.model.kernels.dispatch import sdpa_attention
    from archpool.model.presets import preset_dict

    cfg = ModelConfig.from_dict({**preset_dict("olmo3", "base"), "swa_pattern": "none", "window": None, "max_seq_len": T})
    model = M.Decoder(cfg, seed=0).eval()
    x = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    real = sdpa_attention

    def none(q, k, v, mask):  # attention that costs nothing: V itself (GQA: expanded)
        return v.repeat_interleave(q.shape[1] // v.shape[1], dim=1) if q.shape[1] != v.shape[1] else v

    def forward(attn) -> float:
        for block in model.layers:  # every layer attends with ``attn``
            block.attn.kernel = attn
        with torch.no_grad():
            return best_seconds(lambda: model(x), 1, warmup=1)

    full, free = [], []
    for _ in range(rounds):
        full.append(forward(real))
        free.append(forward(none))
    return {"T": T, "full_s": min(full), "free_attention_s": min(free), "ceiling": min(full) / min(free)}


def matmul_part(steps: int, out: dict) -> None:
    """The matmul peak, and the tiny step's fraction of it (eager and compiled), into ``out``."""
    square = {f"{n}^3": max(matmul_gflops(n, n, n, calls=5) for _ in range(2)) for n in (512, 1024, 2048)}
    shapes = {f"{m}x{k}x{n}": matmul_gflops(m, k, n, calls=30) for m, k, n in tiny_shapes()}
    peak = max([*square.values(), *shapes.values()])
    out.update(mm_peak_gflops=peak, square_gflops=square, tiny_mm_shapes_gflops=shapes)
    print(
        f"matmul peak (best of all shapes, 1 thread): {peak:.0f} GFLOP/s; square: "
        + ", ".join(f"{k} {v:.0f}" for k, v in square.items())
    )
    for shape, g in shapes.items():
        print(f"  mm {shape}: {g:.0f} GFLOP/s ({g / peak:.0%} of peak)")
    for compiled in (False, True):
        r = tiny_step(compiled, steps)
        r["fraction_of_peak"] = r["gflops"] / peak
        r["mm_only_fraction_of_peak"] = r["mm_only_gflops"] / peak
        name = "tiny_compiled" if compiled else "tiny_eager"
        out[name] = r
        print(
            f"{name}: {r['step_ms']:.1f} ms/step, {r['model_gflop_per_step']:.2f} model GFLOP ({r['mm_gflop_per_step']:.2f} in mm): "
            f"{r['gflops']:.0f} GFLOP/s = {r['fraction_of_peak']:.0%} of peak; its mm kernels alone "
            f"{r['mm_ms']:.1f} ms = {r['mm_only_gflops']:.0f} GFLOP/s = {r['mm_only_fraction_of_peak']:.0%}"
        )


PARTS = ("matmul", "elementwise", "attention")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    out: dict = {"threads": 1}
    if "matmul" in args.parts:
        matmul_part(args.steps, out)
    if "elementwise" in args.parts:
        out["free_elementwise"] = free_elementwise(max(args.rounds, 8))
        for case, r in out["free_elementwise"].items():
            print(f"tiny eager step, {case}: {r['ms']:.1f} ms, ceiling {r['ceiling']:.2f}x")
    if "attention" in args.parts:
        out["free_attention"] = []
        for T in args.lengths:
            r = free_attention(T, args.rounds)
            out["free_attention"].append(r)
            print(
                f"base forward T={T}: full {r['full_s']:.3f} s, attention free {r['free_attention_s']:.3f} s: "
                f"ceiling {r['ceiling']:.2f}x"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


NAME = "cpu_ceilings"
DESCRIPTION = "the CPU's matmul peak against the tiny step, and the free-elementwise and free-attention ceilings"
QUICK = ["--steps", "2", "--lengths", "256", "--rounds", "1"]


if __name__ == "__main__":
    main()
