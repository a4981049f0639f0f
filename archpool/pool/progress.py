"""The pool's progress bar: expected cost of the stages still to do, with the ETA. It reads the event
log the workers append to, so it works for local and SLURM executors alike.

The ETA comes from measured stage costs (:class:`StageRates`): every finished node gives its stage kind's
(:func:`stage_kind`) seconds per unit of planned cost (the plan's cost is the node's size: tokens to train at an assumed rate,
or a fraction of its run's pretraining), so the remaining nodes of a kind are priced at the rate measured
for that kind, unmeasured kinds at the rate of all measured nodes, and nothing measured at the plan's
assumed rate. The remaining seconds are divided among the runs that can go in parallel (``jobs``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from archpool.pool.graph import DONE, Node, is_done, node_dir
from archpool.rundir import RUN_METRICS, RUN_RECORD, pool_events_path, stage_dir
from archpool.safeload import load_json, read_json_object


@dataclass
class StageRates:
    """Seconds per unit of planned cost, measured per stage kind from finished nodes."""

    seconds: dict[str, float] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    shared: set[str] = field(default_factory=set)  # pool-level kinds (the data): no guide to the runs' stages

    def observe(self, stage: str, cost: float, seconds: float, shared: bool = False) -> None:
        if cost > 0 and seconds >= 0:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
            self.cost[stage] = self.cost.get(stage, 0.0) + cost
            if shared:
                self.shared.add(stage)

    def rate(self, stage: str) -> float:
        """The stage's measured rate; else the rate over the measured run stages; else 1 (the plan's prior)."""
        if self.cost.get(stage):
            return self.seconds[stage] / self.cost[stage]
        kinds = [k for k in self.cost if k not in self.shared]
        total = sum(self.cost[k] for k in kinds)
        return sum(self.seconds[k] for k in kinds) / total if total else 1.0


def stage_kind(node: Node) -> str:
    """What a node's rate is measured over: its stage, and its phase where a stage has several (an eval
    before extension is a few short lengths; after it, lengths up to 16x)."""
    return f"{node.stage}:{node.phase}" if node.phase else node.stage


@dataclass
class Pending:
    """A node not yet finished: its stage kind, run, planned cost, and (when running) its progress."""

    stage: str
    run: str | None
    cost: float
    fraction: float = 0.0  # of a running training stage, from its metrics log
    running_s: float = 0.0  # seconds since it started (0 if it has not)


def eta_seconds(rates: StageRates, pending: list[Pending], jobs: int) -> float:
    """Expected seconds until every pending node is done: pool-level nodes (no run) one after another,
    then the runs' work shared by ``min(jobs, runs left)`` parallel workers."""
    shared, per_run = 0.0, 0.0
    runs = set()
    for p in pending:
        expected = p.cost * rates.rate(p.stage)
        left = expected * (1.0 - p.fraction) if p.fraction > 0 else expected - p.running_s
        left = max(0.0, left)
        if p.run is None:
            shared += left
        else:
            per_run += left
            runs.add(p.run)
    return shared + per_run / max(1, min(max(1, jobs), len(runs) or 1))


class Progress:
    """A pool-level bar over the expected cost of the stages still to do, with the ETA; it reads
    the event log the workers append to, so it works for local and SLURM executors alike."""

    def __init__(self, out: Path, nodes: list[Node], enabled: bool = True, jobs: int = 1):
        self.out, self.enabled, self.jobs = Path(out), enabled, jobs
        self.cost: dict[str, float] = {}
        self.node: dict[str, Node] = {}
        for n in nodes:
            if n.cost >= self.cost.get(n.key, -1.0):
                self.cost[n.key], self.node[n.key] = n.cost, n
        self.complete = {n.key for n in nodes if is_done(out, n)}
        self.rates = StageRates()
        for k in self.complete:  # finished in an earlier invocation: their DONE files hold the seconds
            self._observe_done_file(self.node[k])
        self.running: dict[str, tuple[str, str, float]] = {}  # key -> (stage, run label, start time)
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
                bar_format="{desc} {percentage:3.0f}%|{bar:24}| {elapsed}{postfix}",
                dynamic_ncols=True,
            )

    def _observe_done_file(self, node: Node) -> None:
        try:
            seconds = float(read_json_object(node_dir(self.out, node) / DONE)["seconds"])
        except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
            return
        self.rates.observe(stage_kind(node), node.cost, seconds, shared=node.run is None)

    def read_events(self) -> None:
        """Apply the event log's lines appended since the last call."""
        path = pool_events_path(self.out)
        if not path.is_file():
            return
        with open(path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            try:
                e = load_json(line, str(path))
                if isinstance(e, dict):
                    self.apply(e)
            except (ValueError, TypeError):  # a damaged line (ConfigError is a ValueError) or field
                continue

    def apply(self, e: dict[str, Any]) -> None:
        """One event: a stage start / done / skip / error, or the pool's start (which names ``jobs``)."""
        key, kind = cast(str, e.get("key")), e.get("kind")  # the fields log_event writes
        if kind == "pool_start" and e.get("jobs"):
            self.jobs = max(1, int(e["jobs"]))
        elif kind == "start":
            self.running[key] = (cast(str, e.get("stage")), cast(str, e.get("run")), float(e.get("t") or time.time()))
        elif kind in ("done", "skip", "error"):
            self.running.pop(key, None)
            if kind != "error" and key in self.cost:
                self.complete.add(key)
            if kind == "done" and key in self.node and e.get("seconds") is not None:
                node = self.node[key]
                self.rates.observe(stage_kind(node), self.cost[key], float(e["seconds"]), shared=node.run is None)

    def pending(self, now: float, fraction: Callable[[str, str], float] | None = None) -> list[Pending]:
        """Every node not complete, with the progress of the running ones (``fraction(stage, key)``)."""
        out = []
        for key, node in self.node.items():
            if key in self.complete:
                continue
            p = Pending(stage_kind(node), node.run, self.cost[key])
            if key in self.running:
                p.running_s = max(0.0, now - self.running[key][2])
                p.fraction = fraction(node.stage, key) if fraction else 0.0
            out.append(p)
        return out

    def eta(self, now: float | None = None, fraction: Callable[[str, str], float] | None = None) -> float:
        return eta_seconds(self.rates, self.pending(time.time() if now is None else now, fraction), self.jobs)

    def poll(self) -> None:
        self.read_events()
        if self.bar is not None:
            from tqdm import tqdm

            def fraction(stage: str, key: str) -> float:
                return _fraction_done(stage_dir(self.out, stage, key))

            n = sum(self.cost[k] for k in self.complete)
            n += sum(self.cost.get(k, 0.0) * fraction(st, k) for k, (st, _, _) in self.running.items())
            self.bar.update(round(n, 1) - self.bar.n)
            eta = tqdm.format_interval(self.eta(fraction=fraction))
            running = " ".join(sorted(f"{st}:{r}" for st, r, _ in self.running.values()))[:60]
            self.bar.set_postfix_str(f"ETA {eta}  {running}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fraction_done(stage_dir: Path) -> float:
    """How far a running training stage is, from its metrics log (0 for other stages)."""
    try:
        train = read_json_object(stage_dir / RUN_RECORD)["train"]
        total = train.get("max_steps") or -(-int(train["max_tokens"]) // int(train["global_batch_tokens"]))
        with open(stage_dir / RUN_METRICS, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            last = f.read().splitlines()[-1]
        return min(1.0, max(0.0, float(load_json(last)["step"] / total)))
    except (OSError, KeyError, ValueError, IndexError, TypeError, AttributeError, ZeroDivisionError):
        return 0.0
