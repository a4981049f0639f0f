"""``archpool status``: every run of a pool directory and the state of each of its stages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.pool.graph import Node, is_done, is_running, node_dir
from archpool.pool.job import run_nodes, status_path
from archpool.pool.plan import read_plan, require_pool_dir
from archpool.safeload import read_run_status


def stage_label(node: Node) -> str:
    """A node's id without its run: ``pretrain``, ``eval:base``, ``extend@0.5:ntk``."""
    parts = node.id.split(":")
    if node.run is None or len(parts) < 2:
        return node.id
    milestone = "@" + parts[1].split("@", 1)[1] if "@" in parts[1] else ""
    return parts[0] + milestone + "".join(":" + p for p in parts[2:])


STAGE_SYMBOL = {"done": "✓", "running": "▶", "partial": "…", "pending": "·", "failed": "✗"}


def pool_status(out: Path) -> list[dict[str, Any]]:
    """Every run and the state of each of its stages. A run without a ``status.json`` is pending; a
    damaged one is a ``StateError`` naming it (``archpool run`` rewrites it)."""
    out = require_pool_dir(out)
    pool, nodes = read_plan(out)
    rows = []
    for spec in pool.runs:
        status = read_run_status(status_path(out, spec.name)) or {"state": "pending"}
        stages = {}
        for n in run_nodes(nodes, spec.name):
            if n.run is None:
                continue
            if is_done(out, n):
                s = "done"
            elif is_running(out, n):
                s = "running"
            elif status.get("state") == "failed" and status.get("node") == n.id:
                s = "failed"
            elif node_dir(out, n).is_dir():
                s = "partial"
            else:
                s = "pending"
            stages[stage_label(n)] = s
        state = status.get("state", "pending")
        if state == "running" and not any(v == "running" for v in stages.values()):
            state = "interrupted"
        if state == "done" and any(v != "done" for v in stages.values()):  # a marker since damaged or removed
            state = "incomplete"
        if state == "pending" and stages and all(v == "done" for v in stages.values()):
            state = "done"
        rows.append(dict(run=spec.name, state=state, stages=stages, error=status.get("error", "")))
    return rows


def format_status(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        stages = " ".join(f"{k}{STAGE_SYMBOL.get(v, '?')}" for k, v in r["stages"].items())
        line = f"{r['run']:<28} {r['state']:<12} {stages}"
        if r["error"]:
            line += f"\n{'':<28} error: {r['error']}"
        lines.append(line)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join(lines)
