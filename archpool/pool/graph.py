"""Stage graphs with content-addressed outputs.

Every stage output lives in ``POOL_OUT/stages/<stage>/<key>/`` where ``key`` hashes the stage's
name, version, configuration and the keys of its inputs, so equal work is done once (two runs that
differ only in a column nothing trains on, e.g. fp8, share their stages) and changed work gets a
new directory. A ``DONE`` file, written atomically and last, marks a finished stage; a directory
without it is an interrupted attempt that the stage function resumes in place (the trainer
restarts from its last checkpoint). A per-stage ``flock`` keeps two workers off the same stage and
is released by the kernel when a worker is killed.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from archpool.errors import ConfigError, StateError
from archpool.io import append_text, atomic_write_json, sha256_json
from archpool.rundir import pool_events_path, stage_dir
from archpool.runtime import compute_device, peak_rss_mb, process_rank, reset_peak_rss
from archpool.safeload import load_json, read_json_file

if TYPE_CHECKING:
    from archpool.pool.checkpoints import CheckpointRunSpec
    from archpool.pool.nodes import StageConfig, StageResult
    from archpool.pool.spec import PoolSpec, RunSpec

DONE = "DONE"
# Bump a stage's version when its outputs change meaning, to invalidate cached results.
STAGE_VERSIONS = {"data": 1, "pretrain": 1, "extend": 1, "eval": 1, "attention": 1, "collect": 1, "report": 1}


@dataclass
class Node:
    """One stage execution: ``stage`` applied to ``config`` and the outputs of ``deps``. ``run``,
    ``recipe``, ``milestone``, ``rung`` and ``phase`` are the node's references into the pool (what
    plan.json records of it); ``config`` is built from them and the pool's sections."""

    id: str  # readable, unique within a plan: "pretrain:A_s0", "extend:A_s0@0.5:ntk"
    stage: str
    config: StageConfig  # the stage's typed config (archpool.pool.nodes)
    deps: dict[str, str] = field(default_factory=dict)  # input name -> node id
    run: str | None = None  # None for pool-level nodes
    cost: float = 1.0  # relative expected time, for the progress ETA
    key: str = ""
    recipe: str | None = None  # extend nodes and the nodes that read their model
    milestone: float | None = None  # the fraction of pretraining an extension starts from (1: the end)
    rung: int | None = None  # an eval of one rung of an extension ladder
    phase: str | None = None  # an eval or attention node's: "base" (before extension) or "extended"

    def plain_config(self) -> dict[str, Any]:
        """``config`` as plain data (what the key hashes)."""
        return self.config.to_dict()

    def ref(self) -> dict[str, Any]:
        """The node as plan.json records it: identity, references, inputs, cost and key, no config (a
        checkpoint node's model ``content`` key too, which planning hashed from the model's bytes)."""
        refs = dict(recipe=self.recipe, milestone=self.milestone, rung=self.rung, phase=self.phase)
        refs["content"] = self.config.to_dict().get("content")  # to_dict omits an unset content
        return dict(
            id=self.id,
            stage=self.stage,
            run=self.run,
            **{k: v for k, v in refs.items() if v is not None},
            deps=self.deps,
            cost=self.cost,
            key=self.key,
        )

    def to_dict(self) -> dict[str, Any]:
        """The node with its config, as its stage directory's ``node.json`` records it."""
        return {**self.ref(), "config": self.plain_config()}


def assign_keys(nodes: list[Node]) -> None:
    """Content-address every node by its stage, version, config and its inputs' keys (in order)."""
    by_id = {n.id: n for n in nodes}
    for n in nodes:  # nodes are listed in dependency order
        dep_keys = {name: by_id[d].key for name, d in sorted(n.deps.items())}
        config = n.plain_config()
        n.key = sha256_json(dict(stage=n.stage, version=STAGE_VERSIONS.get(n.stage, 1), config=config, deps=dep_keys))[:20]


def node_dir(out: Path, node: Node | dict[str, Any]) -> Path:
    stage, key = (node.stage, node.key) if isinstance(node, Node) else (node["stage"], node["key"])
    return stage_dir(out, stage, key)


