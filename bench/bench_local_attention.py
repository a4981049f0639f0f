"""Sliding-window attention cost vs context length: full causal vs Olmo 3 pattern vs all-layer SWA.

archpool's Decoder at the ``base`` size (olmo3 family: d_model 256, 8 layers, 8 heads, vocab 8192),
float32, batch 1, window 256, 1 thread by default (``--threads``). Cases (same weights shapes, only the layer types differ):

- ``full``: every layer full causal (SDPA ``is_causal``);
- ``olmo3`` / ``swa``: 3 of 4 layers / every layer windowed, blockwise local attention (the default);
- ``olmo3-dense`` / ``swa-dense``: the same through SDPA with a dense T×T boolean mask (the old path,
  ``Decoder(cfg, local_attention=False)``), to show what the tiling changed.

Time: all cases live in one process and run interleaved (full, olmo3, swa, ... then again), so a
shared, busy CPU slows them alike. The table reports best-of-n seconds, the speed-up as the ratio of
best times, and the median [min–max] of the per-round ratios (each round's cases ran back to back). Forward is under
``no_grad``; the training step is forward + summed cross-entropy (the fused head) + backward.
Memory: one fresh process per (case, T) runs a 128-token warm-up step, then one training step at T;
peak RSS growth over the RSS just before that step (``VmHWM`` after resetting it, minus ``VmRSS``; not ``ru_maxrss``, which a child inherits from its
parent across fork + exec: activations,
attention masks, gradients and the allocator's slack; not the weights).

    nice -n 10 .venv/bin/python -m bench.bench_local_attention            # writes bench/results/local_attention.{json,png}
    nice -n 10 .venv/bin/python -m bench.bench_local_attention --lengths 512 2048 --repeats 2 --no-memory
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CASES = {  # name: (swa_pattern, blockwise local attention)
    "full": ("none", True),
    "olmo3": ("olmo3", True),
    "swa": ("all", True),
    "olmo3-dense": ("olmo3", False),
    "swa-dense": ("all", False),
}
DENSE_MAX_T = 8192  # dense T×T masks beyond this take minutes and GBs: not run
RESULTS = Path(__file__).parent / "results"
OP_OUT = RESULTS / "local_attention_op.json"


def build(case: str, T: int, window: int):
    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    pattern, local = CASES[case]
    cfg = ModelConfig.preset("olmo3", size="base", max_seq_len=T, window=window, swa_pattern=pattern)
    model = Decoder(cfg, seed=0, local_attention=local)
    ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    return model, ids


def forward(model, ids) -> None:
    import torch

    with torch.no_grad():
        model(ids)  # logits (1, T, vocab), the LM head included


def train_step(model, ids) -> None:
    model.zero_grad(set_to_none=True)
    model(ids, targets=ids).backward()


def cases_at(T: int, cases: list[str]) -> list[str]:
    return [c for c in cases if not (c.endswith("-dense") and T > DENSE_MAX_T)]


def time_cases(T: int, window: int, repeats: int, cases: list[str]) -> dict:
    """Median seconds and per-repeat ratios to ``full`` for forward and training step, interleaved."""
    models = {c: build(c, T, window) for c in cases_at(T, cases)}
    out: dict = {}
    for kind, fn in (("forward", forward), ("train", train_step)):
        for m, ids in models.values():  # warm-up (allocator, first-call costs); long training steps need none
            if kind == "forward" or T < 4096:
                fn(m, ids)
        times: dict[str, list[float]] = {c: [] for c in models}
        for _ in range(repeats):
            for c, (m, ids) in models.items():
                t0 = time.perf_counter()
                fn(m, ids)
                times[c].append(time.perf_counter() - t0)
        for c, ts in times.items():
            ratios = [tf / t for tf, t in zip(times["full"], ts)]  # speed-up over full, per round
            out.setdefault(c, {})[kind] = {"s": statistics.median(ts), "all_s": ts, "speedup_vs_full": ratios}
            dense = c + "-dense"
            if dense in times:
                out[c][kind]["speedup_vs_dense"] = [td / t for td, t in zip(times[dense], ts)]
        for m, _ in models.values():
            m.zero_grad(set_to_none=True)
    return out


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024  # kB


def memory_child(case: str, T: int, window: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    model, ids = build(case, T, window)
    train_step(model, ids[:, :128])  # one-time costs (thread pools, kernels' scratch) out of the delta
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_mb("VmRSS")
    train_step(model, ids)
    print(json.dumps({"peak_delta_mb": _status_mb("VmHWM") - before}))


def memory(case: str, T: int, window: int, threads: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", case, str(T), str(window), str(threads)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_delta_mb"]


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}–{max(xs):.2f}]"


def best_ratio(r: dict, ref: dict) -> str:
    return f"{min(ref['all_s']) / min(r['all_s']):.2f}×"


def table(res: dict) -> str:
    """Best-of-n seconds, speed-ups as the ratio of best times, then the per-round ratios' median [min–max]."""
    lines = [
        "| T | case | fwd s (best) | fwd vs full | fwd vs dense mask | train s (best) | train vs full "
        "| train vs dense mask | train peak RSS growth MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for T, row in res["by_T"].items():
        for c, r in row.items():
            cells = []
            for kind in ("forward", "train"):
                x = r[kind]
                full, dense = row["full"][kind], row.get(c + "-dense", {}).get(kind)
                cells.append(f"{min(x['all_s']):.3f}")
                cells.append(f"{best_ratio(x, full)} {spread(x['speedup_vs_full'])}" if c != "full" else "1")
                cells.append(f"{best_ratio(x, dense)} {spread(x['speedup_vs_dense'])}" if dense else "")
            mem = r.get("peak_delta_mb")
            lines.append(f"| {T} | {c} | " + " | ".join(cells) + f" | {'' if mem is None else f'{mem:.0f}'} |")
    return "\n".join(lines)


def figure(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for c in res["cases"]:
        Ts = [int(T) for T, row in res["by_T"].items() if c in row]
        rows = [res["by_T"][str(T)][c] for T in Ts]
        style = "--" if c.endswith("-dense") else "-"
        axes[0].plot(Ts, [min(r["forward"]["all_s"]) for r in rows], style, marker="o", label=c)
        axes[1].plot(Ts, [min(r["train"]["all_s"]) for r in rows], style, marker="o", label=c)
        mem = [(T, r["peak_delta_mb"]) for T, r in zip(Ts, rows) if r.get("peak_delta_mb") is not None]
        if mem:
            axes[2].plot(*zip(*mem), style, marker="o", label=c)
    for ax, title in zip(
        axes, ["forward (s, best of n)", "training step fwd+bwd (s, best of n)", "training step peak RSS growth (MB)"]
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("T (tokens, batch 1)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"archpool Decoder, base size, window {res['window']}, float32, {res['threads']} CPU threads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- the attention op alone (``--op``) and the whole model beside the free-attention ceiling (``--model``) ---


def document_ids(T: int, mean: int, seed: int = 0):
    """(1, T) contiguous documents of random lengths, uniform in [mean / 4, 7 mean / 4]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids, d = [], 0
    while len(ids) < T:
        ids += [d] * int(torch.randint(mean // 4, 7 * mean // 4 + 1, (1,), generator=g))
        d += 1
    return torch.tensor([ids[:T]])


def pairs(T: int, window: int | None, doc_ids=None) -> int:
    """Query-key pairs the mask allows (the work an ideal kernel does)."""
    import torch

    if doc_ids is None:
        return sum(min(i + 1, window or T) for i in range(T))
    lengths = torch.unique_consecutive(doc_ids[0], return_counts=True)[1].tolist()
    return sum(pairs(n, window) for n in lengths)


def op_step(q, k, v, mask, impl=None) -> None:
    """Forward and backward of one attention call: SDPA ``is_causal`` when ``mask`` is None, else
    ``local_attention`` of ``impl`` (a module with ``LocalMask`` and ``local_attention``; archpool's
    ``kernels.dispatch`` by default)."""
    import torch.nn.functional as F

    import archpool.model.kernels.dispatch as kernels

    impl = impl or kernels
    for t in (q, k, v):
        t.grad = None
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if mask is None else impl.local_attention(q, k, v, mask)
    y.sum().backward()


@dataclass(frozen=True)
class OpInputs:
    """The q, k, v of the op benchmark: B = 1, ``heads`` heads (K and V too) of ``head_dim``, in
    ``dtype``; memory as (B, H, T, D) (``bhtd``) or as the model's projections give it (``bthd``)."""

    heads: int
    head_dim: int
    dtype: str
    layout: str = "bhtd"

    def make(self, T: int):
        import torch

        g = torch.Generator().manual_seed(T)
        shape = (1, T, self.heads, self.head_dim) if self.layout == "bthd" else (1, self.heads, T, self.head_dim)
        xs = [torch.randn(*shape, generator=g).to(getattr(torch, self.dtype)) for _ in range(3)]
        if self.layout == "bthd":
            xs = [x.transpose(1, 2) for x in xs]
        return [x.requires_grad_() for x in xs]


def op_row(T: int, window: int | None, doc_mean: int | None, inputs: OpInputs, repeats: int) -> dict:
    """Best-of-n seconds of full causal and the local op, interleaved; per-round ratios; the ideal
    (pairs of full causal over pairs the mask allows)."""

    from archpool.model.kernels.local import LocalMask

    q, k, v = inputs.make(T)
    doc_ids = document_ids(T, doc_mean) if doc_mean else None
    cases = {"full": (None, None), "local": (LocalMask(window, doc_ids), None)}
    for m, impl in cases.values():
        op_step(q, k, v, m, impl)
    times: dict[str, list[float]] = {c: [] for c in cases}
    names = list(cases)
    for r in range(repeats):
        # full causal first (it evicts the caches), then the others in an order rotated every round,
        # so that no case always runs right after full causal or right after another on warm data
        others = names[1:]
        for c in names[:1] + others[r % len(others) :] + others[: r % len(others)]:
            m, impl = cases[c]
            t0 = time.perf_counter()
            op_step(q, k, v, m, impl)
            times[c].append(time.perf_counter() - t0)
    ideal = pairs(T, None) / pairs(T, window, doc_ids)
    full, local = times["full"], times["local"]
    speedup = min(full) / min(local)
    row = {
        "T": T,
        "full_s": full,
        "local_s": local,
        "speedup": speedup,
        "round_speedups": [f / x for f, x in zip(full, local)],
        "ideal": ideal,
        "fraction_of_ideal": speedup / ideal,
    }
    return row


def op_table(rows: list[dict], title: str) -> str:
    lines = [
        f"{title}",
        "",
        "| T | full causal s | local s | speed-up over full causal (per-round median [min–max]) | ideal (pair ratio) | fraction of ideal |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['T']:,} | {min(r['full_s']):.3f} | {min(r['local_s']):.3f} | {r['speedup']:.1f}× "
            f"{spread(r['round_speedups'])} | {r['ideal']:.1f}× | {100 * r['fraction_of_ideal']:.0f}% |"
        )
    return "\n".join(lines)


def op_main(args) -> dict:
    """The op tables: sliding window, then document masks (full-attention layer), fwd + bwd."""
    import torch

    torch.set_num_threads(args.threads)
    res = {"threads": torch.get_num_threads(), "torch": torch.__version__, "window": args.window, "heads": args.heads}
    res.update(head_dim=args.head_dim, dtype=args.dtype, doc_mean=args.doc_mean, date=time.strftime("%Y-%m-%d"))
    res["layout"] = args.layout
    inputs = OpInputs(args.heads, args.head_dim, args.dtype, args.layout)
    for key, window, doc_mean in (("window_rows", args.window, None), ("document_rows", None, args.doc_mean)):
        res[key] = []
        for T in args.lengths:
            reps = args.repeats if T <= 8192 else args.long_repeats
            res[key].append(op_row(T, window, doc_mean, inputs, reps))
            print(f"op {key} T={T} done", file=sys.stderr, flush=True)
    return res


def op_report(res: dict) -> str:
    head = (
        f"attention op, forward + backward, B=1, {res['heads']} heads, head_dim {res['head_dim']}, {res['dtype']}, "
        f"{res['threads']} thread(s), torch {res['torch']}, q/k/v layout {res.get('layout', 'bhtd')}"
    )
    return "\n\n".join(
        [
            op_table(res["window_rows"], f"{head}: sliding window W={res['window']} against full causal SDPA"),
            op_table(res["document_rows"], f"{head}: documents (mean length {res['doc_mean']}) against full causal SDPA"),
        ]
    )


def model_row(T: int, window: int, repeats: int) -> dict:
    """Whole-model forward (base size, no_grad): full causal, every layer windowed, and attention made
    free (it returns V: the ceiling of any attention speed-up), interleaved; best-of-n seconds."""

    from archpool.model.kernels.dispatch import sdpa_attention as real

    full, _ = build("full", T, window)
    swa, ids = build("swa", T, window)

    def free(q, k, v, mask):
        return v.repeat_interleave(q.shape[1] // v.shape[1], dim=1) if q.shape[1] != v.shape[1] else v

    def run(model, attn) -> float:
        for block in model.layers:  # every layer attends with ``attn``
            block.attn.kernel = attn
        t0 = time.perf_counter()
        forward(model, ids)
        return time.perf_counter() - t0

    cases = {"full": (full, real), "swa": (swa, real), "free": (full, free)}
    times: dict[str, list[float]] = {c: [] for c in cases}
    for m, attn in cases.values():
        run(m, attn)
    for _ in range(repeats):
        for c, (m, attn) in cases.items():
            times[c].append(run(m, attn))
    best = {c: min(ts) for c, ts in times.items()}
    return {"T": T, "s": times, "swa_speedup": best["full"] / best["swa"], "ceiling": best["full"] / best["free"]}


def model_report(rows: list[dict], window: int) -> str:
    lines = [
        f"whole model (base size, olmo3 family, forward under no_grad, B=1), every layer windowed (W={window}) "
        "against full causal, beside attention made free",
        "",
        "| T | full s | all-SWA s | free attention s | SWA speed-up | free-attention ceiling | share of the ceiling's gain |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f, w, z = (min(r["s"][c]) for c in ("full", "swa", "free"))
        gain = (f - w) / (f - z) if f > z else float("nan")
        lines.append(
            f"| {r['T']:,} | {f:.3f} | {w:.3f} | {z:.3f} | {r['swa_speedup']:.2f}× | {r['ceiling']:.2f}× | {100 * gain:.0f}% |"
        )
    return "\n".join(lines)


def run_op(args) -> dict:
    """``--op`` (and ``--model``): time, print the tables, write ``OP_OUT`` (or ``--out`` if given)."""
    res = op_main(args)
    if args.model:
        res["model"] = [model_row(T, args.window, args.repeats) for T in args.model_lengths]
    out = args.out if args.out != RESULTS / "local_attention.json" else OP_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(op_report(res))
    if "model" in res:
        print("\n" + model_report(res["model"], args.window))
    return res


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long-repeats", type=int, default=1, help="repeats at T > 8192")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "local_attention.json")
    ap.add_argument("--report", action="store_true", help="only print the table and draw the figure of --out")
    ap.add_argument("--memory-only", action="store_true", help="(re)measure memory for the cases and lengths in --out")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: on a shared, busy CPU one stalled OpenMP thread stalls a 2-thread run)",
    )
    ap.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--op", action="store_true", help="the attention op alone: window and document tables (OP_OUT)")
    ap.add_argument("--model", action="store_true", help="with --op: whole-model forwards beside free attention")
    ap.add_argument("--model-lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument(
        "--layout",
        choices=["bhtd", "bthd"],
        default="bhtd",
        help="with --op: q/k/v memory as (B, H, T, D), or as the model's projections give it, (B, T, H, D)",
    )
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--doc-mean", type=int, default=1024, help="mean document length of the document table")
    args = ap.parse_args(argv)
    if args.op:
        return run_op(args)
    if args.report:
        return report(json.loads(args.out.read_text()), args.out)
    if args.memory_only:
        res = json.loads(args.out.read_text())
        for T, row in res["by_T"].items():
            for c in row:
                row[c]["peak_delta_mb"] = memory(c, int(T), res["window"], res["threads"])
            print(f"T={T} memory done", file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(res, indent=1))
        return report(res, args.out)
    if args.memory_child:
        case, T, window, threads = args.memory_child
        return memory_child(case, int(T), int(window), int(threads))

    import torch

    torch.set_num_threads(args.threads)
    res = {
        "window": args.window,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "batch": 1,
        "cases": args.cases,
        "repeats": args.repeats,
        "by_T": {},
    }
    for T in args.lengths:
        t0 = time.perf_counter()
        row = time_cases(T, args.window, args.repeats if T <= 8192 else args.long_repeats, args.cases)
        if not args.no_memory:
            for c in row:
                row[c]["peak_delta_mb"] = memory(c, T, args.window, args.threads)
        res["by_T"][str(T)] = row
        print(f"T={T} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))  # partial results survive an interrupt
    report(res, args.out)
    return res


def report(res: dict, out: Path) -> None:
    print(table(res))
    figure(res, out.with_suffix(".png"))


NAME = "local_attention"
DESCRIPTION = "the sliding-window and document-mask attention op against full causal SDPA, and the whole model's forward"
FULL = ["--op", "--model", "--layout", "bthd", "--lengths", "2048", "4096", "8192", "16384", "--repeats", "8"]
FULL += ["--long-repeats", "6", "--model-lengths", "2048", "4096", "8192"]
QUICK = ["--op", "--model", "--layout", "bthd", "--lengths", "512", "--repeats", "1", "--model-lengths", "512"]


def run(quick: bool) -> dict:
    """The op tables (``--op --model``); the results JSON goes to a temporary file."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return main([*(QUICK if quick else FULL), "--out", str(Path(tmp) / "local_attention_op.json")])


if __name__ == "__main__":
    main()
