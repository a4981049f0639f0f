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

Besides MFU, one call runs every other GPU check within ``--budget-s`` (the short checks first,
then the MFU cases; checks that would start later are recorded as skipped): FlexAttention's sliding-window op against full causal at T = 8 W
(forward + backward, bf16), the loss under bf16 autocast against float32 on the same weights, and,
with two or more GPUs, one 2-process NCCL DDP training step (ranks' gradients compared). Compile on
and off: each context's full-attention model runs compiled (the trainer's path) and eager. All
results go to one JSON (``--json``, default bench/results/gpu.json) and a table is printed. Without a
CUDA device (and no ``--device``) the script says so and exits 0.

    python -m bench.bench_gpu                                                     # CUDA machine, < 8 min (105 s on an H200)
    python -m bench.bench_gpu --device cpu --size tiny --seq-lens 64 --steps 2 --json /tmp/g.json  # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


# --------------------------------------------------------------------------- the other GPU checks


def timed(fn, device: torch.device, repeats: int) -> list[float]:
    """Seconds of ``fn()`` per call (synchronised), after one warm-up call (compiles)."""
    fn()
    out = []
    for _ in range(repeats):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def flex_swa_check(device: torch.device, window: int, heads: int, head_dim: int, repeats: int) -> dict:
    """Attention op alone, bf16, forward + backward at T = 8 x window: FlexAttention with the sliding
    block mask against full causal (SDPA ``is_causal`` and FlexAttention's causal block mask)."""
    import torch.nn.functional as F

    from archpool.model.kernels.dispatch import flex_attention_fn, flex_block_mask

    T = 8 * window
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(1, heads, T, head_dim, device=device, dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3)
    )
    swa_mask, causal_mask = flex_block_mask(T, window, None, device), flex_block_mask(T, None, None, device)

    def run(attn) -> None:
        for t in (q, k, v):
            t.grad = None
        attn().float().sum().backward()

    s = {
        "sdpa_full": timed(lambda: run(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), device, repeats),
        "flex_full": timed(lambda: run(lambda: flex_attention_fn(q, k, v, causal_mask)), device, repeats),
        "flex_swa": timed(lambda: run(lambda: flex_attention_fn(q, k, v, swa_mask)), device, repeats),
    }
    best = {c: min(ts) for c, ts in s.items()}
    pairs_full = T * (T + 1) / 2
    pairs_swa = window * (window + 1) / 2 + (T - window) * window
    return {
        "T": T,
        "window": window,
        "s": s,
        "swa_vs_sdpa_full": best["sdpa_full"] / best["flex_swa"],
        "swa_vs_flex_full": best["flex_full"] / best["flex_swa"],
        "ideal": pairs_full / pairs_swa,
    }


def bf16_parity_check(size: str, seq_len: int, batch: int, device: torch.device) -> dict:
    """The loss of one batch under bf16 autocast against float32, same weights (full and SWA models)."""
    out = {}
    for swa in (False, True):
        cfg = model_config(size, seq_len, swa, 0.5)
        impl = TrainConfig(max_steps=1).resolved_attn_impl(device.type, masked=swa)
        model = Decoder(cfg, seed=0, attn_impl=impl).to(device)
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq_len + 1), generator=g).to(device)
        with torch.no_grad():
            fp32 = float(model(tokens[:, :-1], targets=tokens[:, 1:])) / tokens[:, 1:].numel()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                bf16 = float(model(tokens[:, :-1], targets=tokens[:, 1:])) / tokens[:, 1:].numel()
        out["swa" if swa else "full"] = {"fp32": fp32, "bf16": bf16, "rel_diff": abs(bf16 - fp32) / abs(fp32), "attn_impl": impl}
    return out


