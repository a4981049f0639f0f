"""The eval stage of a pool run: task suites (or a task list) at the pool's lengths on the pretrained
model (``phase: base``), an extended one, or one rung of an extension ladder (``rung``: its
checkpoint after that many steps); LongPPL / perplexity where asked. Columns follow
:mod:`archpool.columns`.

Every finished cell (a task × length × mode, an lm-eval or HELMET cell, LongPPL's key tokens) is kept as
it finishes in the pool's ``cells/`` (:func:`cells_dir`), shared by all its eval nodes: a file per cell
named by its cache key, which hashes the whole model and everything the cell's score depends on, written
atomically. A node stopped midway resumes without scoring a finished cell again, and a node whose key
changed with one task's settings (a new node directory) scores only the cells those settings reach."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.columns import eval_columns
from archpool.io import atomic_path, atomic_write_json, owned_path, sha256_json
from archpool.pool.graph import StageContext, stage_lock
from archpool.pool.nodes import EvalConfig, EvalResult
from archpool.pool.stages import checkpoint, data
from archpool.rundir import pool_cells_dir, pool_exports_dir, stage_pool_dir

if TYPE_CHECKING:
    from archpool.eval.harness import RulerSettings
    from archpool.eval.helmet_data import HelmetDataSettings
    from archpool.eval.target import LoadedModel

STAGE_KEYS = ("tasks", "aggregate", "longppl", "short")  # what eval.json holds of an evaluation, in this order
CELLS = "cells"  # an eval node directory's own cells (a directory outside a pool's layout keeps its cells there)


def run(ctx: StageContext) -> EvalResult:
    from archpool.eval.api import evaluate
    from archpool.eval.target import load_target

    c = ctx.config
    assert isinstance(c, EvalConfig)
    cells = cells_dir(ctx)  # the pool's cells, the node's earlier own cells adopted into them once
    request = c.eval.request(c.base, c.long_ctx, ctx.out_dir / "eval", cells)
    assert request.lengths is not None  # a phase's request always names its lengths
    store = data.store(ctx)
    tok = Path(store.path) / "tokenizer.json" if store is not None else None
    # a checkpoint run's model; else the input's (one rung of a ladder: its checkpoint in the extension run)
    model = checkpoint.model_path(ctx) if c.checkpoint is not None else checkpoint.extended_model(ctx, c.rung)
    target = load_target(model, tokenizer=tok)
    result: dict[str, Any] = {}
    if request.tasks or request.suites:
        res = evaluate(target, request, store=store, progress=False)
        result = {k: res[k] for k in STAGE_KEYS if k in res}
    metrics = eval_columns(result)
    harness = c.eval.harness
    if harness is not None and (harness.ruler is not None or harness.helmet_data is not None):
        model_dir = hf_dir(ctx, target)  # exported once for both suites
        lengths = list(request.lengths)
        if harness.ruler is not None:  # lm-evaluation-harness's RULER (archpool.eval.harness)
            result["harness"] = harness_ruler(ctx, harness.ruler, model_dir, lengths, cells)
            metrics.update(result["harness"]["columns"])
        if harness.helmet_data is not None:  # HELMET's own data (archpool.eval.helmet_data)
            result["helmet_data"] = helmet_data(ctx, harness.helmet_data, model_dir, lengths, cells)
            metrics.update(result["helmet_data"]["columns"])
    atomic_write_json(ctx.out_dir / "eval.json", result)
    return {"metrics": metrics, "lengths": list(request.lengths)}


def harness_ruler(
    ctx: StageContext, settings: RulerSettings, model_dir: Path, lengths: list[int], cells: Path | None = None
) -> dict[str, Any]:
    """lm-eval's RULER tasks of ``settings`` (``eval.harness.ruler``) on the node's model (``model_dir``, from
    :func:`hf_dir`), at their own lengths or the phase's, its cells in ``cells`` (default :func:`cells_dir`).
    Results and the per-sample log go to the node's ``harness/``; its columns join the node's metrics."""
    from archpool.eval.harness import harness_request_from, run_ruler
    from archpool.pool.checkpoints import downloads_allowed

    cells = cells or cells_dir(ctx)
    request = harness_request_from(settings, lengths, ctx.out_dir / "harness", cells, downloads_allowed())
    return run_ruler(model_dir, request, log=ctx.log)


def helmet_data(
    ctx: StageContext, settings: HelmetDataSettings, model_dir: Path, lengths: list[int], cells: Path | None = None
) -> dict[str, Any]:
    """HELMET's datasets of ``settings`` (``eval.harness.helmet_data``; its ``path`` relative to the pool file)
    on the node's model (``model_dir``, from :func:`hf_dir`), at their own lengths or the phase's, its cells in
    ``cells`` (default :func:`cells_dir`). Results and the per-sample log go to the node's ``helmet_data/``;
    its columns join the node's metrics."""
    from archpool.eval.helmet_data import request_from, run_helmet_data

    cells = cells or cells_dir(ctx)
    request = request_from(settings, lengths, ctx.pool.base_dir, ctx.out_dir / "helmet_data", cells)
    return run_helmet_data(model_dir, request, log=ctx.log)


