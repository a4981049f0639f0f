"""``archpool eval TARGET``: task suites, LongPPL and short-context metrics of a run, checkpoint or HF model."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from archpool.cli.args import finite_float, length, positive_int
from archpool.eval.harness import DEFAULT_LIMIT, DOWNLOADS, HARNESS_SUITE, LOCAL_TASKS
from archpool.eval.helmet_data import CATEGORIES as HELMET_DATA_CATEGORIES
from archpool.eval.helmet_data import DEFAULT_LIMIT as HELMET_DATA_LIMIT
from archpool.eval.helmet_data import SUITE as HELMET_DATA_SUITE
from archpool.names import ALL_SUITES, SUITE_NAMES
from archpool.study import EVAL_SAMPLES, EVAL_SEED


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a run / checkpoint / HF model on long-context suites",
        description="Evaluate TARGET (a run directory, an archpool checkpoint, or a Hugging Face model directory) on "
        "RULER- and HELMET-style synthetic suites, LongPPL and short-context metrics. Results: OUT/results.json, "
        "OUT/report.md and OUT/tasks/<task>/<length>_<mode>.json. "
        f"--suite {HARNESS_SUITE} runs lm-evaluation-harness's own RULER tasks instead (TARGET: a Hugging Face model "
        "directory, e.g. from archpool export-hf; offline unless --allow-download): OUT/harness/results.json and "
        "OUT/harness/samples.jsonl, columns ruler@L (the mean over the tasks run), ruler_tasks@L (how many of lm-eval's "
        "13) and ruler_<task>@L. "
        f"--suite {HELMET_DATA_SUITE} --helmet-data DIR runs HELMET's own datasets and metrics from a local copy of "
        "HELMET's released data on a Hugging Face model directory: OUT/helmet_data/results.json and samples.jsonl, "
        "columns helmet_data@L (the mean over the categories run), helmet_data_categories@L (how many of HELMET's 7), "
        "helmet_data_<category>@L and helmet_data_<dataset>@L.",
    )
    p.add_argument("target")
    p.add_argument(
        "--suite",
        action="append",
        default=None,
        help=f"{' | '.join(SUITE_NAMES)} | {HARNESS_SUITE} | {HELMET_DATA_SUITE} (repeatable or comma-separated; default "
        f"{ALL_SUITES}; {HARNESS_SUITE}: lm-evaluation-harness's RULER tasks on an HF model directory; "
        f"{HELMET_DATA_SUITE}: HELMET's own data and metrics, with --helmet-data)",
    )
    p.add_argument(
        "--lengths",
        type=length,
        nargs="+",
        default=None,
        help="token budgets (default: pretraining context ×1, ×2, ×4, ×8)",
    )
    p.add_argument("--mode", choices=("gen", "ll", "both"), default="both", help="generation, likelihood, or both (default)")
    p.add_argument(
        "--n",
        "--limit",
        dest="n",
        type=positive_int,
        default=None,
        help=f"samples per task × length (default {EVAL_SAMPLES}; {HARNESS_SUITE}: documents scored of the 500 lm-eval "
        f"builds, default {DEFAULT_LIMIT}; {HELMET_DATA_SUITE}: HELMET's max_test_samples, default {HELMET_DATA_LIMIT})",
    )
    p.add_argument(
        "--harness-tasks",
        default=None,
        metavar="TASKS",
        help=f"{HARNESS_SUITE}'s tasks, comma-separated (default the six that build their documents locally: "
        f"{','.join(LOCAL_TASKS)}; the others download data: {','.join(DOWNLOADS)})",
    )
    p.add_argument(
        "--allow-download",
        action="store_true",
        help=f"{HARNESS_SUITE}: let lm-eval download the data of its essay and QA tasks (otherwise Hugging Face "
        "hub and datasets run offline)",
    )
    p.add_argument(
        "--helmet-data",
        default=None,
        metavar="DIR",
        help=f"{HELMET_DATA_SUITE}: HELMET's data directory (the data/ its data.tar.gz unpacks to)",
    )
    p.add_argument(
        "--helmet-data-categories",
        default=None,
        metavar="CATS",
        help=f"{HELMET_DATA_SUITE}'s categories, comma-separated (default {','.join(HELMET_DATA_CATEGORIES)})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=EVAL_SEED,
        help=f"task seed of archpool's suites (default {EVAL_SEED}; {HARNESS_SUITE} keeps lm-eval's)",
    )
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


def split_suites(suites: list[str] | None) -> tuple[list[str], bool, bool]:
    """(archpool's suites, whether lm-eval's RULER was asked for, whether HELMET's data was) of the
    ``--suite`` values."""
    parts = [p.strip() for s in suites or [ALL_SUITES] for p in str(s).split(",") if p.strip()]
    own = [p for p in parts if p not in (HARNESS_SUITE, HELMET_DATA_SUITE)]
    return own, HARNESS_SUITE in parts, HELMET_DATA_SUITE in parts


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.data.config import default_cache_root

    suites, harness, helmet = split_suites(args.suite)
    out = Path(args.out) if args.out else Path(args.target) / "eval"
    cache = Path(args.cache) if args.cache else default_cache_root() / "eval"
    if args.harness_tasks and not harness:
        from archpool.errors import ConfigError

        raise ConfigError("--harness-tasks", f"applies to --suite {HARNESS_SUITE} only")
    if (args.helmet_data or args.helmet_data_categories) and not helmet:
        from archpool.errors import ConfigError

        flag = "--helmet-data" if args.helmet_data else "--helmet-data-categories"
        raise ConfigError(flag, f"applies to --suite {HELMET_DATA_SUITE} only")
    # every suite's request is built and its inputs read before any suite runs: a later suite's bad flag,
    # data file or suite name is refused before the first one spends its time
    runs = []
    if harness:
        runs.append(_harness(args, out / "harness", cache))
    if helmet:
        runs.append(_helmet_data(args, out / "helmet_data", cache))
    if suites:
        runs.append(_archpool_suites(args, suites, out, cache))
    for run in runs:
        run()
    return 0


def _harness(args: argparse.Namespace, out, cache) -> Callable[[], None]:
    """lm-eval's RULER of ``args``, checked (tasks, lengths, the model directory and its tokenizer), as a call."""
    from archpool.eval.harness import HarnessRequest, format_table, run_ruler
    from archpool.eval.hfdir import check_tokenizer_files

    model_dir = _hf_target(args, HARNESS_SUITE, "4096 8192")
    request = HarnessRequest(
        tasks=args.harness_tasks.split(",") if args.harness_tasks else LOCAL_TASKS,
        lengths=args.lengths,
        limit=args.n or DEFAULT_LIMIT,
        allow_download=args.allow_download,
        out_dir=out,
        cache_dir=cache,
        device=args.device,
    )
    check_tokenizer_files(model_dir)

    def run() -> None:
        res = run_ruler(model_dir, request, progress=not args.no_progress)
        title = f"lm-eval RULER ({res['lm_eval_version']}) of {res['target']}, {res['limit']} documents per task × length"
        _print_external(title, format_table(res), out, res["wall_s"])

    return run


def _helmet_data(args: argparse.Namespace, out, cache) -> Callable[[], None]:
    """HELMET's data of ``args``, checked (every data file read whole, the model directory and its tokenizer),
    as a call."""
    from archpool.errors import ConfigError
    from archpool.eval.helmet_data import HelmetDataRequest, check_data, format_table, run_helmet_data
    from archpool.eval.hfdir import check_tokenizer_files

    if not args.helmet_data:
        raise ConfigError("--helmet-data", f"--suite {HELMET_DATA_SUITE} reads HELMET's data from a directory: --helmet-data DIR")
    model_dir = _hf_target(args, HELMET_DATA_SUITE, "8192 16384")
    cats = args.helmet_data_categories.split(",") if args.helmet_data_categories else HELMET_DATA_CATEGORIES
    request = HelmetDataRequest(
        data_dir=args.helmet_data,
        categories=[c.strip() for c in cats],
        lengths=args.lengths,
        limit=args.n or HELMET_DATA_LIMIT,
        out_dir=out,
        cache_dir=cache,
        device=args.device,
    )
    check_tokenizer_files(model_dir)
    check_data(request.data_dir, request.categories, request.lengths, request.limit, request.shots, request.seed)

    def run() -> None:
        res = run_helmet_data(model_dir, request, progress=not args.no_progress)
        title = f"HELMET's data and metrics ({res['data_dir']}) on {res['target']}, up to {res['limit']} samples per dataset"
        _print_external(title, format_table(res), out, res["wall_s"])

    return run


def _print_external(title: str, table: str, out, wall_s: float) -> None:
    """An external suite's report on standard output: its title, its table and the files it wrote."""
    print(f"# {title}\n")
    print(table + "\n")
    print(f"wrote {out / 'results.json'} and {out / 'samples.jsonl'} ({wall_s:.1f} s)")


def _archpool_suites(args: argparse.Namespace, suites: list[str], out, cache) -> Callable[[], None]:
    """archpool's own suites of ``args``, checked (the request, the texts), as a call; the model loads when it runs."""
    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.short import open_store, read_texts
    from archpool.eval.target import load_target
    from archpool.rundir import resolve_target

    request = EvalRequest(
        suites=suites,
        lengths=args.lengths,
        modes=["gen", "ll"] if args.mode == "both" else [args.mode],
        n_samples=args.n or EVAL_SAMPLES,
        seed=args.seed,
        categories=args.categories.split(",") if args.categories else None,
        longppl_k=args.longppl_k,
        longppl_alpha=args.longppl_alpha,
        longppl_beta=args.longppl_beta,
        out_dir=out,
        cache_dir=cache,
    )
    texts = read_texts(args.texts) if args.texts else None
    resolve_target(args.target)  # found (a run, checkpoint or HF directory) before any suite runs; loaded when this one does

    def run() -> None:
        target = load_target(args.target, args.tokenizer, args.device, args.prefill_chunk, args.max_batch)
        store = open_store(args.data, target.record)
        evaluator = (
            load_target(args.evaluator, args.tokenizer, args.device, args.prefill_chunk, args.max_batch)
            if args.evaluator
            else None
        )
        res = evaluate(target, request, store=store, texts=texts, evaluator=evaluator, progress=not args.no_progress)
        print((out / "report.md").read_text())
        print(f"wrote {out / 'results.json'} ({res['wall_s']:.1f} s)")

    return run


def _hf_target(args: argparse.Namespace, suite: str, example: str):
    """The Hugging Face model directory an external suite evaluates (``args.target``); ConfigError when the
    target is another kind (with the export that makes one) or no ``--lengths`` were given."""
    from archpool.errors import ConfigError
    from archpool.rundir import resolve_target

    found = resolve_target(args.target)
    if found.kind != "hf":
        raise ConfigError(
            "target",
            f"{args.target}: --suite {suite} evaluates a Hugging Face model directory; "
            f"export this {found.kind} first: archpool export-hf {args.target} OUT",
        )
    if args.lengths is None:
        raise ConfigError("--lengths", f"--suite {suite} needs its token lengths (e.g. --lengths {example})")
    return found.checkpoint
