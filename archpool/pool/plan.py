"""A pool's stage graph: data → pretrain (with milestone checkpoints) → extend → eval → attention.

Per run and extension recipe:

    data ─┬─ pretrain:R ─┬─ extend:R:ntk ──┬─ eval:R:ntk
          │              │                 └─ attention:R:ntk
          │              ├─ extend:R@0.5:ntk ─ eval:R@0.5:ntk      (one per milestone)
          │              ├─ eval:R:base                            (before extension)
          │              └─ attention:R:base                       (before extension)

A checkpoint run (:mod:`archpool.pool.checkpoints`) is measured, not pretrained: it has no data or
pretrain node, only ``eval:R`` / ``attention:R`` on its checkpoint and ``eval:R:base`` /
``attention:R:base`` on its before-extension twin, keyed by the models' bytes
(:func:`checkpoint_nodes`). A checkpoint run the pool extends (``extend:``) is the model before
extension instead (``eval:R:base`` / ``attention:R:base``), and each recipe's ``extend:R:<recipe>``
(:func:`archpool.train.extend_model.extend_model`: the RoPE change alone, or steps of training on the
run's own data) feeds ``eval:R:<recipe>`` (a rung each for a ladder) and, for the first, its attention
(:func:`extended_checkpoint_nodes`). Its columns are named as a trained run's.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archpool.columns import RUNG_SEP, affixes, rung_label
from archpool.errors import ConfigError, DataError, StateError
from archpool.io import atomic_write_json, sha256_file
from archpool.pool.checkpoints import CheckpointRunSpec, content_key
from archpool.pool.graph import Node, assign_keys
from archpool.pool.nodes import (
    BASE,
    EXTENDED,
    AttentionConfig,
    CheckpointExtendConfig,
    DataConfig,
    EvalConfig,
    ExtendConfig,
    PretrainConfig,
)
from archpool.pool.sections import PoolRecipe, milestone_key
from archpool.pool.spec import PoolSpec, RunSpec
from archpool.rundir import POOL_PLAN, pool_plan_path
from archpool.safeload import read_record
from archpool.train.config import TrainConfig
from archpool.typecheck import is_number

RUN_STAGES = ("pretrain", "extend", "eval", "attention")

# rough CPU throughputs (tokens/s), only to weigh stages against each other in the ETA
_PRETRAIN_RATE, _EXTEND_RATE = 10_000.0, 7_000.0
_UNKNOWN_COST = 1.0  # a training stage of a backend other than ``real``, whose work the plan cannot size


def _pretrain_cost(train: TrainConfig | dict[str, Any]) -> float:
    """The pretraining's planned cost: its tokens (the run's typed ``TrainConfig``) at a rough CPU rate."""
    if not isinstance(train, TrainConfig):  # another backend's settings, as written
        return _UNKNOWN_COST
    return train.total_steps() * train.global_batch_tokens / _PRETRAIN_RATE


def _extension_cost(run: RunSpec, recipe: PoolRecipe, train: TrainConfig | dict[str, Any]) -> float:
    """The extension's planned cost: the tokens its plan trains on (:func:`plan_extension`) at a rough CPU rate."""
    if recipe.config is None or not isinstance(train, TrainConfig):
        return _UNKNOWN_COST
    from archpool.train.extension_plan import plan_extension

    return plan_extension(run.model, train, recipe.config, "final").tokens / _EXTEND_RATE


def build_plan(
    pool: PoolSpec,
    runs: list[RunSpec | CheckpointRunSpec] | None = None,
    contents: dict[str, str] | None = None,
    costs: dict[str, float] | None = None,
) -> list[Node]:
    """All nodes of ``runs`` (default: every run), in dependency order, with content keys. ``contents``
    (node id -> content key) gives checkpoint nodes the model keys a plan recorded, instead of hashing
    the models' bytes again; ``costs`` (node id -> cost) gives extend nodes the costs a plan recorded,
    instead of planning each extension again to weigh it."""
    runs = pool.runs if runs is None else runs
    data_cost = 0.5 if pool.backend != "real" or pool.data.synthetic is not None else 20.0
    trained = [r for r in runs if not isinstance(r, CheckpointRunSpec)]
    nodes: list[Node] = []
    if trained or not runs:
        nodes.append(Node(id="data", stage="data", config=DataConfig(data=pool.data, backend=pool.backend), cost=data_cost))
    for run in runs:
        if isinstance(run, CheckpointRunSpec):
            nodes.extend(checkpoint_nodes(pool, run, contents or {}))
        else:
            nodes.extend(trained_run_nodes(pool, run, costs or {}))
    assign_keys(nodes)
    return nodes


