"""GPU training throughput and MFU of archpool's training step, for a ~100M-parameter model at 2K
and 8K context, with full attention and with sliding-window attention.

A step is exactly the trainer's: bf16 autocast, the fused chunked head loss (``model(x, targets=y)``),
backward, gradient clipping and fused AdamW. The attention kernel is the trainer's ``attn_impl:
auto`` choice (SDPA for full causal attention, FlexAttention for sliding windows), compiled per
block as with ``train.compile: true``. Each case is also run with SDPA in eager mode as a
baseline. Throughput is tokens/s from the median step time. Peak memory is
``torch.cuda.max_memory_allocated``.

MFU is achieved model FLOP/s divided by the device's dense bf16 peak. Model FLOPs per token are
6 x (matmul parameters, LM head included) plus 12 x layers x heads x head_dim x (keys each query
attends to, averaged over positions: causal, and capped by the window on sliding layers).

    python bench/bench_gpu.py --json bench/results/gpu.json                      # CUDA machine
    python bench/bench_gpu.py --device cpu --size tiny --seq-lens 64 --steps 2   # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from archpool.model.config import ModelConfig
from archpool.model.model import Decoder
from archpool.model.presets import preset_dict
from archpool.train.config import TrainConfig
from archpool.train.distributed import DistInfo, parallelize, total_grad_norm
from archpool.train.optim import build_optimizer

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 125.0}


@dataclass
class Case:
    seq_len: int
    swa: bool
    attn_impl: str  # sdpa | flex
    compile: bool

    @property
    def name(self) -> str:
        return f"T={self.seq_len} {'swa' if self.swa else 'full'} {self.attn_impl}{' compiled' if self.compile else ''}"


def model_config(size: str, seq_len: int, swa: bool, window_ratio: float) -> ModelConfig:
    """The llama2 family (MHA, pre-norm, no QK-norm) at ``size``; SWA: Olmo 3's 3 sliding : 1 full
    pattern with a window of ``window_ratio`` x the context (the presets' ratio is 0.5)."""
    fields = preset_dict("llama2", size)
    fields.update(
        max_seq_len=seq_len, window=max(1, int(seq_len * window_ratio)) if swa else None, swa_pattern="olmo3" if swa else "none"
    )
    return ModelConfig(**fields)


def attended_keys(cfg: ModelConfig, layer_type: str, seq_len: int) -> float:
    """Mean number of keys a query attends to over positions 0..T-1."""
    if layer_type == "sliding_attention" and cfg.window is not None and cfg.window < seq_len:
        w = cfg.window  # position t sees min(t + 1, w) keys
        return (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len
    return (seq_len + 1) / 2


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    matmul_params = cfg.num_params(include_embeddings=False) + cfg.vocab_size * cfg.d_model  # + LM head
    attn = sum(12 * cfg.n_heads * cfg.head_dim * attended_keys(cfg, t, seq_len) for t in cfg.layer_types)
    return 6 * matmul_params + attn


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def run_case(case: Case, args, device: torch.device) -> dict:
    cfg = model_config(args.size, case.seq_len, case.swa, args.window_ratio)
    torch.manual_seed(0)
    model = Decoder(cfg, attn_impl=case.attn_impl).to(device)
    model = parallelize(model, "none", DistInfo(device=device), compile=case.compile)
    opt = build_optimizer(model, 3e-4, 0.1, (0.9, 0.95), 1e-8)
    batch = max(1, args.batch_tokens // case.seq_len)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, batch, case.seq_len + 1), generator=g)
    use_bf16 = device.type == "cuda"

    def step(tokens: torch.Tensor) -> float:
        tokens = tokens.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = model(tokens[:, :-1], targets=tokens[:, 1:]) / tokens[:, 1:].numel()
        loss.backward()
        total_grad_norm(model, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    for i in range(args.warmup):  # compiles on the first step
        step(data[i])
    sync()
    warmup_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, last = [], None
    for i in range(args.steps):
        t = time.perf_counter()
        last = step(data[args.warmup + i])
        sync()
        times.append(time.perf_counter() - t)
    tokens = batch * case.seq_len
    tok_s = tokens / statistics.median(times)
    achieved = tok_s * flops_per_token(cfg, case.seq_len)
    peak = peak_flops(device, args.peak_tflops)
    return {
        "case": case.name,
        "seq_len": case.seq_len,
        "swa": case.swa,
        "window": cfg.window,
        "attn_impl": case.attn_impl,
        "compile": case.compile,
        "params": cfg.num_params(),
        "batch": batch,
        "tokens_per_step": tokens,
        "tokens_per_s": tok_s,
        "model_tflops": achieved / 1e12,
        "mfu": achieved / peak if peak else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "warmup_s": warmup_s,
        "loss": float(last),
        "step_s": times,
    }


def cases(seq_lens: list[int], device: torch.device) -> list[Case]:
    """Per context and attention: the trainer's fast path (auto kernel, compiled) and SDPA eager."""
    out = []
    for T in seq_lens:
        for swa in (False, True):
            fast = TrainConfig(max_steps=1).resolved_attn_impl(device.type, masked=swa)  # the trainer's rule
            out += [Case(T, swa, fast, device.type == "cuda"), Case(T, swa, "sdpa", False)]
    return [c for i, c in enumerate(out) if c not in out[:i]]  # on a CPU both are the same case


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100m", help="a preset size (archpool.model.presets.SIZES)")
    ap.add_argument("--seq-lens", default="2048,8192")
    ap.add_argument("--batch-tokens", type=int, default=65536, help="tokens per optimizer step")
    ap.add_argument("--window-ratio", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--peak-tflops", type=float, help="dense bf16 peak of the device, if not in the built-in table")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    results = []
    for case in cases([int(s) for s in args.seq_lens.split(",")], device):
        try:
            results.append(run_case(case, args, device))
        except Exception as e:  # one failing kernel path (e.g. out of memory) must not hide the rest
            results.append({"case": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in results[-1].items() if k != "step_s"}), flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"\n{name}, torch {torch.__version__}, size {args.size}, {args.batch_tokens} tokens/step\n")
    print("| case | params | tokens/s | model TFLOP/s | MFU | peak GiB | warmup s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['case']} | failed: {r['error'][:120]} | | | | | |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "n/a"
        print(
            f"| {r['case']} | {r['params'] / 1e6:.0f} M | {r['tokens_per_s']:,.0f} | {r['model_tflops']:.1f} | {mfu} | {mem} | {r['warmup_s']:.0f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "args": vars(args), "results": results}, f, indent=2)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