def _ddp_worker(rank: int, size: str, seq_len: int, port: int, path: str) -> None:
    """One rank of the 2-process DDP step: NCCL, one forward/backward/AdamW step of the same batch
    split in two; rank 0 writes the per-rank losses, gradient norms and whether the ranks' gradients agree."""
    import os

    from archpool.train.distributed import init_distributed, shutdown

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    info = init_distributed("cuda")
    try:
        cfg = model_config(size, seq_len, False, 0.5)
        model = parallelize(Decoder(cfg, seed=0).to(info.device), "ddp", info)
        opt = build_optimizer(model, 3e-4, 0.1, (0.9, 0.95), 1e-8)
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, cfg.vocab_size, (2, 2, seq_len + 1), generator=g)[rank].to(info.device)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens[:, :-1], targets=tokens[:, 1:]) / tokens[:, 1:].numel()
        loss.backward()
        norm = float(total_grad_norm(model, 1.0))
        opt.step()
        torch.cuda.synchronize(info.device)
        step_s = time.perf_counter() - t0
        digest = float(sum(p.grad.double().sum() for p in model.parameters() if p.grad is not None))
        gathered = [None, None]
        torch.distributed.all_gather_object(
            gathered, {"loss": float(loss), "grad_norm": norm, "grad_sum": digest, "step_s": step_s}
        )
        if rank == 0:
            agree = abs(gathered[0]["grad_sum"] - gathered[1]["grad_sum"]) <= 1e-6 * (1 + abs(gathered[0]["grad_sum"]))
            with open(path, "w") as f:
                json.dump({"ranks": gathered, "grads_agree": agree}, f)
    finally:
        shutdown()


def ddp_check(size: str, seq_len: int) -> dict:
    """Two processes, NCCL DDP, one training step (needs two GPUs)."""
    import socket
    import tempfile

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/ddp.json"
        mp.spawn(_ddp_worker, args=(size, seq_len, port, path), nprocs=2, join=True)
        with open(path) as f:
            return json.load(f)


class Budget:
    """Wall-clock budget of the whole script: a check that would start past it is skipped (and says so)."""

    def __init__(self, seconds: float):
        self.t0, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)

    def run(self, name: str, fn, out: dict) -> None:
        if self.left() <= 0:
            out[name] = {"skipped": f"time budget of {self.seconds:.0f} s spent"}
            return
        try:
            out[name] = fn()
        except Exception as e:  # one failing check must not hide the others
            out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        print(json.dumps({name: out[name]})[:2000], flush=True)