def trained_run_nodes(pool: PoolSpec, run: RunSpec, costs: dict[str, float] | None = None) -> list[Node]:
    """A trained run's nodes: pretraining, its evaluation and attention before extension, and every
    recipe's extension (from the end and from each milestone) with its evaluations and attention."""
    train = pool.pretrain_config(run.pretrain_ctx, run.seed) if pool.backend == "real" else pool.train
    pre_cost = _pretrain_cost(train)
    pre = Node(
        id=f"pretrain:{run.name}",
        stage="pretrain",
        config=PretrainConfig(
            model=run.model,
            seq_len=run.pretrain_ctx,
            seed=run.seed,
            init_seed=run.init_seed,
            train=train,
            milestones=pool.milestones,
        ),
        deps={"data": "data"},
        run=run.name,
        cost=pre_cost,
    )
    nodes = [pre]
    evaluate = pool.eval.enabled
    base, tag = _reads(pre, None), f"{run.name}:base"
    if evaluate and pool.eval.base:
        nodes.append(_eval_node(pool, run, tag, base, max(0.1, 0.05 * pre_cost)))
    if evaluate and pool.eval.base and pool.attention_enabled and pool.extension:
        analysis_len = pool.extension[0].length(pool.long_ctx)
        nodes.append(_attention_node(pool, run, tag, base, max(0.1, 0.03 * pre_cost), analysis_len))
    for milestone in [*pool.milestones, 1.0]:
        for r_i, recipe in enumerate(pool.extension):
            if recipe.applies(run.arch):
                primary = milestone == 1.0 and r_i == 0
                nodes.extend(_extension_nodes(pool, run, pre, recipe, milestone, primary, costs or {}))
    return nodes


def _extension_nodes(
    pool: PoolSpec, run: RunSpec, pre: Node, recipe: PoolRecipe, milestone: float, primary: bool, costs: dict[str, float]
) -> list[Node]:
    """One recipe's extension of ``run`` from ``milestone``, an eval per ladder rung (one without a
    ladder), and for the primary recipe from the end of pretraining its attention analysis; its cost
    from ``costs`` where a plan recorded it."""
    assert isinstance(pre.config, PretrainConfig)
    pre_cost = pre.cost
    tag = f"{run.name}{'' if milestone == 1.0 else f'@{milestone_key(milestone)}'}:{recipe.name}"
    ext_id = f"extend:{tag}"
    ext = Node(
        id=ext_id,
        stage="extend",
        config=ExtendConfig(
            recipe=recipe.stage_config(),
            milestone=milestone,
            seed=run.seed,
            long_ctx=pool.long_ctx,
            pretrain_ctx=run.pretrain_ctx,
        ),
        deps={"model": pre.id, "data": "data"},
        run=run.name,
        cost=costs[ext_id] if ext_id in costs else _extension_cost(run, recipe, pre.config.train),
        recipe=recipe.name,
        milestone=milestone,
    )
    nodes = [ext]
    model = _reads(pre, ext)
    rungs: list[int | None] = [*recipe.budgets] or [None]
    for rung in rungs if pool.eval.enabled else []:
        nodes.append(_eval_node(pool, run, tag, model, max(0.1, 0.1 * pre_cost / len(rungs)), rung))
    if primary and pool.attention_enabled:
        nodes.append(_attention_node(pool, run, tag, model, max(0.1, 0.03 * pre_cost), recipe.length(pool.long_ctx)))
    return nodes


