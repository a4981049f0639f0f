"""Replay a finished pool's events.jsonl and compare, at each stage completion, the ETA of measured stage
costs (archpool.pool.progress) with the cost-proportional estimate (elapsed x remaining cost / done cost)
and the true time left.

    python -m bench.studies.bench_pool_eta out/demo
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from archpool.pool.plan import read_plan
from archpool.pool.progress import Progress


def mmss(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    return f"{sign}{int(seconds // 60)}:{int(seconds % 60):02d}"


def main(out: Path) -> None:
    _, nodes = read_plan(out)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()]
    t0 = next(e["t"] for e in events if e["kind"] == "pool_start")
    t1 = next(e["t"] for e in events if e["kind"] == "pool_end")
    progress = Progress(out, nodes, enabled=False)
    progress.complete.clear()  # replay from the start: nothing finished yet
    progress.rates.seconds.clear()
    progress.rates.cost.clear()
    total = sum(progress.cost.values())
    rows = []
    for e in events:
        progress.apply(e)
        if e["kind"] == "done":
            done = sum(progress.cost[k] for k in progress.complete)
            elapsed = e["t"] - t0
            old = elapsed * (total - done) / done if done else float("nan")
            rows.append((elapsed, old, progress.eta(now=e["t"]), t1 - e["t"]))
    print(f"{'elapsed':>8} {'old ETA':>8} {'new ETA':>8} {'actual':>8}")
    for i, r in enumerate(rows):
        if i in (0, 1, 2, 5, 10, 20, 40, 80, 120, 160, 200, 300, 400) or i == len(rows) - 1:
            print(" ".join(f"{mmss(x):>8}" for x in r))
    for frac in (0.1, 0.25, 0.5):
        sel = [r for r in rows if r[0] <= frac * (t1 - t0)]
        old = statistics.median(abs(r[1] - r[3]) for r in sel)
        new = statistics.median(abs(r[2] - r[3]) for r in sel)
        print(f"first {int(frac * 100)}% of wall time: median |error| old {old:.0f} s, new {new:.0f} s ({len(sel)} completions)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
