"""Two tiny models that differ only in QK-norm, trained on CPU, and their attention side by side.

    .venv/bin/python -m bench.studies.attention_qk_pair [--steps 300] [--threads 1] [--out /tmp/attn_qk_pair] [--write bench/results/attention.md]

Data: the data stage's embedded corpus (``DataConfig`` defaults, capped by ``--max-chars``),
a BPE of ``--vocab``; attention statistics on its held-out validation split. Training: the train
stage's ``pretrain`` (same seed, data order and schedule for both members). Analysis:
``archpool.attention.stage.analyze_target`` on each run directory, exactly what
``archpool attention RUN_A RUN_B`` prints. The numbers are reported as they come out: nothing here
assumes the paper's direction.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default="/tmp/attn_qk_pair")
    ap.add_argument("--qk-norms", nargs=2, default=["none", "layerwise"])
    ap.add_argument("--norm", default="pre")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--max-chars", type=int, default=6_000_000)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", help="write the markdown report here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from archpool.attention.stage import analyze_target
    from archpool.attention.table import summaries_table
    from archpool.data.config import DataConfig
    from archpool.data.store import prepare
    from archpool.train.config import RunConfig, TrainConfig
    from archpool.train.trainer import is_complete, pretrain

    out = Path(args.out)
    t0 = time.time()
    data_cfg = DataConfig(
        vocab_size=args.vocab, max_chars=args.max_chars, long_doc_tokens=4 * args.seq_len, cache_dir=str(out / "cache")
    )
    store = prepare(data_cfg, progress=False, log=lambda *a: None)
    print(f"data: {store} in {time.time() - t0:.0f}s", file=sys.stderr)
    base = dict(
        vocab_size=store.tokenizer.vocab_size,
        d_model=64,
        n_layers=4,
        n_heads=4,
        n_kv_heads=4,
        max_seq_len=args.seq_len,
        norm=args.norm,
    )
    train = TrainConfig(
        lr=3e-3,
        warmup_steps=20,
        global_batch_tokens=args.batch_tokens,
        micro_batch_size=16,
        seq_len=args.seq_len,
        max_steps=args.steps,
        log_every=50,
        ckpt_every=10_000,
        seed=0,
        progress=False,
    )
    runs, timings, losses = [], {}, {}
    for qk in args.qk_norms:
        run_dir = out / f"qk_{qk}"
        t = time.time()
        if not is_complete(run_dir):
            rc = RunConfig(model={**base, "qk_norm": qk}, data={"store": str(store.path)}, train=train)
            res = pretrain(rc, run_dir)
            losses[qk] = sum(res.losses[-20:]) / len(res.losses[-20:])
        timings[f"train {qk}"] = time.time() - t
        runs.append(run_dir)
    results = []
    for run_dir in runs:
        t = time.time()
        results.append(
            analyze_target(run_dir, {"seq_len": args.seq_len, "queries": 64}, log=lambda *a: print(*a, file=sys.stderr))
        )
        timings[f"attention {run_dir.name}"] = time.time() - t
    table = summaries_table(results)
    print(table)
    if args.write:
        cmd = "-m bench.studies.attention_qk_pair " + " ".join(argv if argv is not None else sys.argv[1:])
        write_report(cmd, args, base, train, store, table, timings, losses)
    return 0


def write_report(cmd, args, base, train, store, table, timings, losses) -> None:
    """The markdown report at ``args.write``: the setup, the summaries table and the timings."""
    lines = [
        "# Attention: two tiny models differing only in QK-norm",
        "",
        f"Command: `.venv/bin/python {cmd.strip()}`  ",
        f"Machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads (CPU), shared with other jobs.",
        "",
        f"- Data: embedded corpus, vocab {store.tokenizer.vocab_size}, store `{store.key}` ({store.manifest['counts']}).",
        f"- Model: {json.dumps(base)}; the pair differs only in `qk_norm` ({' vs '.join(args.qk_norms)}).",
        f"- Training: {train.max_steps} steps × {train.global_batch_tokens} tokens at T = {train.seq_len}, "
        f"lr {train.lr}, cosine, seed {train.seed}; final loss (mean of last 20 steps): "
        + ", ".join(f"{k}: {v:.3f}" for k, v in losses.items())
        + ".",
        "- Analysis: `archpool attention` defaults (sink rate at T = 64 over 32 held-out samples; "
        "last 64 queries of 4 samples at T × 1, 2, 4; needle test at 4 lengths × 10 depths; ablation masks 3 % of heads).",
        "",
        "```",
        table,
        "```",
        "",
        "Timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()),
        "",
    ]
    path = Path(args.write)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