def is_done(out: Path, node: Node | dict[str, Any]) -> bool:
    """True when the stage's ``DONE`` marker exists and reads whole (a damaged one counts as not done)."""
    try:
        read_marker(out, node)
    except StateError:
        return False
    return True


def read_result(out: Path, node: Node | dict[str, Any]) -> StageResult:
    """The result recorded in the stage's ``DONE`` marker (:func:`read_marker`)."""
    return cast("StageResult", read_marker(out, node)["result"])


def read_marker(out: Path, node: Node | dict[str, Any]) -> dict[str, Any]:
    """The stage's whole ``DONE`` marker, the one reader of markers: ``StateError`` when it is missing,
    a link, truncated or damaged (not a JSON object naming this stage and key, with a ``result`` object)."""
    path = node_dir(out, node) / DONE
    stage, key = (node.stage, node.key) if isinstance(node, Node) else (node["stage"], node["key"])
    if path.is_symlink() or not path.is_file():
        raise StateError(f"{path}: missing or not a regular file; re-run the pool to recompute the stage")
    try:
        data = read_json_file(path)
    except ConfigError as e:
        raise StateError(f"{path}: truncated or corrupt ({e.message}); re-run the pool to recompute the stage") from None
    if not isinstance(data, dict) or data.get("key") != key or data.get("stage") != stage:
        raise StateError(f"{path}: damaged or not this stage's marker; re-run the pool to recompute the stage")
    if not isinstance(data.get("result"), dict):
        raise StateError(f"{path}: damaged marker (no result object); re-run the pool to recompute the stage")
    return data


def discard_damaged_marker(out: Path, node: Node, log: Callable[[str], None]) -> bool:
    """Remove a ``DONE`` marker that exists but does not read whole, so the stage is recomputed;
    return whether one was removed."""
    path = node_dir(out, node) / DONE
    if not (path.exists() or path.is_symlink()):
        return False
    try:
        read_result(out, node)
        return False
    except StateError as e:
        log(f"[{node.stage}] {e}: recomputing")
        log_event(out, kind="damaged_marker", node=node.id, stage=node.stage, key=node.key, error=str(e))
        path.unlink()
        return True


@dataclass
class StageContext:
    """What a stage function gets: where to write (and resume), its node's typed config, its inputs'
    directories, results and configs, the run's spec and the pool's."""

    out_dir: Path
    config: StageConfig
    inputs: dict[str, Path]  # input name -> finished output dir of that input
    input_results: dict[str, StageResult]
    input_configs: dict[str, StageConfig]  # input name -> that input node's config (from the plan)
    run: RunSpec | CheckpointRunSpec | None  # None for pool-level nodes
    pool: PoolSpec
    threads: int
    log: Callable[[str], None]


StageFn = Callable[[StageContext], "StageResult | None"]


def log_event(out: Path, **event: Any) -> None:
    """Append one JSON line to the pool's event log (O_APPEND writes of one line are atomic)."""
    event["t"] = round(time.time(), 3)
    event["pid"] = os.getpid()
    append_text(pool_events_path(out), json.dumps(event, sort_keys=True, default=str) + "\n")


def read_events(out: Path) -> list[dict[str, Any]]:
    path = pool_events_path(out)
    if not path.is_file():
        return []
    events = []
    for line in path.read_bytes().splitlines():
        try:
            event = load_json(line, str(path))
        except ConfigError:  # a line cut by a kill, or garbage
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


@contextmanager
def stage_lock(path: Path, wait: bool = True) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        flags = fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, flags)
            got = True
        except BlockingIOError:
            got = False
        yield got
    finally:
        os.close(fd)


def is_running(out: Path, node: Node | dict[str, Any]) -> bool:
    """True while some live process holds the stage's lock."""
    lock = node_dir(out, node).with_suffix(".lock")
    if not lock.exists():
        return False
    with stage_lock(lock, wait=False) as got:
        return not got


@dataclass(frozen=True)
class Execution:
    """What running a pool's nodes takes besides the node: the pool directory ``out``, its graph
    (``nodes_by_id``, to find a node's inputs), the pool, and the threads and log its stages get."""

    out: Path
    nodes_by_id: dict[str, Node]
    pool: PoolSpec
    threads: int
    log: Callable[[str], None]

    def execute(self, node: Node, fn: StageFn, run: RunSpec | CheckpointRunSpec | None, label: str | None = None) -> StageResult:
        """Run ``node`` with ``fn`` (:func:`execute_node`)."""
        return execute_node(self, node, fn, run, label)


