"""Does more pretraining, or more depth, let sliding windows in Olmo 3's layer order (the full-attention
layer last in each group of four) master retrieval beyond the window? Summarises pools that pretrain the
baseline and that arm for more steps than the demo's 340 (``bench/pools/olmo3_order_<steps>.yaml``) or
with 8 layers instead of 4 (``bench/pools/olmo3_order_8layers.yaml``):

    for p in 680 1360 8layers; do .venv/bin/archpool run bench/pools/olmo3_order_$p.yaml --out out/olmo3_$p; done
    .venv/bin/python -m bench.studies.bench_olmo3_order_steps out/olmo3_680 out/olmo3_1360 out/olmo3_8layers \
        --json bench/results/olmo3_order_steps.json

Per pool and arm, the mean over seeds (and each seed) of: MQAR accuracy at 128 before extension (all
distances, and beyond the window of 64: the mastery rule), retrieval beyond 128 at 1,024 after the RoPE
change alone and after 150 extension steps, and the pretraining loss.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd

from archpool.columns import RESULTS_FILE
from archpool.rundir import pool_plan_path

COLUMNS = {
    "mastery_all": "base_mqar_acc@128",
    "mastery_beyond_window": "base_mqar_acc@128[d>64]",
    "rung0_1024": "mqar_acc@1024[d>128]#ext0",
    "rung150_1024": "mqar_acc@1024[d>128]#ext150",
    "pretrain_loss": "pretrain_loss",
}


def summarise(pool_dir: Path) -> dict[str, dict[str, object]]:
    """``{arch: {"steps", "seeds", <measure>: {"mean", "per_seed"}}}`` of one pool directory."""
    plan = json.loads(pool_plan_path(pool_dir).read_text())
    steps = int(plan["pool"]["train"]["max_steps"])
    df = pd.read_csv(pool_dir / RESULTS_FILE)
    out: dict[str, dict[str, object]] = {}
    for arch, rows in df.groupby("arch", sort=False):
        entry: dict[str, object] = {"steps": steps, "seeds": [int(s) for s in rows["seed"]]}
        for name, column in COLUMNS.items():
            values = [float(v) for v in rows[column]]
            entry[name] = {"mean": round(statistics.fmean(values), 4), "per_seed": [round(v, 4) for v in values]}
        out[str(arch)] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pools", nargs="+", type=Path, help="pool directories (archpool run --out)")
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args(argv)
    result = {p.name: summarise(p) for p in args.pools}
    print("| pool | arm | steps | mastery (all / beyond 64) | 1,024 rung 0 | 1,024 after 150 | pretrain loss |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pool, arms in result.items():
        for arch, e in arms.items():
            m = {k: e[k]["mean"] for k in COLUMNS}  # type: ignore[index]
            print(
                f"| {pool} | {arch} | {e['steps']} | {m['mastery_all']:.3f} / {m['mastery_beyond_window']:.3f} | "
                f"{m['rung0_1024']:.3f} | {m['rung150_1024']:.3f} | {m['pretrain_loss']:.3f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