@dataclass(frozen=True)
class _Measured:
    """The model an eval or attention node measures: before extension (``phase`` base) or after, read
    through ``deps``; ``ext`` is the extend node that made it (the node's recipe and milestone), and a
    checkpoint run's model is named by ``checkpoint`` and keyed by its ``content`` key."""

    phase: str
    deps: dict[str, str]
    ext: Node | None = None
    checkpoint: str | None = None
    content: str | None = None

    def refs(self) -> dict[str, Any]:
        """A measuring node's references to the model: its inputs, phase, and its extension's recipe and milestone."""
        recipe, milestone = (None, None) if self.ext is None else (self.ext.recipe, self.ext.milestone)
        return dict(deps=dict(self.deps), phase=self.phase, recipe=recipe, milestone=milestone)

    def config_fields(self, pool: PoolSpec, run: RunSpec | CheckpointRunSpec) -> dict[str, Any]:
        """The fields an eval's and an attention analysis's config share: the run's pretraining context, the
        pool's long context, and a checkpoint run's model."""
        return dict(seq_len=run.pretrain_ctx, long_ctx=pool.long_ctx, checkpoint=self.checkpoint, content=self.content)


def _reads(pre: Node, ext: Node | None) -> _Measured:
    """A trained run's model: ``ext``'s, or the pretrained one when ``ext`` is None."""
    if ext is None:
        return _Measured(BASE, {"model": pre.id, "data": "data"})
    return _Measured(EXTENDED, {"model": ext.id, "base": pre.id, "data": "data"}, ext)


def _eval_node(
    pool: PoolSpec, run: RunSpec | CheckpointRunSpec, tag: str, model: _Measured, cost: float, rung: int | None = None
) -> Node:
    """``eval:<tag>``: the eval of ``model`` (at ``rung`` of its extension's ladder, which the id then names)."""
    config = EvalConfig(eval=pool.eval, phase=model.phase, rung=rung, **model.config_fields(pool, run))
    node_id = f"eval:{tag}" + ("" if rung is None else f"{RUNG_SEP}{rung_label(rung)}")
    return Node(id=node_id, stage="eval", config=config, run=run.name, cost=cost, rung=rung, **model.refs())


def _attention_node(
    pool: PoolSpec,
    run: RunSpec | CheckpointRunSpec,
    tag: str,
    model: _Measured,
    cost: float,
    analysis_len: int,
    texts: dict[str, str] | None = None,
) -> Node:
    """``attention:<tag>``: the attention analysis of ``model`` at ``analysis_len``; a checkpoint run's reads
    the pool's ``texts`` (name -> sha256; filler text when there are none)."""
    text = None if texts is None else "texts" if texts else "filler"
    config = AttentionConfig(
        attention=pool.attention, analysis_len=analysis_len, texts=texts, text=text, **model.config_fields(pool, run)
    )
    return Node(id=f"attention:{tag}", stage="attention", config=config, run=run.name, cost=cost, **model.refs())


def checkpoint_nodes(pool: PoolSpec, run: CheckpointRunSpec, contents: dict[str, str] | None = None) -> list[Node]:
    """Eval and attention of a checkpoint run: ``eval:R`` / ``attention:R`` on its checkpoint (plain
    columns, as a trained run's extended model) and ``eval:R:base`` / ``attention:R:base`` on its
    ``pretrained`` twin (``base_`` columns). Configs carry the models' content keys, not their paths
    (the stage finds the path in the run spec), so equal bytes are one cached result; ``contents``
    (node id -> key) gives the keys a plan recorded."""
    contents = contents or {}
    if run.extend is not None:
        return extended_checkpoint_nodes(pool, run, contents)
    nodes: list[Node] = []
    texts = _checkpoint_texts(pool)
    for which, ref in run.refs.items():
        phase = BASE if which == "pretrained" else EXTENDED
        tag = f"{run.name}{':base' if phase == BASE else ''}"
        content = contents.get(f"eval:{tag}") or contents.get(f"attention:{tag}") or content_key(ref)
        nodes.extend(_checkpoint_measures(pool, run, tag, _Measured(phase, {}, checkpoint=which, content=content), texts))
    return nodes


def _checkpoint_texts(pool: PoolSpec) -> dict[str, str]:
    """The pool's ``texts`` that a checkpoint run's attention analysis reads: file name -> sha256."""
    return {Path(t).name: sha256_file(t) for t in pool.texts}


