"""``items.parquet``: every scored answer of every finished evaluation of a pool, one row each, beside
results.csv (the columns: :data:`archpool.analysis.answers.ANSWER_COLUMNS`; docs/evaluation.md).

Read from each eval node's per-task results (``eval/tasks/<task>/<length>_<mode>.json``, which keep
their scored samples as lm-eval's ``--log_samples`` does); the run's row of results.csv is made from
the same files, so the two always agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis.answers import ANSWER_COLUMNS
from archpool.columns import ANSWERS_FILE, BASE_PREFIX, RUNG_SEP
from archpool.errors import ConfigError
from archpool.io import atomic_path, disk_error
from archpool.pool.graph import Node, is_done, node_dir
from archpool.pool.plan import result_columns
from archpool.pool.spec import PoolSpec
from archpool.safeload import read_json_object


def _task_frame(result: dict[str, Any]) -> pd.DataFrame | None:
    """One task result's scored samples as rows (doc, query, distance, hop, chain, correct, lp)."""
    samples = result.get("samples")
    if not isinstance(samples, list) or not samples or not all(isinstance(s, dict) for s in samples):
        return None
    s = pd.DataFrame(samples)
    n = len(s)

    def col(name: str, default: float) -> np.ndarray:
        return pd.to_numeric(s[name], errors="coerce").fillna(default).to_numpy() if name in s else np.full(n, default)

    if result.get("mode") == "dense":
        doc = col("doc", -1).astype(np.int64)
        correct = s["correct"].astype(float).to_numpy() if "correct" in s else np.full(n, np.nan)
        lp = col("lp", np.nan)
    else:
        doc = col("index", -1).astype(np.int64)
        correct = col("score", np.nan)
        lp = col("gold_logprob", np.nan)
    frame = pd.DataFrame(
        {
            "doc": doc,
            "distance": col("distance" if "distance" in s else "needle_distance", -1).astype(np.int64),
            "hop": col("hop", 1).astype(np.int64),
            "chain": col("chain", -1).astype(np.int64),
            "correct": correct,
            "lp": lp,
        }
    )
    if (frame["doc"] < 0).any() or frame["correct"].isna().any():
        return None
    frame.insert(1, "query", frame.groupby("doc").cumcount().astype(np.int64))
    return frame


def node_answers(out: Path, node: Node, primary: str, design: dict[str, Any]) -> list[pd.DataFrame]:
    """The answers of one finished eval node, each task × length × mode a frame with its run's columns."""
    prefix, suffix = result_columns(node, primary)
    head, _, rung = suffix.partition(RUNG_SEP)
    milestone = head.removeprefix("@")
    recipe = "base" if prefix == BASE_PREFIX else (prefix[:-1] if prefix else primary)
    frames = []
    for path in sorted((node_dir(out, node) / "eval" / "tasks").glob("*/*.json")):
        try:
            result = read_json_object(path)
        except ConfigError:  # a damaged result: results.csv has no numbers from it either
            continue
        if "score" not in result or not isinstance(result.get("length"), int):
            continue
        frame = _task_frame(result)
        if frame is None:
            continue
        fixed = {
            **design,
            "recipe": recipe,
            "prefix": prefix,
            "rung": rung,
            "milestone": milestone,
            "task": str(result.get("task", path.parent.name)),
            "mode": str(result.get("mode", "")),
            "length": int(result["length"]),
        }
        for i, (k, v) in enumerate(fixed.items()):
            frame.insert(i, k, v)
        frames.append(frame)
    return frames


def answers_frame(out: Path, pool: PoolSpec, nodes: list[Node]) -> pd.DataFrame:
    """Every finished evaluation's answers, in the column order and types of ``ANSWER_COLUMNS``."""
    primary = pool.extension[0].name if pool.extension else ""
    design = {}
    for spec in pool.runs:
        row = spec.row()
        seed = row.get("seed")
        design[spec.name] = {
            "run": spec.name,
            "arch": str(row.get("arch") or spec.name),
            "seed": int(seed) if seed is not None else 0,
        }
    frames: list[pd.DataFrame] = []
    for n in nodes:
        if n.stage == "eval" and n.run in design and is_done(out, n):
            frames += node_answers(out, n, primary, design[n.run])
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in ANSWER_COLUMNS.items()})
    frame = pd.concat(frames, ignore_index=True)[list(ANSWER_COLUMNS)]
    return frame.astype({c: ("category" if t == "string" else t) for c, t in ANSWER_COLUMNS.items()})


def write_answers(out: Path, pool: PoolSpec, nodes: list[Node]) -> Path | None:
    """Write ``OUT/items.parquet`` atomically and return its path; a pool whose evaluations scored no
    answers (a table of metrics only) has none, and an earlier one is removed."""
    path = Path(out) / ANSWERS_FILE
    frame = answers_frame(Path(out), pool, nodes)
    if frame.empty:
        path.unlink(missing_ok=True)
        return None
    try:
        with atomic_path(path) as tmp:
            frame.to_parquet(tmp, index=False, compression="zstd")
    except OSError as e:
        raise disk_error(path, e) from None
    return path
