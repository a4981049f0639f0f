"""Training throughput: archpool's Decoder vs transformers' LlamaForCausalLM, same shapes, batch,
dtype (float32) and device (CPU), one training step = forward + cross-entropy + backward + AdamW.

Throughput: both models live in one process and their steps alternate (A B, B A, ...), so a shared,
busy CPU slows both alike; tokens/s is from the median step time, median over ``--repeats``
processes. Memory: each implementation alone in a fresh process, peak RSS (and its growth over the
RSS before the model was built).

    .venv/bin/python -m bench.bench_train                      # all configs, markdown table
    .venv/bin/python -m bench.bench_train --configs tiny --steps 10 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    # name: shapes (pre-norm, no QK-norm, full attention: the point both implementations share)
    "tiny": dict(d_model=64, n_layers=4, n_heads=4, n_kv_heads=4, vocab_size=512, seq_len=128, batch=8),
    "tiny-gqa": dict(d_model=64, n_layers=4, n_heads=4, n_kv_heads=1, vocab_size=512, seq_len=128, batch=8),
    "small": dict(d_model=128, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=4096, seq_len=256, batch=8),
    "small-gqa": dict(d_model=128, n_layers=4, n_heads=8, n_kv_heads=2, vocab_size=4096, seq_len=256, batch=8),
    "base": dict(d_model=256, n_layers=8, n_heads=8, n_kv_heads=8, vocab_size=8192, seq_len=512, batch=4),
}


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(impl: str, name: str):
    """(model, loss function) of ``impl`` at config ``name``; the loss is summed over the batch."""
    import torch.nn.functional as F

    c = CONFIGS[name]
    d_ff = 16 * -(-int(8 * c["d_model"] / 3) // 16)
    if impl in ("archpool", "archpool+compile"):
        from archpool.model.config import ModelConfig
        from archpool.model.model import Decoder

        cfg = ModelConfig(
            vocab_size=c["vocab_size"],
            d_model=c["d_model"],
            n_layers=c["n_layers"],
            n_heads=c["n_heads"],
            n_kv_heads=c["n_kv_heads"],
            d_ff=d_ff,
            max_seq_len=c["seq_len"],
            norm_eps=1e-5,
        )
        model = Decoder(cfg)
        if impl == "archpool+compile":  # what the trainer does with train.compile: true
            from archpool.train.distributed import DistInfo, parallelize

            model = parallelize(model, "none", DistInfo(), compile=True)

        def loss_of(x, y):  # the trainer's path: fused, chunked head + cross-entropy
            return model(x, targets=y)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(
            vocab_size=c["vocab_size"],
            hidden_size=c["d_model"],
            num_hidden_layers=c["n_layers"],
            num_attention_heads=c["n_heads"],
            num_key_value_heads=c["n_kv_heads"],
            intermediate_size=d_ff,
            max_position_embeddings=c["seq_len"],
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
        )
        cfg._attn_implementation = "sdpa"
        model = LlamaForCausalLM(cfg)

        def loss_of(x, y):  # what transformers' ForCausalLMLoss computes: float32 logits, cross-entropy
            logits = model(input_ids=x, use_cache=False).logits
            return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum")

    model.train()
    return model, loss_of


def make_step(model, loss_of):
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=False)

    def step(tokens):
        loss = loss_of(tokens[:, :-1], tokens[:, 1:]) / tokens[:, 1:].numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def _data(name: str, n: int):
    import torch

    c = CONFIGS[name]
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, c["vocab_size"], (n, c["batch"], c["seq_len"] + 1), generator=g)


def worker(impl: str, name: str, steps: int, warmup: int, threads: int) -> dict:
    """One implementation alone in this process: its peak memory (and a throughput figure)."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = CONFIGS[name]
    before = _current_rss_mb()
    model, loss_of = build(impl, name)
    step = make_step(model, loss_of)
    data = _data(name, warmup + steps)
    for i in range(warmup):
        step(data[i])
    t0 = time.perf_counter()
    losses = [step(data[warmup + i]) for i in range(steps)]
    dt = time.perf_counter() - t0
    tokens = steps * c["batch"] * c["seq_len"]
    return {
        "impl": impl,
        "config": name,
        "tokens_per_s": tokens / dt,
        "seconds": dt,
        "params": sum(p.numel() for p in model.parameters()),
        "peak_rss_mb": _rss_mb(),
        "rss_before_model_mb": before,
        "first_loss": losses[0],
        "torch": torch.__version__,
    }