CHECKS = ("mfu", "flex_swa", "bf16_parity", "ddp")
RESULTS = Path(__file__).parent / "results" / "gpu.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100m", help="a preset size (archpool.model.presets.SIZES)")
    ap.add_argument("--seq-lens", default="2048,8192")
    ap.add_argument("--batch-tokens", type=int, default=65536, help="tokens per optimizer step")
    ap.add_argument("--window-ratio", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", help="cuda (the default where there is one) or cpu (a smoke run of the CPU-able checks)")
    ap.add_argument("--peak-tflops", type=float, help="dense bf16 peak of the device, if not in the built-in table")
    ap.add_argument("--checks", nargs="+", default=list(CHECKS), choices=CHECKS)
    ap.add_argument("--flex-window", type=int, default=1024, help="flex_swa: window W (T = 8 W)")
    ap.add_argument("--flex-heads", type=int, default=16)
    ap.add_argument("--flex-head-dim", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=420, help="checks that would start after this many seconds are skipped")
    ap.add_argument("--json", type=Path, default=RESULTS, help="the results (one JSON)")
    return ap.parse_args(argv)


def mfu_table(results: list[dict]) -> list[str]:
    lines = ["| case | params | tokens/s | model TFLOP/s | MFU | peak GiB | warmup s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r or "skipped" in r:
            lines.append(f"| {r['case']} | {(r.get('error') or r['skipped'])[:120]} | | | | | |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        mem = f"{r['peak_mem_gib']:.1f}" if r["peak_mem_gib"] is not None else "n/a"
        lines.append(
            f"| {r['case']} | {r['params'] / 1e6:.0f} M | {r['tokens_per_s']:,.0f} | {r['model_tflops']:.1f} | {mfu} | {mem} "
            f"| {r['warmup_s']:.0f} |"
        )
    return lines


def summary(res: dict) -> str:
    """The printed table: MFU cases, then one line per other check."""
    lines = [f"{res['device']}, torch {res['torch']}, size {res['args']['size']}, {res['args']['batch_tokens']} tokens/step", ""]
    lines += mfu_table(res.get("mfu", []))
    f = res.get("flex_swa")
    if f and "T" in f:
        lines.append(
            f"\nFlexAttention SWA at T = 8W = {f['T']} (fwd+bwd, bf16): {f['swa_vs_sdpa_full']:.2f}x over SDPA full causal, "
            f"{f['swa_vs_flex_full']:.2f}x over Flex full causal (ideal {f['ideal']:.2f}x)"
        )
    elif f:
        lines.append(f"\nFlexAttention SWA: {f.get('skipped') or f.get('error')}")
    p = res.get("bf16_parity")
    if p and "full" in p:
        for k, r in p.items():
            lines.append(
                f"bf16 loss parity ({k}, {r['attn_impl']}): fp32 {r['fp32']:.5f}, bf16 {r['bf16']:.5f}, rel diff {r['rel_diff']:.2e}"
            )
    elif p:
        lines.append(f"bf16 loss parity: {p.get('skipped') or p.get('error')}")
    d = res.get("ddp")
    if d and "ranks" in d:
        lines.append(
            f"2-process DDP step: losses {[round(r['loss'], 5) for r in d['ranks']]}, gradients agree: {d['grads_agree']}"
        )
    elif d:
        lines.append(f"2-process DDP step: {d.get('skipped') or d.get('error')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device is None and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device on this machine: skipped (run it where a GPU is lent; --device cpu for a smoke run)")
        return 0
    device = torch.device(args.device or "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    budget = Budget(args.budget_s)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    res: dict = {"device": name, "torch": torch.__version__, "args": {k: str(v) for k, v in vars(args).items()}}
    res["args"].update(size=args.size, batch_tokens=args.batch_tokens)
    # the short checks first, then the MFU cases (each skipped once the budget is spent)
    if "flex_swa" in args.checks:
        if device.type != "cuda":
            res["flex_swa"] = {"skipped": "FlexAttention has no backward pass on CPU"}
        else:
            budget.run("flex_swa", lambda: flex_swa_check(device, args.flex_window, args.flex_heads, args.flex_head_dim, 5), res)
    if "bf16_parity" in args.checks:
        T = min(int(s) for s in args.seq_lens.split(","))
        budget.run("bf16_parity", lambda: bf16_parity_check(args.size, T, max(1, args.batch_tokens // T // 8), device), res)
    if "ddp" in args.checks:
        if device.type != "cuda" or torch.cuda.device_count() < 2:
            res["ddp"] = {"skipped": f"needs 2 GPUs, this machine has {torch.cuda.device_count()}"}
        else:
            budget.run("ddp", lambda: ddp_check(args.size, min(int(s) for s in args.seq_lens.split(","))), res)
    if "mfu" in args.checks:  # MFU per context, full and SWA; compile on (trainer's path) and off (SDPA eager)
        res["mfu"] = []
        for case in cases([int(s) for s in args.seq_lens.split(",")], device):
            if budget.left() <= 0:
                res["mfu"].append({"case": case.name, "skipped": f"time budget of {args.budget_s:.0f} s spent"})
                continue
            try:
                res["mfu"].append(run_case(case, args, device))
            except Exception as e:  # one failing kernel path (e.g. out of memory) must not hide the rest
                res["mfu"].append({"case": case.name, "error": f"{type(e).__name__}: {e}"[:500]})
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            print(json.dumps({k: v for k, v in res["mfu"][-1].items() if k != "step_s"}), flush=True)
    res["wall_s"] = round(budget.seconds - budget.left(), 1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=2))
    print("\n" + summary(res))
    failed = [r for r in res.get("mfu", []) if "error" in r] + [r for r in res.values() if isinstance(r, dict) and "error" in r]
    return 1 if failed else 0


NAME = "gpu"
DESCRIPTION = "GPU training throughput and MFU at 2K and 8K, full and sliding-window attention, and the other GPU checks"
FULL = ["--budget-s", "200"]
QUICK = ["--device", "cpu", "--size", "tiny", "--seq-lens", "32", "--batch-tokens", "64", "--steps", "2", "--warmup", "1"]


def run(quick: bool) -> dict:
    """Every GPU check (quick: the CPU smoke run); without a CUDA device the full run is skipped."""
    if not quick and not torch.cuda.is_available():
        return {"skipped": "no CUDA device on this machine"}
    from bench.suite import results_from_json

    return results_from_json(main, QUICK if quick else FULL)


if __name__ == "__main__":
    sys.exit(main())
