"""The pool's progress bar: expected cost of the stages still to do, with the ETA. It reads the event
log the workers append to, so it works for local and SLURM executors alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from archpool.pool.graph import Node, is_done


class Progress:
    """A pool-level bar over the expected cost of the stages still to do, with the ETA; it reads
    the event log the workers append to, so it works for local and SLURM executors alike."""

    def __init__(self, out: Path, nodes: list[Node], enabled: bool = True):
        self.out, self.enabled = Path(out), enabled
        self.cost: dict[str, float] = {}
        for n in nodes:
            self.cost[n.key] = max(self.cost.get(n.key, 0.0), n.cost)
        self.complete = {n.key for n in nodes if is_done(out, n)}
        self.running: dict[str, str] = {}
        self.offset = 0
        self.bar = None
        if enabled:
            from tqdm import tqdm

            total = sum(self.cost.values())
            initial = sum(self.cost[k] for k in self.complete)
            tty = sys.stderr.isatty()
            self.bar = tqdm(
                total=round(total, 1),
                initial=round(initial, 1),
                unit="cost",
                desc="pool",
                file=sys.stderr,
                mininterval=0.5 if tty else 30.0,
                bar_format="{desc} {percentage:3.0f}%|{bar:24}| {elapsed}<{remaining} {postfix}",
                dynamic_ncols=True,
            )

    def poll(self) -> None:
        path = self.out / "events.jsonl"
        if not path.is_file():
            return
        with open(path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            key = e.get("key")
            if e.get("kind") == "start":
                self.running[key] = (e.get("stage"), e.get("run"))
            elif e.get("kind") in ("done", "skip", "error"):
                self.running.pop(key, None)
                if e["kind"] != "error" and key in self.cost:
                    self.complete.add(key)
        if self.bar is not None:
            n = sum(self.cost[k] for k in self.complete)
            n += sum(self.cost.get(k, 0.0) * _fraction_done(self.out / "stages" / st / k) for k, (st, _) in self.running.items())
            self.bar.update(round(n, 1) - self.bar.n)
            self.bar.set_postfix_str(" ".join(sorted(f"{st}:{r}" for st, r in self.running.values()))[:60], refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fraction_done(stage_dir: Path) -> float:
    """How far a running training stage is, from its metrics log (0 for other stages)."""
    try:
        record = json.loads((stage_dir / "run_config.json").read_text())
        train = record["train"]
        total = train.get("max_steps") or -(-int(train["max_tokens"]) // int(train["global_batch_tokens"]))
        with open(stage_dir / "metrics.jsonl", "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            last = f.read().splitlines()[-1]
        return min(1.0, json.loads(last)["step"] / total)
    except (OSError, KeyError, ValueError, IndexError, TypeError, ZeroDivisionError):
        return 0.0
