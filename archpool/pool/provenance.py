"""The report's context from a pool directory: the pool file, training budgets, compute time per stage
(from ``events.jsonl``), loss curves (each training node's ``metrics.jsonl``) and chance levels (the eval
nodes' task results)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from archpool.errors import StateError
from archpool.pool.graph import Node, node_dir, read_events, read_marker
from archpool.pool.spec import PoolSpec
from archpool.report.context import ReportContext
from archpool.rundir import RUN_METRICS
from archpool.safeload import load_json, read_json_object
from archpool.typecheck import is_number

MAX_CURVE_POINTS = 200  # per run and phase: enough for a figure, bounded for long runs


def stage_seconds(out: Path, nodes: list[Node]) -> dict[str, float]:
    """Wall time per stage, summed over this plan's nodes (each node's most recent completion)."""
    keys = {n.key: n.stage for n in nodes}
    last: dict[str, float] = {}
    for e in read_events(out):
        key, seconds = e.get("key"), e.get("seconds")
        if e.get("kind") == "done" and isinstance(key, str) and key in keys and isinstance(seconds, (int, float)):
            last[key] = float(seconds)
    per: dict[str, float] = defaultdict(float)
    for key, s in last.items():
        per[keys[key]] += s
    return dict(per)


def _curve(path: Path) -> list[tuple[int, float]]:
    points = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = load_json(line, str(path))
        except ValueError:  # a damaged line (ConfigError is a ValueError)
            continue
        if not isinstance(row, dict):
            continue
        loss = row.get("loss_avg", row.get("loss"))  # mean since the last log
        if isinstance(row.get("step"), int) and isinstance(loss, (int, float)):
            points.append((row["step"], float(loss)))
    stride = max(1, len(points) // MAX_CURVE_POINTS)
    return points[::stride]


def loss_curves(out: Path, nodes: list[Node]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Run → {"pretrain": [(step, loss)], "extend": [...]} for the pool's primary training nodes."""
    curves: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(dict)
    for n in nodes:
        if n.run is None or n.stage not in ("pretrain", "extend") or n.stage in curves[n.run]:
            continue
        points = _curve(node_dir(out, n) / RUN_METRICS)
        if points:
            curves[n.run][n.stage] = points
    return dict(curves)


def chance_levels(out: Path, nodes: list[Node]) -> dict[str, float]:
    """Task → chance accuracy (a fraction), from the first eval node that recorded it."""
    found: dict[str, float] = {}
    for n in nodes:
        if n.stage != "eval":
            continue
        for path in sorted((node_dir(out, n) / "eval" / "tasks").glob("*/*.json")):
            task = path.parent.name
            if task in found:
                continue
            try:
                chance = read_json_object(path).get("chance")
            except ValueError:  # ConfigError: unreadable or not an object
                continue
            if isinstance(chance, (int, float)):
                found[task] = float(chance) / 100.0
        if found:
            break
    return found


def _budget(nodes: list[Node], stage: str) -> str | None:
    configs = [n.plain_config() for n in nodes if n.stage == stage]
    if not configs:
        return None
    if stage == "pretrain":
        train = [c.get("train") or {} for c in configs]
        steps = sorted({t["max_steps"] for t in train if isinstance(t.get("max_steps"), int)})
        tokens = sorted({t["global_batch_tokens"] for t in train if isinstance(t.get("global_batch_tokens"), int)})
        ctx = sorted({c["seq_len"] for c in configs if isinstance(c.get("seq_len"), int)})
        if not (steps and tokens):
            return None
        return (
            f"{'/'.join(map(str, steps))} steps × {'/'.join(f'{t:,}' for t in tokens)} tokens per step, "
            f"context {'/'.join(map(str, ctx))}"
        )
    recipes: dict[str, Any] = {}
    for c in configs:
        r = c.get("recipe") if isinstance(c.get("recipe"), dict) else {}
        if r:
            recipes.setdefault(r.get("name", "?"), r)
    parts = []
    for name, r in recipes.items():
        budget = f"ladder {r['budgets']} steps" if r.get("budgets") else f"{r.get('steps', '?')} steps"
        length = f"length {r['length']:,}" if r.get("length") else f"length ×{r.get('length_ratio', '?')}"
        parts.append(f"{name}: {budget}, RoPE theta ×{r.get('theta_ratio', '?')}, {length}")
    return "; ".join(parts)


COMPUTE_STAGES = ("pretrain", "extend", "eval")


def hardware(out: Path, nodes: list[Node]) -> str:
    """The devices the pool's training and evaluation nodes ran on (each recorded in its ``DONE`` marker),
    with how many nodes each; "" when none recorded one."""
    counts: dict[str, int] = defaultdict(int)
    for n in nodes:
        if n.stage not in COMPUTE_STAGES:
            continue
        try:
            device = read_marker(out, n).get("device")
        except StateError:  # a missing or damaged marker: the node did not finish
            continue
        if isinstance(device, str) and device:
            counts[device[:200]] += 1
    return "; ".join(f"{d} ({k} nodes)" for d, k in sorted(counts.items(), key=lambda t: -t[1]))


def report_context(out: Path, pool: PoolSpec, nodes: list[Node]) -> ReportContext:
    source = Path(pool.source) if pool.source and not pool.source.startswith("<") else None
    yaml_text = ""
    if source is not None and source.is_file():
        yaml_text = source.read_text(errors="replace")
    budgets = [
        (what, b) for what, stage in (("pretraining", "pretrain"), ("extension", "extend")) if (b := _budget(nodes, stage))
    ]
    seeds = sorted({r.seed for r in pool.runs})
    if seeds:
        budgets.insert(0, ("seeds", ", ".join(map(str, seeds))))
    return ReportContext(
        pool_yaml=yaml_text,
        pool_source=str(source or ""),
        stage_seconds=stage_seconds(out, nodes),
        budgets=budgets,
        curves=loss_curves(out, nodes),
        chance=chance_levels(out, nodes),
        hardware=hardware(out, nodes),
        calibration=calibration(out),
        headroom=(float(pool.report.headroom[0]), float(pool.report.headroom[1])),
    )


def calibration(out: Path) -> dict[str, Any] | None:
    """The pool's calibration record (``calibration/calibration.json``), None without one or when it does
    not read whole."""
    from archpool.pool.calibrate import calibration_path

    path = calibration_path(out)
    try:
        record = read_json_object(path) if path.is_file() else None
    except ValueError:
        return None
    return record if record is not None and _calibration_ok(record) else None


def _calibration_ok(record: dict[str, Any]) -> bool:
    """The shape ``archpool.pool.calibrate`` writes: strings, a two-number window and points with a value,
    the baseline's values and mean, and the rule's verdict."""
    window, points = record.get("window"), record.get("points")
    if not all(isinstance(record.get(k), str) for k in ("task", "knob", "target", "column")):
        return False
    if not (isinstance(window, list) and len(window) == 2 and all(is_number(x) for x in window)):
        return False
    return isinstance(points, list) and all(
        isinstance(p, dict)
        and is_number(p.get("value"))
        and isinstance(p.get("baseline"), list)
        and all(is_number(x) for x in p["baseline"])
        and (p.get("baseline_mean") is None or is_number(p.get("baseline_mean")))
        and isinstance(p.get("ok"), bool)
        and isinstance(p.get("all_mastered"), bool)
        and isinstance(p.get("words"), str)
        for p in points
    )
