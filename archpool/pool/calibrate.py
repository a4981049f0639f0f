"""Calibrating the scored task's difficulty on the pool's own checkpoints (``report.calibrate``;
docs/extensibility.md, "Headroom").

After the pool's runs, for each value of the knob (a parameter of the target's task, e.g. MQAR's
``pair_every``): the baseline's value at the target (its checkpoint at the target's rung, at the
target's length and distance filter) and every run's mastery of that task variant at its own
pretraining length before extension. The headroom rule (:mod:`archpool.analysis.headroom`) judges each
point and picks one; ``calibration.json`` records the curve, the choice and whether the pool scores
the chosen point. Nothing here looks at an arm's difference to the baseline.

Evaluations are cached by checkpoint hash and task configuration (``calibration/cache``), so a re-run
of the pool recomputes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from archpool.analysis import headroom
from archpool.analysis.mastery import mastery
from archpool.columns import BASE_PREFIX, dense_columns
from archpool.io import atomic_write_text
from archpool.pool.graph import Node, is_done, node_dir, read_result
from archpool.pool.nodes import DataResult
from archpool.pool.spec import PoolSpec, RunSpec

CALIBRATION_DIR = "calibration"
CALIBRATION_FILE = "calibration.json"


def calibration_path(out: str | Path) -> Path:
    return Path(out) / CALIBRATION_DIR / CALIBRATION_FILE


def _tokenizer(out: Path, nodes: list[Node]) -> Path | None:
    data = next((n for n in nodes if n.stage == "data"), None)
    if data is None or not is_done(out, data):
        return None
    store = cast(DataResult, read_result(out, data)).get("store")
    return Path(store) / "tokenizer.json" if store else None


def _evaluate(
    model: Path, tok: Path | None, task: str, length: int, params: dict[str, Any], pool: PoolSpec, cache: Path
) -> dict[str, Any]:
    """One dense task result of ``model`` at ``length`` (cached)."""
    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.target import load_target

    request = EvalRequest(
        suites=(),
        tasks=(task,),
        lengths=(length,),
        modes=("ll",),
        n_samples=pool.eval.n_samples,
        seed=pool.eval.seed,
        task_params={task: params},
        cache_dir=cache,
    )
    result: dict[str, Any] = evaluate(load_target(model, tokenizer=tok), request, progress=False)["tasks"][0]
    return result


def run_calibration(out: Path, pool: PoolSpec, nodes: list[Node], log: Callable[[str], None] = print) -> Path | None:
    """Measure the calibration curve of ``pool.report.calibrate`` and write ``calibration.json``; None
    when the pool asks for none or its baseline has no finished run to measure."""
    cal = pool.report.calibrate
    key = pool.report.target_key
    if cal is None or key is None:
        return None
    from archpool.train.extend import rung_dir

    out = Path(out)
    task = key.metric.rpartition("_")[0]  # the target's task; the rule judges its accuracy
    primary = pool.extension[0].name if pool.extension else ""
    by_id = {n.id: n for n in nodes}
    tok = _tokenizer(out, nodes)
    cache = out / CALIBRATION_DIR / "cache"
    short = pool.short_ctx
    baseline = {r.name for r in pool.runs if r.feature_count(short) == 0}
    base_params = dict(pool.eval.task_params.get(task, {}))
    column = key.but(metric=f"{task}_acc", rung="").format()
    lo, hi = pool.report.headroom  # validated: [low, high]
    window = (lo, hi)
    points = []
    for value in cal.values:
        params = {**base_params, cal.knob: value}
        mastered: dict[str, bool | None] = {}
        at_target: list[float] = []
        for spec in (r for r in pool.runs if isinstance(r, RunSpec)):  # checkpoint runs have no pretraining
            pre = by_id.get(f"pretrain:{spec.name}")
            if pre is None or not is_done(out, pre):
                continue
            r = _evaluate(node_dir(out, pre), tok, task, spec.pretrain_ctx, params, pool, cache)
            row = {"pretrain_ctx": spec.pretrain_ctx, **{BASE_PREFIX + k: v for k, v in dense_columns(r).items()}}
            m = mastery(row, f"{task}_acc")["mastered"]
            mastered[spec.name] = None if m is None else bool(m)
            ext = by_id.get(f"extend:{spec.name}:{primary}")
            if spec.name in baseline and ext is not None and is_done(out, ext):
                model = rung_dir(node_dir(out, ext), key.budget) if key.budget is not None else node_dir(out, ext)
                value_at = dense_columns(_evaluate(model, tok, task, key.length, params, pool, cache)).get(column)
                if value_at is not None:
                    at_target.append(float(value_at))
        points.append({"value": value, "baseline": at_target, **headroom.rule(at_target, mastered, window)})
        log(f"calibration {cal.knob}={value}: {points[-1]['words']}")
    if not any(p["baseline"] for p in points):
        return None
    chosen = headroom.choose(points, window)
    scored = base_params.get(cal.knob, _default(task, cal.knob))
    record = {
        "task": task,
        "knob": cal.knob,
        "target": pool.report.target,
        "column": column,
        "window": list(pool.report.headroom),
        "points": points,
        "chosen": None if chosen is None else chosen["value"],
        "scored": scored,
        "agrees": chosen is not None and chosen["value"] == scored,
    }
    path = calibration_path(out)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return path


def _default(task: str, knob: str) -> Any:
    from archpool.tasks import task_config

    return task_config(task).generator_params().get(knob)