def cells_dir(ctx: StageContext) -> Path:
    """Where the node's cells are kept: the pool's ``cells/`` (:func:`archpool.rundir.pool_cells_dir`) for a
    node of a pool, after moving into it any cell an eval node directory of the pool holds in its own
    ``cells/`` (:func:`adopt_node_cells`); the node's own ``cells/`` for a directory outside a pool's layout."""
    out = stage_pool_dir(ctx.out_dir)
    if out is None:
        return owned_path(ctx.out_dir, CELLS)
    cells = pool_cells_dir(out)
    for own in sorted(ctx.out_dir.parent.glob(f"*/{CELLS}")):
        adopt_node_cells(own, cells)
    return cells


def adopt_node_cells(own: Path, cells: Path) -> None:
    """Move the cell files of an eval node's own ``cells/`` into the pool's ``cells/`` (a hard link, or a
    copy where the file system has none, then the node's name removed), keeping an entry the pool already
    has; ``own`` is removed once empty. Links and temporary files are left alone. Safe while another
    worker does the same: each step is one rename-like file operation, and a cell file is whole by name."""
    import contextlib
    import os
    import shutil

    if own.is_symlink() or own.parent.is_symlink() or not own.is_dir() or not cells.is_dir():
        return
    for f in own.iterdir():
        if f.name.startswith(".") or f.suffix != ".json" or f.is_symlink() or not f.is_file():
            continue
        dest = cells / f.name
        try:
            os.link(f, dest)
        except FileNotFoundError:  # another worker moved it first
            continue
        except FileExistsError:  # the pool has this cell
            pass
        except OSError:  # no hard links here: a whole copy, renamed into place
            try:
                with atomic_path(dest) as tmp:
                    shutil.copyfile(f, tmp)
            except FileNotFoundError:
                continue
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
    with contextlib.suppress(OSError):
        own.rmdir()


def hf_dir(ctx: StageContext, target: LoadedModel) -> Path:
    """The node's model as a Hugging Face directory: one as it is; an archpool checkpoint exported with the
    tokenizer it was evaluated with, once per model and tokenizer into the pool's ``hf/<key>/``
    (:func:`archpool.rundir.pool_exports_dir`; the node's own ``hf/`` outside a pool's layout). Every eval
    node of that model reads the one export: no model is exported twice, and the external backends' cells,
    keyed by the export's bytes, serve them all."""
    if target.kind == "hf":
        return Path(target.checkpoint)
    from archpool.model.hf import export_hf

    out = stage_pool_dir(ctx.out_dir)
    if out is None:  # replace: a node run again after a failure finds its own earlier export
        return Path(export_hf(target.checkpoint, ctx.out_dir / "hf", tokenizer=target.tokenizer, replace=True))
    key = sha256_json({"model": target.model_hash, "tokenizer": target.tokenizer_hash})[:24]
    export = pool_exports_dir(out) / key
    with stage_lock(export.with_suffix(".lock")):  # two workers evaluating one model export it once
        if not (export / "config.json").is_file():  # an export takes its place whole, or not at all
            export_hf(target.checkpoint, export, tokenizer=target.tokenizer, replace=True)
    return export
