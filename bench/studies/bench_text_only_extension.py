"""Extend a pool's pretrained runs on corpus text only (no task documents in the extension mix), as the
paper extends on a long-document text mix, or with a small task share (``--share``), and score MQAR at
every rung: does a tiny model keep the retrieval it learned in pretraining through such an extension?

    ARCHPOOL_CACHE=... .venv/bin/python -m bench.studies.bench_text_only_extension out/demo \
        --runs base_s0 base_s1 base_s2 qknorm_s0 qknorm_s1 qknorm_s2 short_s0 short_s1 short_s2 \
        --out /tmp/text-ext --json bench/results/text_only_extension.json

Each run's pretraining stage is copied to ``--out`` (the pool is not touched) and extended with the demo's
recipe (theta 4e5 on full-attention layers, to 1,024 tokens, rungs 0, 50 and 150) with the task share of
the extension mix set to 0; MQAR (keys bound once and again) is scored at 128, 512 and 1,024 on each rung.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from archpool.columns import eval_columns
from archpool.eval.api import EvalRequest, evaluate
from archpool.eval.target import load_target
from archpool.study import EVAL_SEED
from archpool.train.config import ExtensionConfig, RunConfig
from archpool.train.extend import extend, load_run_config, rung_dir

BUDGETS = (0, 50, 150)
TASKS = {"mqar": {"pair_every": 4, "buckets": [64, 128, 512]}, "mqar_rebind": {"pair_every": 4, "buckets": [64, 128, 512]}}
SHOWN = ("mqar_acc@128", "mqar_acc@512[d>128]", "mqar_acc@1024[d>128]", "mqar_rebind_acc@1024[d>128]")


def pretrain_dirs(pool: Path) -> dict[str, Path]:
    """run name -> its pretraining stage directory in a pool."""
    out = {}
    for node in (pool / "stages" / "pretrain").glob("*/node.json"):
        out[json.loads(node.read_text())["run"]] = node.parent
    return out


def text_only_extension(source: Path, dest: Path, share: float = 0.0, max_distance: int | None = None) -> Path:
    """Copy a pretraining stage to ``dest`` and extend it with ``share`` of task documents in the mix
    (0: text only), their MQAR queries at most ``max_distance`` tokens from their bindings if given."""
    if not dest.exists():
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns("extend"))
    d = load_run_config(dest).to_dict()
    d["data"]["tasks"]["extension_share"] = share
    name = "text" if share == 0 else f"share{share:g}"
    if max_distance is not None:
        d["data"]["tasks"]["extension_params"] = {"mqar": {"max_distance": max_distance}}
        name += f"-dist{max_distance}"
    ext = ExtensionConfig(
        recipe="ntk",
        name=name,
        new_theta=400000.0,
        full_layers_only=True,
        length=1024,
        micro_batch_size=8,
        budgets=list(BUDGETS),
    )
    extend(dest, ext, run_cfg=RunConfig.from_dict(d), progress=False)
    return dest / "extend" / name


def score(checkpoint: Path, tokenizer: Path, out_dir: Path) -> dict[str, float]:
    request = EvalRequest(
        suites=[],
        tasks=tuple(TASKS),
        lengths=[128, 512, 1024],
        modes=["ll"],
        n_samples=16,
        seed=EVAL_SEED,
        task_params=TASKS,
        out_dir=out_dir,
    )
    return eval_columns(evaluate(load_target(checkpoint, tokenizer=tokenizer), request, progress=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pool", type=Path)
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--share", type=float, default=0.0, help="task share of the extension mix (0: text only)")
    ap.add_argument("--max-distance", type=int, help="MQAR queries of the extension mix at most this far from their bindings")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    dirs = pretrain_dirs(args.pool)
    results: dict[str, dict[str, float]] = {}
    for run in args.runs:
        ext_dir = text_only_extension(dirs[run], args.out / run, args.share, args.max_distance)
        tokenizer = Path(load_run_config(args.out / run).data.store) / "tokenizer.json"
        for b in BUDGETS:
            results[f"{run}#ext{b}"] = score(rung_dir(ext_dir, b), tokenizer, args.out / "eval" / ext_dir.name / run / str(b))
    arms = sorted({r.rsplit("_s", 1)[0] for r in args.runs})
    print("arm      rung  " + "  ".join(SHOWN))
    for arm in arms:
        for b in BUDGETS:
            rows = [v for k, v in results.items() if k.rsplit("_s", 1)[0] == arm and k.endswith(f"#ext{b}")]
            print(f"{arm:8s} {b:4d}  " + "  ".join(f"{statistics.mean(r[c] for r in rows):.3f}" for c in SHOWN))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
