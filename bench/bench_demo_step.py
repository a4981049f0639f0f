"""The demo's pretraining step, end to end through ``archpool train``: this tree against commit
c0344f3 (before blockwise CPU attention, the task-document cache and the scored-rows LM head), in
alternating processes on the same run config.

    .venv/bin/python bench/bench_demo_step.py --json bench/results/demo_step.json

The run is the demo's baseline, seed 0 (tiny, vocab 1280, 128 tokens × 32 rows per step, 80% MQAR
documents, compiled per block), cut to ``--steps`` steps, at 1 thread (the demo runs 2 jobs on 2
cores). Each process trains from scratch in its own directory; tokens/s is the trainer's own
logged figure over the windows after ``--skip`` steps (compilation and the first steps left out),
data, logging and checkpoints included, as in a pool run. The base tree is a ``git worktree`` of
``--base-ref`` imported through ``PYTHONPATH``; both use this venv, the same data store and a warm
inductor cache. ``head-cold`` is this tree with the task-document cache moved aside (the first run
of each seed), ``head`` with it warm (the other runs of that seed). The final logged losses are
recorded beside the times: the computation is the same up to float rounding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE_REF = "c0344f3"  # the demo's first code: dense-mask attention, no task-document cache, full-vocabulary head


def run_config(steps: int) -> tuple[dict, Path]:
    """The demo baseline's pretraining config (seed 0), and the generated-documents directory of its store."""
    from archpool.data.store import prepare
    from archpool.pool.spec import load_pool

    pool = load_pool("demo")
    run = next(r for r in pool.runs if r.name == "base_s0")
    section = pool.data
    store = prepare(section.data, progress=False, log=lambda *a, **k: None)
    train = {**pool.train, "max_steps": steps, "log_every": 10, "seq_len": run.pretrain_ctx, "seed": run.seed}
    return {"model": run.model.to_dict(), "data": pool.data.to_dict(), "train": train}, store.path / "generated"


def train_steps_per_s(tree: Path, config: Path, out: Path, skip: int, tokens_per_step: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "archpool.cli", "train", str(config), "--out", str(out), "--no-progress"]
    subprocess.run(cmd, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "tokens_per_s" in r]
    windows = [r for r in logged if r["step"] > skip]
    steps = [r["step"] - p["step"] for p, r in zip(logged, logged[1:]) if r["step"] > skip]
    seconds = sum(n * tokens_per_step / r["tokens_per_s"] for n, r in zip(steps, windows))
    return {"steps_per_s": sum(steps) / seconds, "loss": logged[-1]["loss"]}


@contextlib.contextmanager
def moved_aside(directory: Path):
    """The task-document cache out of the way for one run, then back (the run's own writes dropped)."""
    if not directory.exists():
        yield
        return
    keep = directory.with_name(directory.name + ".bench-aside")
    directory.rename(keep)
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        keep.rename(directory)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-ref", default=BASE_REF)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--skip", type=int, default=20, help="steps left out of the timing (compile, warm-up)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    cfg, generated = run_config(args.steps)
    work = Path(tempfile.mkdtemp(prefix="bench-demo-step-"))
    base = work / "base-tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.base_ref], cwd=ROOT, check=True)
    try:
        config = work / "run.yaml"
        config.write_text(yaml.safe_dump(cfg))
        tokens = cfg["train"]["global_batch_tokens"]
        trees = {"base": base, "head-cold": ROOT, "head": ROOT}
        train_steps_per_s(ROOT, config, work / "warmup", args.skip, tokens)  # inductor cache + task documents warm
        results: dict[str, list[dict]] = {k: [] for k in trees}
        for r in range(args.repeats):
            order = list(trees)[r % 3 :] + list(trees)[: r % 3]
            for name in order:
                cold = contextlib.nullcontext() if name != "head-cold" else moved_aside(generated)
                with cold:
                    res = train_steps_per_s(trees[name], config, work / f"{name}-{r}", args.skip, tokens)
                results[name].append(res)
                print(f"round {r} {name}: {1e3 / res['steps_per_s']:.1f} ms/step, loss {res['loss']:.4f}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)

    def ms(name: str) -> list[float]:
        return [1e3 / x["steps_per_s"] for x in results[name]]

    summary = {"base_ref": args.base_ref, "steps": args.steps, "skip": args.skip, "ms_per_step": {k: ms(k) for k in trees}}
    for name in ("head-cold", "head"):
        ratios = [b / h for b, h in zip(ms("base"), ms(name))]
        summary[f"speedup_{name}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    summary["final_loss"] = {k: [x["loss"] for x in v] for k, v in results.items()}
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
