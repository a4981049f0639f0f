"""``archpool run | status | pool``: run whole pools (the product's front door)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from archpool.cli.args import non_negative_int, positive_int

DEFAULT_POOL = "demo"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a pool end to end (default: the shipped demo pool)",
        description="Run every run of a pool: data → pretrain → extend → eval → attention → "
        "report. Cached and resumable: re-running skips finished stages.",
    )
    _pool_args(p, optional=True)
    p.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
        help="runs in parallel (local executor; threads are split; default: the pool's `jobs`, else 1)",
    )
    p.add_argument(
        "--executor",
        choices=["local", "slurm", "submitit-local"],
        default="local",
        help="local processes, SLURM jobs through submitit, or submitit's local executor",
    )
    p.add_argument("--only", nargs="+", metavar="RUN", help="run only these runs (full names, e.g. A_s0)")
    p.add_argument("--threads", type=positive_int, help="threads per run (default: cores // jobs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--allow-download",
        action="store_true",
        help="let checkpoint runs that name Hugging Face Hub models (org/name@revision) download them",
    )
    g = p.add_argument_group("SLURM (with --executor slurm)")
    g.add_argument("--partition", help="SLURM partition")
    g.add_argument(
        "--gpus-per-run", type=non_negative_int, default=0, help="GPUs per run; >1 runs the run's stages under torchrun"
    )
    g.add_argument("--cpus-per-run", type=non_negative_int, default=0, help="CPUs per run's job")
    g.add_argument("--mem-gb", type=positive_int, help="memory per job")
    g.add_argument("--time-min", type=positive_int, default=24 * 60, help="time limit per job, minutes")
    g.add_argument("--account", help="SLURM account")
    g.add_argument("--array-parallelism", type=positive_int, help="at most this many runs' jobs at once")
    p.set_defaults(func=cmd_run)

    p = subparsers.add_parser("status", help="show every run of a pool and the state of its stages")
    _pool_args(p, optional=True)
    p.add_argument("--json", action="store_true", help="machine-readable")
    p.set_defaults(func=cmd_status)

    p = subparsers.add_parser("pool", help="inspect pool files: list, show, export")
    sub = p.add_subparsers(dest="pool_command", metavar="ACTION")
    q = sub.add_parser("list", help="the shipped pools")
    q.set_defaults(func=cmd_pool_list)
    q = sub.add_parser("show", help="the expanded runs of a pool (validates it)")
    _pool_args(q, optional=False)
    q.add_argument("--plan", action="store_true", help="also list the stage graph with content keys")
    q.set_defaults(func=cmd_pool_show)
    q = sub.add_parser("export", help="write a pool directory's results table (results.csv) to a file")
    q.add_argument("pool_dir", help="pool directory (or pool name / file)")
    q.add_argument("--output", "-o", required=True)
    q.set_defaults(func=cmd_pool_export)
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])


def _pool_args(p: argparse.ArgumentParser, optional: bool) -> None:
    p.add_argument(
        "pool",
        nargs="?" if optional else None,
        default=DEFAULT_POOL if optional else None,
        help="a pool YAML, a shipped pool name (demo, smoke, olmpool) or a pool directory",
    )
    p.add_argument("--size", help="model size for every run (tiny, small, base, 100m, 1b, 7b)")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", help="override the pool's seeds")
    p.add_argument("--out", help="pool directory (default: out/<pool>[-<size>])")


def _load(args):
    """(PoolSpec or None, out dir). A pool directory argument reads its plan.json."""
    from archpool.pool.plan import PLAN_FILE, read_plan
    from archpool.pool.run import default_out
    from archpool.pool.spec import load_pool

    pool_arg = Path(args.pool)
    if pool_arg.is_dir() and (pool_arg / PLAN_FILE).is_file():
        spec, _ = read_plan(pool_arg)
        return spec, pool_arg
    spec = load_pool(args.pool, size=args.size, seeds=args.seeds)
    out = Path(args.out) if getattr(args, "out", None) else default_out(spec, size_overridden=bool(args.size))
    return spec, out


def cmd_run(args) -> int:
    from archpool.pool.run import run_pool
    from archpool.pool.stages import backend_module

    spec, out = _load(args)
    backend_module(spec.backend)
    _allow_downloads(spec, args.allow_download)
    params = dict(
        partition=args.partition,
        gpus_per_run=args.gpus_per_run,
        cpus_per_run=args.cpus_per_run,
        mem_gb=args.mem_gb,
        timeout_min=args.time_min,
        account=args.account,
        array_parallelism=args.array_parallelism,
    )
    params = {k: v for k, v in params.items() if v not in (None, 0)}
    if "mem_gb" in params:
        params["slurm_mem"] = f"{params.pop('mem_gb')}G"
    print(f"pool {spec.name} ({len(spec.runs)} runs, size {spec.size}, backend {spec.backend}) -> {out}")
    return run_pool(
        spec,
        out,
        jobs=args.jobs or spec.jobs,
        executor=args.executor,
        only=args.only,
        progress=not args.no_progress,
        executor_params=params,
        threads=args.threads,
    )


def _allow_downloads(spec, allow: bool) -> None:
    """Refuse a pool that needs the Hub unless --allow-download; tell its workers when it may."""
    import os

    from archpool.pool.checkpoints import ALLOW_DOWNLOAD_ENV, check_downloads

    check_downloads(spec.runs, allow)
    if allow:
        os.environ[ALLOW_DOWNLOAD_ENV] = "1"


def cmd_status(args) -> int:
    from archpool.pool.status import format_status, pool_status

    _, out = _load(args)
    rows = pool_status(out)
    print(json.dumps(rows, indent=2) if args.json else f"{out}\n" + format_status(rows))
    return 0


def cmd_pool_list(args) -> int:
    from archpool.pool.spec import load_pool, shipped_pools

    for name in shipped_pools():
        spec = load_pool(name)
        print(
            f"{name:<10} {len(spec.runs):>3} runs  size {spec.size:<6} {spec.description.splitlines()[0] if spec.description else ''}"
        )
    return 0


def cmd_pool_show(args) -> int:
    from archpool.pool.plan import build_plan
    from archpool.pool.stages import backend_module

    spec, out = _load(args)
    backend_module(spec.backend)
    short = spec.short_ctx
    print(f"pool {spec.name}: {len(spec.runs)} runs, size {spec.size}, seeds {spec.seeds}, backend {spec.backend}, out {out}")
    print(f"{'run':<34} feat swa qk_norm   norm kv/heads ctx   window d_ff layers init fp8 params")
    for r in spec.runs:
        a = r.axes
        print(
            f"{r.name:<34} {r.feature_count(short):>4} {a['swa']:>3} {a['qk_norm']:<9} {a['norm']:<4} "
            f"{a['n_kv_heads']:>2}/{a['n_heads']:<5} {a['pretrain_ctx']:<5} {r.model.window or '-':<6} "
            f"{r.model.d_ff:<4} {r.model.n_layers:<6} {r.init:<4} {int(r.fp8):<3} {r.params / 1e6:.2f}M"
        )
    if args.plan:
        for n in build_plan(spec):
            print(f"  {n.key}  {n.id}  <- {', '.join(n.deps.values())}")
    return 0


def cmd_pool_export(args) -> int:
    from archpool.errors import DataError
    from archpool.pool.plan import PLAN_FILE
    from archpool.pool.results import results_rows, rows_to_csv

    ns = argparse.Namespace(pool=args.pool_dir, size=None, seeds=None, out=None)
    _, out = _load(ns)
    if not (Path(out) / PLAN_FILE).is_file():
        raise DataError(f"{out}: not a pool directory (no {PLAN_FILE}); has this pool been run?")
    Path(args.output).write_text(rows_to_csv(results_rows(Path(out))))
    print(args.output)
    return 0