def execute_node(
    execution: Execution, node: Node, fn: StageFn, run: RunSpec | CheckpointRunSpec | None, label: str | None = None
) -> StageResult:
    """Run ``node`` unless its output is already complete; return its result dict. ``run`` is the run spec
    its stage context carries; ``label`` names the run in the event log (default: the node's run, or ``pool``)."""
    out, log = execution.out, execution.log
    d = node_dir(out, node)
    label = label or node.run or "pool"
    rank = process_rank()
    if rank != 0:
        return _execute_on_secondary_rank(execution, node, fn, run)
    if is_done(out, node):
        log_event(out, kind="skip", node=node.id, stage=node.stage, key=node.key, run=label)
        return read_result(out, node)
    with stage_lock(d.with_suffix(".lock")):
        discard_damaged_marker(out, node, log)
        if is_done(out, node):  # another worker finished it while we waited
            log_event(out, kind="skip", node=node.id, stage=node.stage, key=node.key, run=label)
            return read_result(out, node)
        resumed = d.is_dir() and any(d.iterdir())
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_json(d / "node.json", node.to_dict())
        log_event(out, kind="start", node=node.id, stage=node.stage, key=node.key, run=label, resumed=resumed)
        log(f"[{node.stage}] {'resume' if resumed else 'start'} {node.id} -> {d}")
        t0 = time.time()
        rss0 = reset_peak_rss()  # the node's own peak RSS (the process's, where the peak cannot be reset)
        ctx = _context(execution, node, run)
        try:
            result = fn(ctx) or {}
        except BaseException as e:
            log_event(
                out, kind="error", node=node.id, stage=node.stage, key=node.key, run=label, error=f"{type(e).__name__}: {e}"
            )
            raise
        seconds = round(time.time() - t0, 3)
        peak = peak_rss_mb()
        mem = dict(peak_rss_mb=None if peak is None else round(peak, 1), rss_start_mb=None if rss0 is None else round(rss0, 1))
        done = dict(node=node.id, stage=node.stage, key=node.key, seconds=seconds, device=compute_device(), **mem, result=result)
        atomic_write_json(d / DONE, done)
        log_event(out, kind="done", node=node.id, stage=node.stage, key=node.key, run=label, seconds=seconds, **mem)
        log(f"[{node.stage}] done {node.id} in {seconds:.1f}s, peak RSS {mem['peak_rss_mb']} MB")
        return result


def _context(execution: Execution, node: Node, run: RunSpec | CheckpointRunSpec | None) -> StageContext:
    """What the stage function of ``node`` gets: its directory, config and its finished inputs."""
    out = execution.out
    deps = {name: execution.nodes_by_id[i] for name, i in node.deps.items()}
    return StageContext(
        out_dir=node_dir(out, node),
        config=node.config,
        inputs={name: node_dir(out, dn) for name, dn in deps.items()},
        input_results={name: read_result(out, dn) for name, dn in deps.items()},
        input_configs={name: dn.config for name, dn in deps.items()},
        run=run,
        pool=execution.pool,
        threads=execution.threads,
        log=execution.log,
    )


DISTRIBUTED_STAGES = {"pretrain", "extend"}  # stages whose functions run on every torchrun rank


def _execute_on_secondary_rank(
    execution: Execution, node: Node, fn: StageFn, run: RunSpec | CheckpointRunSpec | None
) -> StageResult:
    """Under torchrun (``--gpus-per-run N``): ranks > 0 join the training stages' collectives and
    wait for rank 0 to finish the others; only rank 0 writes markers, events and statuses."""
    out = execution.out
    deps = [execution.nodes_by_id[i] for i in node.deps.values()]
    while not all(is_done(out, dn) for dn in deps):  # rank 0 writes its inputs' markers
        time.sleep(0.5)
    if node.stage in DISTRIBUTED_STAGES and not is_done(out, node):
        return fn(_context(execution, node, run)) or {}
    while not is_done(out, node):  # rank 0 recomputes a damaged marker
        time.sleep(1.0)
    return read_result(out, node)


def format_exception(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))
