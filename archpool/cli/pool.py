"""``archpool run | status | pool``: run whole pools (the product's front door)."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

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
        help="runs in parallel (local and submitit-local executors; threads are split; default: the pool's `jobs`, else 1)",
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
    q = sub.add_parser("show", help="a pool's file, settings and expanded runs (validates it)")
    _pool_args(q, optional=False)
    q.add_argument("--plan", action="store_true", help="also list the stage graph with content keys")
    q.add_argument("--yaml", action="store_true", help="print the pool's YAML file (and its path) instead")
    q.set_defaults(func=cmd_pool_show)
    q = sub.add_parser("copy", help="copy a shipped pool's YAML file to start your own")
    q.add_argument("pool", metavar="NAME", help="a shipped pool (demo, smoke, olmpool, study)")
    q.add_argument("dest", metavar="DEST.yaml", help="the new file (refused if it exists)")
    q.set_defaults(func=cmd_pool_copy)
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


def _is_path_like(arg: str) -> bool:
    """``./smoke``, ``smoke/``, ``out/demo`` or ``demo.yaml`` name a path; a bare ``smoke`` names a shipped pool."""
    return "/" in arg or os.sep in arg or arg.startswith(".") or Path(arg).suffix in (".yaml", ".yml")


def _pool_source(arg: str) -> str:
    """What a POOL argument names: ``shipped`` (a bare shipped pool name wins over a same-named directory),
    ``dir`` (a pool directory with a plan), or ``file``. An unknown bare name is a ConfigError with the
    closest shipped pools."""
    from archpool.cli import did_you_mean
    from archpool.errors import ConfigError
    from archpool.pool.spec import shipped_pools
    from archpool.rundir import POOL_PLAN, pool_plan_path

    shipped = shipped_pools()
    if not _is_path_like(arg) and arg in shipped:
        return "shipped"
    path = Path(arg)
    if path.is_dir() and pool_plan_path(path).is_file():
        return "dir"
    if path.is_file():
        return "file"
    if path.exists() or _is_path_like(arg):
        raise ConfigError("POOL", f"{arg}: neither a pool YAML file nor a pool directory (no {POOL_PLAN}; has it been run?)")
    raise ConfigError(
        "POOL",
        f"{arg!r} is neither a shipped pool nor a pool file or directory{did_you_mean(arg, shipped)}; "
        f"shipped pools: {', '.join(shipped)} (a path: ./{arg})",
    )


def _refuse_overrides(args, pool_dir: Path, spec) -> None:
    """A pool directory runs its recorded plan: --size / --seeds / --out given with it are an error."""
    from archpool.errors import ConfigError

    given = {
        "--size": getattr(args, "size", None),
        "--seeds": " ".join(map(str, getattr(args, "seeds", None) or [])) or None,
        "--out": getattr(args, "out", None),
    }
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        options = " ".join(f"{k} {v}" for k, v in given.items())
        raise ConfigError(
            "/".join(given),
            f"{pool_dir} is a pool directory: it runs its recorded plan (pool {spec.name}, size {spec.size}, "
            f"seeds {spec.seeds}); {' and '.join(given)} apply only to a pool name or YAML file "
            f"(e.g. archpool {getattr(args, 'command', 'run')} {spec.name} {options})",
        )


def _load(args):
    """(PoolSpec, out dir). A pool directory argument reads its plan.json; a bare shipped name is the shipped pool."""
    from archpool.pool.plan import read_plan
    from archpool.pool.spec import load_pool

    source = _pool_source(args.pool)
    if source == "dir":
        spec, _ = read_plan(Path(args.pool))
        _refuse_overrides(args, Path(args.pool), spec)
        return spec, Path(args.pool)
    from archpool.pool.run import default_out  # the runner and the report: imported only where needed

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

    from archpool.errors import ConfigError
    from archpool.pool.checkpoints import ALLOW_DOWNLOAD_ENV, ALLOW_DOWNLOAD_OPTION, check_downloads
    from archpool.pool.spec import harness_downloads

    check_downloads(spec.runs, allow)
    tasks = harness_downloads(spec.eval)
    if tasks and not allow:  # refused before any stage, not when the first eval node reaches lm-eval
        raise ConfigError(
            ALLOW_DOWNLOAD_OPTION,
            f"eval.harness.ruler runs {', '.join(tasks)}, whose data lm-eval downloads; "
            f"pass {ALLOW_DOWNLOAD_OPTION} to fetch it (archpool never downloads otherwise)",
        )
    if allow:
        os.environ[ALLOW_DOWNLOAD_ENV] = "1"


def cmd_status(args) -> int:
    from archpool.pool.status import format_status, pool_status

    _, out = _load(args)
    rows = pool_status(out)
    print(json.dumps(rows, indent=2) if args.json else f"{out}\n" + format_status(rows))
    return 0


def first_sentence(text: str) -> str:
    """The first full sentence of a (possibly multi-line) description, whitespace collapsed."""
    flat = " ".join(text.split())
    match = re.search(r"[.!?](?=\s|$)", flat)
    return flat[: match.end()] if match else flat


def cmd_pool_list(args) -> int:
    import shutil
    import textwrap

    from archpool.pool.spec import load_pool, shipped_pools

    width = max(60, min(shutil.get_terminal_size().columns, 120))
    for name in shipped_pools():
        spec = load_pool(name)
        head = f"{name:<10} {len(spec.runs):>3} runs  size {spec.size:<6} "
        text = first_sentence(spec.description) if spec.description else ""
        print(
            textwrap.fill(text, width=width, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False)
            if text
            else head
        )
    return 0


def _settings(section: Any) -> str:
    """``key=value`` pairs of a pool section (a mapping, or a typed section: the fields it sets
    differently from their defaults), nested mappings inline (JSON-like, compact)."""
    if hasattr(section, "to_dict"):
        defaults = type(section)().to_dict()
        section = {k: v for k, v in section.to_dict().items() if defaults.get(k) != v}
    return "  ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in section.items()) or "(defaults)"


def cmd_pool_show(args) -> int:
    from archpool.pool.plan import build_plan
    from archpool.pool.spec import harness_downloads
    from archpool.pool.stages import backend_module
    from archpool.study import PAPER_EXTENSION_SHARE

    spec, out = _load(args)
    if args.yaml:
        return _print_yaml(spec)
    backend_module(spec.backend)
    short = spec.short_ctx
    print(f"pool {spec.name}: {len(spec.runs)} runs, size {spec.size}, seeds {spec.seeds}, backend {spec.backend}, out {out}")
    print(f"file: {spec.source or '(not recorded)'}")
    print(f"train: {_settings(spec.train)}")
    for ext in spec.extension:
        print(f"extension {ext.name}: {_settings(ext.written)}")
        shares = _shares(spec, ext)
        if shares:
            print(f"  share of the pretraining tokens: {shares} (the paper's extension: {PAPER_EXTENSION_SHARE:.1%})")
    if not spec.extension:
        print("extension: none")
    print(f"eval: {_settings(spec.eval)}")
    downloads = harness_downloads(spec.eval)
    if downloads:
        print(f"  runs only under `archpool run --allow-download`: lm-eval downloads the data of {', '.join(downloads)}")
    print(f"report: {_settings(spec.report)}")
    target_share = _target_share(spec)
    if target_share:
        print(f"  {target_share}")
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


def _shares(spec, ext) -> str:
    """Each rung of a recipe's ladder (or its whole extension) as a share of the pretraining tokens."""
    budgets = ext.budgets or [None]
    parts = []
    for b in budgets:
        share = spec.extension_share(ext, b)
        if share is not None:
            parts.append(f"{share:.1%}" if b is None else f"{b} steps {share:.1%}")
    return ", ".join(parts)


