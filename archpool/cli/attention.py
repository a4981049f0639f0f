"""``archpool attention TARGET [TARGET ...]``: sinks, entropy, distance profiles and retrieval heads."""

from __future__ import annotations

import argparse
import json
import sys

from archpool.cli.args import non_negative_int, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "attention",
        help="attention sinks, entropy, distance profiles and retrieval heads of runs / checkpoints / HF models",
        description="Attention analysis on held-out text of the pool's validation split (docs/evaluation.md §4–5). "
        "TARGET is a run directory, an archpool checkpoint or a Hugging Face model directory. "
        "Several targets are shown side by side. Results are cached by the model's files (weights, config, tokenizer) and the text.",
    )
    p.add_argument("targets", nargs="+", metavar="TARGET")
    p.add_argument("--json", action="store_true", help="print the full result JSON (a list for several targets)")
    p.add_argument("--out", help="write the result JSON here (a directory for several targets: <name>.json each)")
    p.add_argument("--store", help="data store directory to read held-out text from (default: the run's)")
    p.add_argument(
        "--text", nargs="+", metavar="FILE", help="plain-text files instead of a store (needs tokenizer.json beside the model)"
    )
    p.add_argument(
        "--seq-len",
        type=positive_int,
        help="pretraining context (lengths analysed: ×1, ×2, ×4); default: the model's max_seq_len",
    )
    p.add_argument("--lengths", type=positive_int, nargs="+", help="explicit long lengths instead of seq-len × (1, 2, 4)")
    p.add_argument("--long-ctx", type=positive_int, help="extended context: the longest retrieval-test length")
    p.add_argument("--sink-samples", type=positive_int, default=32)
    p.add_argument("--long-samples", type=positive_int, default=4)
    p.add_argument("--queries", type=positive_int, default=128, help="last M queries analysed per long sample")
    p.add_argument("--bos-id", type=non_negative_int, help="token prepended in the 'BOS' variant (default: the store's EOS)")
    p.add_argument("--no-retrieval", action="store_true", help="skip the retrieval-head needle test")
    p.add_argument("--top-k", type=positive_int, default=10)
    p.add_argument("--mask-k", type=non_negative_int, help="heads masked in the ablation (0: none; default 3%% of heads)")
    p.add_argument(
        "--backend",
        choices=("auto", "hf", "archpool"),
        default="auto",
        help="for HF directories: run transformers itself (auto/hf) or import into archpool's Decoder",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--figures", metavar="DIR", help="also write the comparison figures (PNG) here")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.attention.settings import Settings
    from archpool.attention.stage import analyze_target
    from archpool.attention.table import summaries_table

    settings = Settings(
        seq_len=args.seq_len,
        lengths=tuple(args.lengths) if args.lengths else None,
        long_ctx=args.long_ctx,
        sink_samples=args.sink_samples,
        long_samples=args.long_samples,
        queries=args.queries,
        bos_id=args.bos_id,
        retrieval=not args.no_retrieval,
        top_k=args.top_k,
        mask_k=args.mask_k,
    )
    log = (lambda *a: print(*a, file=sys.stderr)) if not args.json else (lambda *a: None)
    results = []
    for t in args.targets:
        out = None
        if args.out:
            out = Path(args.out) / f"{Path(t).name}.json" if len(args.targets) > 1 else Path(args.out)
        results.append(
            analyze_target(
                t,
                settings,
                store=args.store,
                texts=args.text,
                out=out,
                use_cache=not args.no_cache,
                backend=args.backend,
                device=args.device,
                log=log,
            )
        )
    if args.figures:
        from archpool.attention.figures import save_figures

        for path in save_figures(results, args.figures):
            log(f"wrote {path}")
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print(summaries_table(results))
    return 0
