"""A pool run (``OUT/runs/<run>/``) as a model: the stage directory that holds it, for
:func:`archpool.rundir.resolve_target` (``archpool.load``, ``export-hf``, ``eval``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from archpool.errors import CheckpointError
from archpool.pool.graph import is_done, node_dir
from archpool.pool.job import run_nodes
from archpool.pool.plan import read_plan
from archpool.rundir import PoolRunLookup, pick_extension


def _pool_run_stage(run_dir: Path, pretrained: bool, extension: str | None) -> tuple[Path, str]:
    """A pool's ``runs/<run>/``: the stage directory of its extended model (or its pretraining)."""
    out, run = run_dir.parent.parent, run_dir.name
    _, nodes = read_plan(out)
    mine = run_nodes(nodes, run)
    pre = [n for n in mine if n.stage == "pretrain" and is_done(out, n)]
    ext = {n.id: n for n in mine if n.stage == "extend" and is_done(out, n)}
    if not pretrained:
        full = {k: n for k, n in ext.items() if n.milestone is None or n.milestone >= 1.0}
        chosen = pick_extension(full if extension is None and full else ext, extension, run_dir)
        if chosen is not None:
            return node_dir(out, chosen[1]), f"pool run {run!r}, extended model (node {chosen[0]})"
    if not pre:
        raise CheckpointError(f"{run_dir}: pool run {run!r} has no finished pretraining stage yet")
    return node_dir(out, pre[0]), f"pool run {run!r}, final pretraining milestone (node {pre[0].id})" + (
        "" if pretrained else "; no finished extension"
    )


def pool_run_lookup(pretrained: bool = False, extension: str | None = None) -> PoolRunLookup:
    """``resolve_target``'s lookup of a pool run's model: its extended model, or with ``pretrained`` its
    pretraining stage."""
    return partial(_pool_run_stage, pretrained=pretrained, extension=extension)
