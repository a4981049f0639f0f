"""A pool's stage graph: data → pretrain (with milestone checkpoints) → extend → eval → attention.

Per run and extension recipe:

    data ─┬─ pretrain:R ─┬─ extend:R:ntk ──┬─ eval:R:ntk
          │              │                 └─ attention:R:ntk
          │              ├─ extend:R@0.5:ntk ─ eval:R@0.5:ntk      (one per milestone)
          │              ├─ eval:R:base                            (before extension)
          │              └─ attention:R:base                       (before extension)

A checkpoint run (:mod:`archpool.pool.checkpoints`) is measured, not trained: it has no data,
pretrain or extend node, only ``eval:R`` / ``attention:R`` on its checkpoint and ``eval:R:base`` /
``attention:R:base`` on its before-extension twin, keyed by the models' bytes
(:func:`checkpoint_nodes`). Its columns are named as a trained run's.

A recipe with a ladder of ``budgets`` gets one eval node per rung instead (``eval:R:ntk#ext5``
reads the extension run's checkpoint after 5 steps); its columns carry the rung (``#ext5``) and
:mod:`archpool.pool.results` adds their mean over the ladder (``#ladder_mean``). A recipe with
``archs:`` extends only those architectures.

Pre-extension nodes (``:base``) measure the pretrained checkpoint with the same settings and lengths
as the extended model's, so every diagnostic can be asked "does it predict the post-extension
target before paying for extension?" (their columns carry the ``base_`` prefix).

``data`` is shared by the pool. The pool-level tail (``results.csv`` → analysis → report) is
rebuilt from whatever finished, so a failed run shows up in it instead of blocking it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from archpool.attention.settings import Settings as AttentionSettings
from archpool.columns import RUNG_SEP, affixes, rung_label
from archpool.data.section import DataSection
from archpool.errors import ConfigError, DataError, StateError
from archpool.io import atomic_write_json, sha256_file
from archpool.pool.checkpoints import CheckpointRunSpec, content_key
from archpool.pool.graph import Node, assign_keys
from archpool.pool.sections import EvalSettings
from archpool.pool.spec import PoolSpec, RunSpec, pool_model_config
from archpool.rundir import POOL_PLAN, pool_plan_path
from archpool.safeload import read_record
from archpool.train.config import ExtensionConfig, TrainConfig

RUN_STAGES = ("pretrain", "extend", "eval", "attention")


def _pretrain_tokens(train: dict[str, Any]) -> float:
    if train.get("max_tokens"):
        return float(train["max_tokens"])
    steps = train.get("max_steps") or train.get("steps") or 100
    return float(steps * (train.get("global_batch_tokens") or 8192))


def _extension_tokens(recipe: dict[str, Any], train: dict[str, Any]) -> float:
    if recipe.get("tokens"):
        return float(recipe["tokens"])
    if recipe.get("steps"):  # toy recipes
        return float(recipe["steps"]) * 8192
    return float(recipe.get("token_fraction", 0.07)) * _pretrain_tokens(train)


# rough CPU throughputs (tokens/s), only to weigh stages against each other in the ETA
_PRETRAIN_RATE, _EXTEND_RATE = 10_000.0, 7_000.0


def build_plan(pool: PoolSpec, runs: list[RunSpec] | None = None) -> list[Node]:
    """All nodes of ``runs`` (default: every run), in dependency order, with content keys."""
    runs = pool.runs if runs is None else runs
    real = pool.backend == "real"
    data_cost = 0.5 if not real or pool.data.synthetic is not None else 20.0
    trained = [r for r in runs if not isinstance(r, CheckpointRunSpec)]
    nodes: list[Node] = []
    if trained or not runs:
        nodes.append(Node(id="data", stage="data", config=dict(data=pool.data, backend=pool.backend), cost=data_cost))
    pre_cost = _pretrain_tokens(pool.train) / _PRETRAIN_RATE
    for run in runs:
        if isinstance(run, CheckpointRunSpec):
            nodes.extend(checkpoint_nodes(pool, run))
            continue
        pre = Node(
            id=f"pretrain:{run.name}",
            stage="pretrain",
            config=dict(
                model=run.model,
                seq_len=run.pretrain_ctx,
                seed=run.seed,
                init_seed=run.init_seed,
                train=pool.pretrain_config(run.pretrain_ctx, run.seed) if real else pool.train,
                milestones=pool.milestones,
            ),
            deps={"data": "data"},
            run=run.name,
            cost=pre_cost,
        )
        nodes.append(pre)
        evaluate = pool.eval.enabled
        if evaluate and pool.eval.base:
            nodes.append(
                Node(
                    id=f"eval:{run.name}:base",
                    stage="eval",
                    config=dict(eval=pool.eval, phase="base", seq_len=run.pretrain_ctx, long_ctx=pool.long_ctx),
                    deps={"model": pre.id, "data": "data"},
                    run=run.name,
                    cost=max(0.1, 0.05 * pre_cost),
                )
            )
        if evaluate and pool.eval.base and pool.attention_enabled and pool.extension:
            nodes.append(
                Node(
                    id=f"attention:{run.name}:base",
                    stage="attention",
                    config=dict(
                        attention=pool.attention,
                        seq_len=run.pretrain_ctx,
                        long_ctx=pool.long_ctx,
                        analysis_len=pool.extension[0].length(pool.long_ctx),
                    ),
                    deps={"model": pre.id, "data": "data"},
                    run=run.name,
                    cost=max(0.1, 0.03 * pre_cost),
                )
            )
        for milestone in [*pool.milestones, 1.0]:
            for r_i, recipe in enumerate(pool.extension):
                if not recipe.applies(run.arch):
                    continue
                primary = milestone == 1.0 and r_i == 0
                tag = f"{run.name}{'' if milestone == 1.0 else f'@{milestone:g}'}:{recipe.name}"
                ext = Node(
                    id=f"extend:{tag}",
                    stage="extend",
                    config=dict(
                        recipe=recipe.stage_config(),
                        milestone=milestone,
                        seed=run.seed,
                        long_ctx=pool.long_ctx,
                        pretrain_ctx=run.pretrain_ctx,
                    ),
                    deps={"model": pre.id, "data": "data"},
                    run=run.name,
                    cost=_extension_tokens(recipe.written, pool.train) / _EXTEND_RATE,
                )
                nodes.append(ext)
                rungs = recipe.budgets or [None]
                for rung in rungs if evaluate else []:
                    config = dict(eval=pool.eval, phase="extended", seq_len=run.pretrain_ctx, long_ctx=pool.long_ctx)
                    if rung is not None:
                        config["rung"] = rung
                    nodes.append(
                        Node(
                            id=f"eval:{tag}" + ("" if rung is None else f"{RUNG_SEP}{rung_label(rung)}"),
                            stage="eval",
                            config=config,
                            deps={"model": ext.id, "base": pre.id, "data": "data"},
                            run=run.name,
                            cost=max(0.1, 0.1 * pre_cost / len(rungs)),
                        )
                    )
                if primary and pool.attention_enabled:
                    nodes.append(
                        Node(
                            id=f"attention:{tag}",
                            stage="attention",
                            config=dict(
                                attention=pool.attention,
                                seq_len=run.pretrain_ctx,
                                long_ctx=pool.long_ctx,
                                analysis_len=recipe.length(pool.long_ctx),
                            ),
                            deps={"model": ext.id, "base": pre.id, "data": "data"},
                            run=run.name,
                            cost=max(0.1, 0.03 * pre_cost),
                        )
                    )
    assign_keys(nodes)
    return nodes


def checkpoint_nodes(pool: PoolSpec, run: CheckpointRunSpec) -> list[Node]:
    """Eval and attention of a checkpoint run: ``eval:R`` / ``attention:R`` on its checkpoint (plain
    columns, as a trained run's extended model) and ``eval:R:base`` / ``attention:R:base`` on its
    ``pretrained`` twin (``base_`` columns). Configs carry the models' content keys, not their paths
    (the stage finds the path in the run spec), so equal bytes are one cached result."""
    nodes: list[Node] = []
    evaluate = pool.eval.enabled
    attend = pool.attention_enabled
    long_lengths = pool.eval.lengths_at(False, pool.long_ctx)
    texts = {Path(t).name: sha256_file(t) for t in pool.texts}
    for which, ref in run.refs.items():
        base = which == "pretrained"
        suffix = ":base" if base else ""
        common = dict(checkpoint=which, content=content_key(ref), seq_len=run.pretrain_ctx, long_ctx=pool.long_ctx)
        if evaluate:
            nodes.append(
                Node(
                    id=f"eval:{run.name}{suffix}",
                    stage="eval",
                    config=dict(common, eval=pool.eval, phase="base" if base else "extended"),
                    run=run.name,
                    cost=1.0,
                )
            )
        if attend:
            nodes.append(
                Node(
                    id=f"attention:{run.name}{suffix}",
                    stage="attention",
                    config=dict(
                        common,
                        attention=pool.attention,
                        analysis_len=max(long_lengths),
                        texts=texts,
                        text="texts" if texts else "filler",
                    ),
                    run=run.name,
                    cost=0.5,
                )
            )
    return nodes


def result_columns(node: Node | dict, primary_recipe: str) -> tuple[str, str]:
    """(prefix, suffix) under which a node's metrics enter its run's row of results.csv.

    The primary recipe at the end of pretraining gives the plain metric names; the pre-extension
    evaluation gets ``base_``; other recipes ``<recipe>_``; milestone extensions ``@<fraction>``.
    """
    node_id = node.id if isinstance(node, Node) else node["id"]
    tag, _, recipe = node_id.split(":", 1)[1].partition(":")
    recipe, _, rung = recipe.partition(RUNG_SEP)
    prefix, suffix = affixes(recipe, tag.partition("@")[2], primary_recipe)
    return prefix, suffix + (f"{RUNG_SEP}{rung}" if rung else "")


PLAN_SCHEMA = 2  # plan.json's layout: node configs as their typed sections' mappings


def write_plan(out: Path, pool: PoolSpec, nodes: list[Node]) -> None:
    atomic_write_json(pool_plan_path(out), dict(schema=PLAN_SCHEMA, pool=pool.to_dict(), nodes=[n.to_dict() for n in nodes]))


def section_types(backend: str) -> dict[str, Callable[[Any], Any]]:
    """How a node's config keys parse back into typed sections. ``train`` and ``recipe`` are the
    real backend's ``TrainConfig`` / ``ExtensionConfig``; another backend gets its sections as written."""
    types: dict[str, Callable[[Any], Any]] = {
        "model": pool_model_config,
        "data": DataSection.from_dict,
        "eval": EvalSettings.from_dict,
        "attention": AttentionSettings.from_dict,
    }
    if backend == "real":
        types.update(train=TrainConfig.from_dict, recipe=ExtensionConfig.from_dict)
    return types


def node_from_dict(d: dict[str, Any], types: dict[str, Callable[[Any], Any]]) -> Node:
    """A node from :meth:`Node.to_dict`'s mapping, its config's sections parsed by ``types``."""
    config = {k: types[k](v) if k in types else v for k, v in d["config"].items()}
    return Node(**{**d, "config": config})


def require_pool_dir(out: str | Path) -> Path:
    """``out`` as a Path when it holds a pool's plan; DataError saying it is no pool directory otherwise."""
    if not pool_plan_path(out).is_file():
        raise DataError(f"{out}: not a pool directory (no {POOL_PLAN}); has this pool been run?")
    return Path(out)


def read_plan(out: Path) -> tuple[PoolSpec, list[Node]]:
    """The pool and its stage graph from ``plan.json``; ``StateError`` naming the file when it is
    damaged or written by another version of archpool (another ``schema``)."""
    path = pool_plan_path(out)
    try:
        if path.is_symlink():
            raise ValueError("a symbolic link")
        data = read_record(path)
        schema = data.get("schema")
        if schema == PLAN_SCHEMA or not (isinstance(data.get("pool"), dict) and isinstance(data.get("nodes"), list)):
            pool = PoolSpec.from_dict(data["pool"])
            types = section_types(pool.backend)
            return pool, [node_from_dict(n, types) for n in data["nodes"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError is a ValueError
        reason = e.message if isinstance(e, ConfigError) else e
        raise StateError(
            f"{path}: truncated or corrupt ({reason}); delete it and re-run `archpool run` on the pool file"
        ) from None
    raise StateError(
        f"{path}: plan schema {str(schema)[:40]!r}, not {PLAN_SCHEMA} (another version of archpool); re-run `archpool run`"
    )
