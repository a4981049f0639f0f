"""``archpool eval TARGET``: task suites, LongPPL and short-context metrics of a run, checkpoint or HF model."""

from __future__ import annotations

import argparse

from archpool.cli.args import finite_float, length, positive_int
from archpool.names import ALL_SUITES, SUITE_NAMES
from archpool.study import EVAL_SAMPLES, EVAL_SEED


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a run / checkpoint / HF model on long-context suites",
        description="Evaluate TARGET (a run directory, an archpool checkpoint, or a Hugging Face model directory) on "
        "RULER- and HELMET-style synthetic suites, LongPPL and short-context metrics. Results: OUT/results.json, "
        "OUT/report.md and OUT/tasks/<task>/<length>_<mode>.json.",
    )
    p.add_argument("target")
    p.add_argument(
        "--suite",
        action="append",
        default=None,
        help=f"{' | '.join(SUITE_NAMES)} (repeatable or comma-separated; default {ALL_SUITES})",
    )
    p.add_argument(
        "--lengths",
        type=length,
        nargs="+",
        default=None,
        help="token budgets (default: pretraining context ×1, ×2, ×4, ×8)",
    )
    p.add_argument("--mode", choices=("gen", "ll", "both"), default="both", help="generation, likelihood, or both (default)")
    p.add_argument("--n", type=positive_int, default=EVAL_SAMPLES, help=f"samples per task × length (default {EVAL_SAMPLES})")
    p.add_argument("--seed", type=int, default=EVAL_SEED)
    p.add_argument("--out", default=None, help="output directory (default TARGET/eval)")
    p.add_argument("--cache", default=None, help="result cache directory (default $ARCHPOOL_CACHE/eval)")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json or HF tokenizer directory (default: found beside the model)")
    p.add_argument("--data", default=None, help="prepared data store: held-out text for haystacks, LongPPL and validation ppl")
    p.add_argument("--texts", default=None, help="held-out texts (.txt or .jsonl) for haystacks and LongPPL, without a store")
    p.add_argument("--evaluator", default=None, help="LongPPL evaluator model (default: the target itself)")
    p.add_argument(
        "--longppl-k",
        type=positive_int,
        default=None,
        metavar="K",
        help="LongPPL's short-context window in tokens (default: the pretraining context)",
    )
    p.add_argument(
        "--longppl-alpha",
        type=finite_float,
        default=None,
        metavar="A",
        help="LongPPL key-token threshold on the long-short log-prob gain (default 2, as the longppl package)",
    )
    p.add_argument(
        "--longppl-beta",
        type=finite_float,
        default=None,
        metavar="B",
        help="LongPPL key-token threshold on the long-context log-prob (default -2, as the longppl package)",
    )
    p.add_argument("--categories", default=None, help="HELMET categories to average (default recall,rag,rerank,icl)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prefill-chunk", type=positive_int, default=512, help="tokens per prefill chunk (bounds attention memory)")
    p.add_argument("--max-batch", type=positive_int, default=16)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.data.config import default_cache_root
    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.short import open_store, read_texts
    from archpool.eval.target import load_target

    request = EvalRequest(
        suites=args.suite or [ALL_SUITES],
        lengths=args.lengths,
        modes=["gen", "ll"] if args.mode == "both" else [args.mode],
        n_samples=args.n,
        seed=args.seed,
        categories=args.categories.split(",") if args.categories else None,
        longppl_k=args.longppl_k,
        longppl_alpha=args.longppl_alpha,
        longppl_beta=args.longppl_beta,
        out_dir=Path(args.out) if args.out else Path(args.target) / "eval",
        cache_dir=Path(args.cache) if args.cache else default_cache_root() / "eval",
    )
    target = load_target(args.target, args.tokenizer, args.device, args.prefill_chunk, args.max_batch)
    store = open_store(args.data, target.record)
    texts = read_texts(args.texts) if args.texts else None
    evaluator = (
        load_target(args.evaluator, args.tokenizer, args.device, args.prefill_chunk, args.max_batch) if args.evaluator else None
    )
    res = evaluate(target, request, store=store, texts=texts, evaluator=evaluator, progress=not args.no_progress)
    out = request.out_dir
    print((out / "report.md").read_text())
    print(f"wrote {out / 'results.json'} ({res['wall_s']:.1f} s)")
    return 0