def _target_share(spec) -> str:
    """The report target's rung as a share of the pretraining tokens, beside the paper's."""
    from archpool.study import PAPER_EXTENSION_SHARE

    key = spec.report.target_key
    if key is None or key.budget is None or not spec.extension:
        return ""
    recipe = spec.extension[0]
    share = spec.extension_share(recipe, key.budget)
    if share is None:
        return ""
    return (
        f"target {spec.report.target}: {key.budget} extension steps of {recipe.name} = {share:.1%} of the pretraining tokens "
        f"(the paper: {PAPER_EXTENSION_SHARE:.1%})"
    )


def _print_yaml(spec) -> int:
    """The pool's YAML file as written, after a comment line with its path."""
    from archpool.errors import ConfigError

    path = Path(spec.source) if spec.source else None
    if path is None or not path.is_file():
        raise ConfigError("--yaml", f"pool {spec.name}: its YAML file {spec.source or '(not recorded)'} is not on this machine")
    print(f"# {path}")
    print(path.read_text().rstrip())
    return 0


def cmd_pool_copy(args) -> int:
    from archpool.cli import did_you_mean
    from archpool.errors import ConfigError
    from archpool.io import atomic_write_text
    from archpool.pool.spec import POOLS_DIR, shipped_pools

    shipped = shipped_pools()
    if args.pool not in shipped:
        raise ConfigError(
            "NAME", f"no shipped pool {args.pool!r}{did_you_mean(args.pool, shipped)}; shipped: {', '.join(shipped)}"
        )
    dest = Path(args.dest)
    if dest.suffix not in (".yaml", ".yml"):
        raise ConfigError("DEST", f"{dest}: a pool file ends in .yaml or .yml")
    if dest.exists():
        raise ConfigError("DEST", f"{dest} exists; choose another name or remove it first")
    atomic_write_text(dest, (POOLS_DIR / f"{args.pool}.yaml").read_text())
    print(f"wrote {dest} (a copy of the shipped pool {args.pool}; edit `name:` so its results go to their own out/ directory)")
    return 0


def cmd_pool_export(args) -> int:
    from archpool.pool.plan import require_pool_dir
    from archpool.pool.results import results_rows, rows_to_csv

    ns = argparse.Namespace(pool=args.pool_dir, size=None, seeds=None, out=None)
    _, out = _load(ns)
    Path(args.output).write_text(rows_to_csv(results_rows(require_pool_dir(out))))
    print(args.output)
    return 0