def interleaved(name: str, steps: int, warmup: int, threads: int, compile: bool = False) -> dict:
    """Both implementations in one process, steps alternating A B A B ...: each step's time is
    measured under the same machine load, so a busy shared CPU biases neither side."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = CONFIGS[name]
    impls = ("archpool", "transformers") + (("archpool+compile",) if compile else ())
    steppers = {i: make_step(*build(i, name)) for i in impls}
    compile_s = None
    if compile:  # compile outside the timed region (reported separately)
        t0 = time.perf_counter()
        steppers["archpool+compile"](_data(name, 1)[0])
        compile_s = time.perf_counter() - t0
    data = _data(name, warmup + steps)
    times: dict[str, list[float]] = {i: [] for i in impls}
    for k in range(warmup + steps):
        order = impls[k % len(impls) :] + impls[: k % len(impls)]  # rotate who goes first
        for i in order:
            t0 = time.perf_counter()
            steppers[i](data[k])
            if k >= warmup:
                times[i].append(time.perf_counter() - t0)
    tok = c["batch"] * c["seq_len"]
    out = {i: {"tokens_per_s": tok / statistics.median(times[i]), "step_s": times[i]} for i in impls}
    if compile:
        out["archpool+compile"]["compile_s"] = compile_s
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {', '.join(CONFIGS)}")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--compile", action="store_true", help="also time archpool with the trainer's torch.compile (per block)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--worker", nargs=2, metavar=("IMPL", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        impl, name = args.worker
        fn = (
            interleaved(name, args.steps, args.warmup, args.threads, args.compile)
            if impl == "both"
            else worker(impl, name, args.steps, args.warmup, args.threads)
        )
        print(json.dumps(fn))
        return 0
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    results: dict[tuple[str, str], list[dict]] = {}
    env = dict(
        os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )

    def run(impl: str, name: str, steps: int) -> dict:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            impl,
            name,
            "--steps",
            str(steps),
            "--warmup",
            str(args.warmup),
            "--threads",
            str(args.threads),
        ] + (["--compile"] if args.compile else [])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    for name in names:
        for impl in ("archpool", "transformers"):  # memory: each alone in a fresh process
            results.setdefault((impl, name), []).append(run(impl, name, 2))
        for _ in range(args.repeats):  # throughput: interleaved in one process
            both = run("both", name, args.steps)
            for impl, res in both.items():
                results.setdefault(("speed", impl, name), []).append(res["tokens_per_s"])  # type: ignore[arg-type]
                if "compile_s" in res:
                    results.setdefault(("compile_s", name), []).append(res["compile_s"])  # type: ignore[arg-type]
    print(
        f"CPU training throughput, float32, {args.threads} threads, median step time of {args.steps} timed steps "
        f"(+{args.warmup} warmup) with archpool and transformers steps interleaved in one process; tokens/s are "
        f"medians over {args.repeats} processes, ratios the median of the per-process ratios; peak RSS from a separate fresh process per implementation\n"
    )
    print(
        "| config | shapes (d, L, H/KV, V, T x B) | params | archpool tok/s | transformers tok/s | ratio (eager / eager) "
        + ("| archpool + compile tok/s | ratio (compiled / eager) " if args.compile else "")
        + "| peak RSS MB archpool / transformers (growth) |"
    )
    print("|---|---|---:|---:|---:|---:|" + ("---:|---:|" if args.compile else "") + "---|")
    summary = []
    for name in names:
        c = CONFIGS[name]
        a, h = results[("archpool", name)], results[("transformers", name)]
        speed = {k[1]: v for k, v in results.items() if k[0] == "speed" and k[2] == name}  # type: ignore[index]
        ta, th = statistics.median(speed["archpool"]), statistics.median(speed["transformers"])

        def ratio(impl: str, speed=speed) -> float:  # each process timed both sides under the same load
            return statistics.median(x / y for x, y in zip(speed[impl], speed["transformers"]))

        ra, rh = max(x["peak_rss_mb"] for x in a), max(x["peak_rss_mb"] for x in h)
        ga, gh = ra - a[0]["rss_before_model_mb"], rh - h[0]["rss_before_model_mb"]
        shapes = (
            f"{c['d_model']}, {c['n_layers']}, {c['n_heads']}/{c['n_kv_heads']}, {c['vocab_size']}, {c['seq_len']} x {c['batch']}"
        )
        comp = ""
        if args.compile:
            tc = statistics.median(speed["archpool+compile"])
            comp = f"{tc:,.0f} | **{ratio('archpool+compile'):.2f}x** | "
        print(
            f"| {name} | {shapes} | {a[0]['params'] / 1e6:.2f} M | {ta:,.0f} | {th:,.0f} | **{ratio('archpool'):.2f}x** | {comp}"
            f"{ra:.0f} / {rh:.0f} (+{ga:.0f} / +{gh:.0f}) |"
        )
        summary.append(
            {
                "config": name,
                "archpool": ta,
                "transformers": th,
                "ratio": ratio("archpool"),
                "ratio_compiled": ratio("archpool+compile") if args.compile else None,
                "compile_s": results.get(("compile_s", name)),
                "memory_runs": a + h,
                "speed_runs": speed,
            }
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


NAME = "train"
DESCRIPTION = "CPU training step, archpool's Decoder against transformers' LlamaForCausalLM: tokens/s and peak RSS"
FULL = ["--configs", "tiny,tiny-gqa,small,small-gqa,base", "--steps", "20", "--repeats", "3", "--compile"]
QUICK = ["--configs", "tiny", "--steps", "2", "--warmup", "1", "--repeats", "1"]


def run(quick: bool) -> dict:
    from bench.suite import results_from_json

    return {"configs": results_from_json(main, QUICK if quick else FULL)}


if __name__ == "__main__":
    sys.exit(main())
