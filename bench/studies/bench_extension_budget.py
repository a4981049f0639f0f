"""How much extension training the demo's baseline needs: MQAR accuracy at the extended length vs
extension tokens (a measured curve; its last run is in ``bench/results/extension_budget.json``).

Takes a pool (default: the shipped ``demo``), keeps one architecture (default ``base``), replaces
its extension by the same recipe at several token budgets, and runs it as a pool of its own (every
stage cached; re-running resumes). Prints one row per budget: accuracy at the extended length over
all distances, beyond the pretraining context, and two-hop chains, mean ± sd over seeds, plus the
pre-extension accuracy at the pretraining length (the mastery rule's number).

    python -m bench.studies.bench_extension_budget --budgets 20480,51200,102400,204800,409600 --seeds 0 1 2 \\
        --out out/extension-budget --json bench/results/extension_budget.json
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import statistics
import sys
import time
from pathlib import Path


def budget_pool(pool: str, arch: str, budgets: list[int], seeds: list[int]) -> dict:
    """The pool dict: ``arch`` only, its primary recipe repeated at each token budget."""
    import yaml

    from archpool.pool.spec import resolve_pool_path

    data = yaml.safe_load(resolve_pool_path(pool).read_text())
    runs = [r for r in data.get("runs") or [] if r.get("name") == arch]
    if not runs:
        raise SystemExit(f"pool {pool!r} has no run named {arch!r}")
    base = dict((data.get("extension") or [{"name": "ntk", "recipe": "ntk"}])[0])
    exts = []
    for t in budgets:
        r = copy.deepcopy(base)
        r.update(name=f"{base.get('recipe', 'ntk')}_{t}", tokens=int(t))
        exts.append(r)
    data.update(name=f"{data['name']}-extension-budget", runs=runs, seeds=seeds, extension=exts)
    data.pop("factorial", None)
    data["attention"] = {**(data.get("attention") or {}), "enabled": False}
    data["eval"] = {**data["eval"], "suites": []}
    return data


def summarise(out: Path, budgets: list[int], recipe: str, length: int, pre_len: int, far: int) -> list[dict]:
    rows = list(csv.DictReader((out / "results.csv").open()))

    def col(name: str) -> tuple[float | None, float | None, int]:
        xs = [float(r[name]) for r in rows if r.get(name) not in (None, "")]
        if not xs:
            return None, None, 0
        return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)

    pre = col(f"base_mqar_acc@{pre_len}")
    # 0 tokens: the pretrained model at the extended length, RoPE unchanged
    table = [
        {
            "tokens": 0,
            "seeds": col(f"base_mqar_acc@{length}")[2],
            "acc": col(f"base_mqar_acc@{length}")[:2],
            "acc_far": col(f"base_mqar_acc@{length}[d>{far}]")[:2],
            "chain": col(f"base_mqar_chain_chain@{length}")[:2],
            "pre_acc": pre[:2],
        }
    ]
    for i, t in enumerate(budgets):
        prefix = "" if i == 0 else f"{recipe}_{t}_"
        table.append(
            {
                "tokens": t,
                "seeds": col(f"{prefix}mqar_acc@{length}")[2],
                "acc": col(f"{prefix}mqar_acc@{length}")[:2],
                "acc_far": col(f"{prefix}mqar_acc@{length}[d>{far}]")[:2],
                "chain": col(f"{prefix}mqar_chain_chain@{length}")[:2],
                "pre_acc": pre[:2],
            }
        )
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="demo")
    p.add_argument("--arch", default="base")
    p.add_argument(
        "--budgets",
        default="20480,51200,102400,204800,409600",
        help="extension tokens, comma-separated (each at least a few optimizer steps)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="out/extension-budget")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", help="write the table here")
    a = p.parse_args(argv)
    from archpool.pool.run import run_pool
    from archpool.pool.spec import parse_pool

    budgets = [int(x) for x in a.budgets.split(",")]
    data = budget_pool(a.pool, a.arch, budgets, a.seeds)
    spec = parse_pool(data, source=f"{a.pool} (extension budgets)")
    out = Path(a.out)
    t0 = time.time()
    rc = run_pool(spec, out, jobs=a.jobs, progress=False)
    wall = time.time() - t0
    first = spec.extension[0]
    length = first.length(spec.long_ctx)
    recipe = first.written.get("recipe", "ntk")
    table = summarise(out, budgets, recipe, length, spec.runs[0].pretrain_ctx, spec.long_ctx)

    def f(x):
        return "—" if x[0] is None else f"{x[0]:.3f} ± {x[1]:.3f}"

    print(
        f"{a.pool}/{a.arch}, seeds {a.seeds}: MQAR accuracy at {length} after extension (mean ± sd over seeds); wall {wall:.0f} s"
    )
    print(
        f"| extension tokens | acc@{length} | acc@{length}, d>{spec.long_ctx} | two-hop chains | acc@{spec.runs[0].pretrain_ctx} before |"
    )
    print("|---:|---:|---:|---:|---:|")
    for r in table:
        print(f"| {r['tokens']:,} | {f(r['acc'])} | {f(r['acc_far'])} | {f(r['chain'])} | {f(r['pre_acc'])} |")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps(
                {"pool": a.pool, "arch": a.arch, "seeds": a.seeds, "length": length, "wall_s": wall, "rows": table}, indent=2
            )
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
