"""Evaluation nodes of a finished pool at long lengths: wall time and peak memory per node.

Re-runs eval nodes of a pool output (read-only: results go to a temporary directory) at one length
ratio at a time (``--ratios``, × the pool's long context: MQAR / the pool's tasks) and attention
nodes at ``--attention-ratio`` × the context, with an empty ``ARCHPOOL_CACHE`` (no cached results) (attention statistics: sink rate from short samples,
the long-context statistics at that length). Each (node, length) runs in a fresh process, first
once at 1× the context (imports and one-time costs), then timed at the length; peak RSS growth is
the process's ``VmHWM`` after a reset just before the timed run, less the RSS at that point.

    nice -n 10 .venv/bin/python -m bench.studies.bench_long_eval /path/to/out/demo --json bench/results/long_eval.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = ("base", "qknorm", "gqa", "swa", "short")


def node_dirs(out: Path) -> dict[str, Path]:
    """Node id -> its directory, from the pool's event log."""
    dirs = {}
    for line in (out / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("kind") == "done":
            dirs[e["node"]] = out / "stages" / e["stage"] / e["key"]
    return dirs


def child(out: Path, node_id: str, ratio: float) -> dict:
    """Run one node at ``ratio`` × its long context in this process; seconds and peak RSS growth."""
    import torch

    from archpool.pool.graph import StageContext, node_dir, read_result
    from archpool.pool.plan import read_plan
    from archpool.pool.stages import attention, eval
    from archpool.runtime import peak_rss_mb, reset_peak_rss

    torch.set_num_threads(1)
    pool, nodes = read_plan(out)
    by_id = {n.id: n for n in nodes}
    node = by_id[node_id]
    fn = eval.run if node.stage == "eval" else attention.run
    deps = {name: by_id[d] for name, d in node.deps.items()}
    inputs = {name: node_dir(out, d) for name, d in deps.items()}
    results = {name: read_result(out, d) for name, d in deps.items()}
    configs = {name: d.config for name, d in deps.items()}

    def at(r: float) -> StageContext:
        c = node.config
        if node.stage == "eval":
            c = dataclasses.replace(c, eval=dataclasses.replace(c.eval, length_ratios=[r], base_length_ratios=[r]))
        else:
            c = dataclasses.replace(c, analysis_len=int(round(r * c.long_ctx)))
        return StageContext(Path(tmp), c, inputs, results, configs, None, pool, 1, lambda *a: None)

    with tempfile.TemporaryDirectory() as tmp:
        fn(at(1))  # imports, thread pools, the task generator's first use: out of the measurement
        rss0 = reset_peak_rss()
        t0 = time.perf_counter()
        fn(at(ratio))
        seconds = time.perf_counter() - t0
        peak = peak_rss_mb()
    length = int(round(ratio * node.config.long_ctx))
    return {
        "node": node_id,
        "stage": node.stage,
        "length": length,
        "ratio": ratio,
        "seconds": seconds,
        "peak_growth_mb": peak - rss0,
    }


def measure(out: Path, node_id: str, ratio: float) -> dict:
    """``child`` in a fresh process with an empty ``ARCHPOOL_CACHE`` (no cached attention results)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), ARCHPOOL_CACHE=cache)
        res = subprocess.run(
            [sys.executable, __file__, str(out), "--child", node_id, str(ratio)], capture_output=True, text=True, env=env
        )
    if res.returncode:
        return {"node": node_id, "ratio": ratio, "error": res.stderr.strip().splitlines()[-1][:300]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| node | length | × context | seconds | peak RSS growth MB |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['node']} | | {r['ratio']:g} | failed: {r['error']} | |")
        else:
            lines.append(f"| {r['node']} | {r['length']} | {r['ratio']:g} | {r['seconds']:.2f} | {r['peak_growth_mb']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="a finished pool's output directory")
    ap.add_argument("--arms", nargs="+", default=list(ARMS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-node", default="eval:{arm}_s{seed}:ntk#ext5", help="eval node id template")
    ap.add_argument("--attention-node", default="attention:{arm}_s{seed}:base", help="attention node id template")
    ap.add_argument("--ratios", type=float, nargs="+", default=[8, 16])
    ap.add_argument("--attention-ratio", type=float, default=8)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.out, args.child[0], float(args.child[1]))))
        return
    rows = []
    for arm in args.arms:
        ids = dict(arm=arm, seed=args.seed)
        for ratio in args.ratios:
            rows.append(measure(args.out, args.eval_node.format(**ids), ratio))
        rows.append(measure(args.out, args.attention_node.format(**ids), args.attention_ratio))
        print(table(rows[-len(args.ratios) - 1 :]), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "out": str(args.out), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