def _checkpoint_measures(
    pool: PoolSpec,
    run: CheckpointRunSpec,
    tag: str,
    model: _Measured,
    texts: dict[str, str],
    rungs: list[int | None] | None = None,
    attend: bool = True,
) -> list[Node]:
    """A checkpoint run's measures of ``model``: its eval (one per rung of a ladder) and, with ``attend``, its
    attention analysis over ``texts`` at the longest evaluated length (``<stage>:<tag>``)."""
    nodes = [_eval_node(pool, run, tag, model, 1.0, rung) for rung in rungs or [None]] if pool.eval.enabled else []
    if attend and pool.attention_enabled:
        nodes.append(_attention_node(pool, run, tag, model, 0.5, max(pool.eval.lengths_at(False, pool.long_ctx)), texts))
    return nodes


def extended_checkpoint_nodes(pool: PoolSpec, run: CheckpointRunSpec, contents: dict[str, str]) -> list[Node]:
    """A checkpoint run the pool extends (``extend:``): ``eval:R:base`` / ``attention:R:base`` on the
    checkpoint (``base_`` columns, with ``eval.base``), then for each of its recipes ``extend:R:<recipe>``,
    ``eval:R:<recipe>`` on the extended model (one per rung of a ladder) and, for the first recipe,
    ``attention:R:<recipe>``: a trained run's before/after columns. Every node is keyed by the checkpoint's
    content key (``contents``: the keys a plan recorded) and, after the extension, by its extend node."""
    ext = run.extend or {}
    recipes = _checkpoint_recipes(pool, run)
    ids = [f"eval:{run.name}:base", f"attention:{run.name}:base", *(f"extend:{run.name}:{r.name}" for r in recipes)]
    content = next((contents[i] for i in ids if i in contents), None) or content_key(run.refs["final"])
    texts = _checkpoint_texts(pool)
    nodes: list[Node] = []
    if pool.eval.enabled and pool.eval.base:
        checkpoint = _Measured(BASE, {}, checkpoint="final", content=content)
        nodes.extend(_checkpoint_measures(pool, run, f"{run.name}:base", checkpoint, texts))
    data = _extension_data_key(ext)
    for i, recipe in enumerate(recipes):
        config = CheckpointExtendConfig(
            recipe=recipe.stage_config(),
            steps=int(ext.get("steps", 0)),
            pretrain_ctx=run.pretrain_ctx,
            long_ctx=pool.long_ctx,
            checkpoint="final",
            content=content,
            data=data,
        )
        extend = Node(
            id=f"extend:{run.name}:{recipe.name}", stage="extend", config=config, run=run.name, cost=1.0, recipe=recipe.name
        )
        nodes.append(extend)
        extended = _Measured(EXTENDED, {"model": extend.id}, extend)
        nodes.extend(_checkpoint_measures(pool, run, f"{run.name}:{recipe.name}", extended, texts, [*recipe.budgets], i == 0))
    return nodes


def _checkpoint_recipes(pool: PoolSpec, run: CheckpointRunSpec) -> list[PoolRecipe]:
    """The pool's recipes a checkpoint run's ``extend.recipes`` names (default: every recipe that applies to
    it); ConfigError naming an unknown one, or a recipe without its LR for a trained extension."""
    ext = run.extend or {}
    by_name = {r.name: r for r in pool.extension}
    names = ext.get("recipes") or [r.name for r in pool.extension if r.applies(run.arch)]
    where = f"runs[{run.name}].extend"
    for name in names:
        if name not in by_name:
            raise ConfigError(
                f"{where}.recipes", f"no recipe {name!r} in the pool's extension: section; it has {', '.join(by_name)}"
            )
    if not names:
        raise ConfigError(f"{where}.recipes", "no recipe of the pool's extension: section applies to this run")
    recipes = [by_name[n] for n in names]
    for r in recipes:
        trains = ext.get("steps", 0) or r.budgets
        if trains and (r.config is None or r.config.lr is None):
            raise ConfigError(
                f"extension[{r.name}].lr",
                f"a checkpoint has no pretraining LR to take a third of: give the recipe's lr ({where})",
            )
        if ext.get("steps", 0) and r.budgets:
            raise ConfigError(f"{where}.steps", f"recipe {r.name!r} is a ladder (budgets): its steps are the budgets")
        if r.budgets and not (ext.get("data") or ext.get("text")):
            raise ConfigError(f"{where}.data", f"recipe {r.name!r} is a ladder (budgets) and trains: give data or text")
    return recipes


def _extension_data_key(ext: dict[str, Any]) -> dict[str, Any] | None:
    """What a checkpoint extension's data is, for its node key: the text files' or data config's sha256, or a
    prepared store's content key (its manifest's), with the paths."""
    if ext.get("text"):
        return {"text": {t: sha256_file(t) for t in ext["text"]}}
    if not ext.get("data"):
        return None
    path = Path(ext["data"])
    if path.is_dir():
        manifest = path / "manifest.json"
        return {"store": str(path), "key": sha256_file(manifest) if manifest.is_file() else None}
    return {"config": str(path), "sha256": sha256_file(path)}


def result_columns(node: Node, primary_recipe: str) -> tuple[str, str]:
    """(prefix, suffix) under which a node's metrics enter its run's row of results.csv.

    The primary recipe at the end of pretraining gives the plain metric names; the pre-extension
    evaluation gets ``base_``; other recipes ``<recipe>_``; milestone extensions ``@<fraction>``;
    a ladder rung ``#ext<steps>``.
    """
    recipe = BASE if node.phase == BASE else node.recipe or ""
    milestone = "" if node.milestone is None or node.milestone >= 1.0 else milestone_key(node.milestone)
    prefix, suffix = affixes(recipe, milestone, primary_recipe)
    return prefix, suffix + ("" if node.rung is None else f"{RUNG_SEP}{rung_label(node.rung)}")


PLAN_SCHEMA = 3  # plan.json's layout: the pool's sections once, each node's references, no node configs


def write_plan(out: Path, pool: PoolSpec, nodes: list[Node]) -> None:
    """plan.json: the pool (each section once, recipes resolved) and every node's references and key."""
    atomic_write_json(pool_plan_path(out), dict(schema=PLAN_SCHEMA, pool=pool.to_dict(), nodes=[n.ref() for n in nodes]))


def require_pool_dir(out: str | Path) -> Path:
    """``out`` as a Path when it holds a pool's plan; DataError saying it is no pool directory otherwise."""
    if not pool_plan_path(out).is_file():
        raise DataError(f"{out}: not a pool directory (no {POOL_PLAN}); has this pool been run?")
    return Path(out)


def read_plan(out: Path, run: str | None = None) -> tuple[PoolSpec, list[Node]]:
    """The pool and its stage graph from ``plan.json``: the pool parsed once, every node's config built
    from it again (:func:`build_plan`, with the recorded checkpoint content keys and costs) and checked
    against the recorded key; with ``run``, only that run's nodes and the pool's data node (a worker's).
    ``StateError`` naming the file when it is damaged, written by another version of archpool (another
    ``schema``), or when its nodes no longer match what the pool plans (another archpool, or the pool's
    text files changed)."""
    path = pool_plan_path(out)
    try:
        if path.is_symlink():
            raise ValueError("a symbolic link")
        data = read_record(path)
        schema = data.get("schema")
        if schema == PLAN_SCHEMA or not (isinstance(data.get("pool"), dict) and isinstance(data.get("nodes"), list)):
            pool = PoolSpec.from_dict(data["pool"])
            refs = [n for n in data["nodes"] if isinstance(n, dict)]
            contents = {n["id"]: n["content"] for n in refs if isinstance(n.get("content"), str)}
            costs = {n["id"]: float(n["cost"]) for n in refs if n.get("stage") == "extend" and is_number(n.get("cost"))}
            nodes = build_plan(pool, None if run is None else [pool.run(run)], contents, costs)
            ids = {n.id for n in nodes}
            recorded = [(n["id"], n["key"]) for n in data["nodes"] if run is None or n["id"] in ids]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError is a ValueError
        reason = e.message if isinstance(e, ConfigError) else e
        raise StateError(
            f"{path}: truncated or corrupt ({reason}); delete it and re-run `archpool run` on the pool file"
        ) from None
    if schema != PLAN_SCHEMA:
        raise StateError(
            f"{path}: plan schema {str(schema)[:40]!r}, not {PLAN_SCHEMA} (another version of archpool); re-run `archpool run`"
        )
    planned = [(n.id, n.key) for n in nodes]
    if planned != recorded:
        changed = next((i for (i, k), r in zip(planned, recorded) if (i, k) != r), None) or "the node list"
        raise StateError(
            f"{path}: its nodes differ from what this archpool plans for its pool ({str(changed)[:80]}); "
            "re-run `archpool run` on the pool file to plan it again"
        )
    return pool, nodes
