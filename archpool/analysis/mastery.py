"""Mastery before extension: every arm masters its own length before extension, so its long-context
numbers measure extension, not pretraining.

The rule: a run *masters* its own length when, before extension, at its own pretraining length
``L = pretrain_ctx``, the accuracy ``base_<metric>@L`` is at least ``threshold`` **and** so is every
distance bucket and tail column of that metric at ``L`` (``base_<metric>@L[...]``, e.g. ``[d<=64]``,
``[64<d<=128]``, ``[d>64]``). A bucket with no answers has no column (or an empty cell) and is not
checked. Without the ``base_<metric>@L`` value (or a pretraining length) nothing can be said: None.

``mastery_acc`` is ``base_<metric>@L``, ``mastery_min_bucket`` the lowest bucket/tail accuracy at ``L``
(None without buckets), ``mastered`` 1 | 0 | None. A run that did not master its own length is no
evidence about extension: its long-context numbers measure pretraining.

The metric is the accuracy of the pool's scored task, the task of its ``report.target`` column
(:func:`mastery_metric`: ``mqar_rebind_acc`` for ``mqar_rebind_acc@1024[d>128]#ext12``,
``dense_kv_acc`` for ``remedy_dense_kv_lp@512``); :data:`MASTERY_METRIC` only where no target names one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from archpool.columns import BASE_PREFIX, ColumnKey

MASTERY_METRIC = "mqar_acc"  # the metric of a pool whose report names no target task
MASTERY_THRESHOLD = 0.9
MASTERY_COLUMNS = ("mastery_acc", "mastery_min_bucket", "mastered")


def finite(v: Any) -> float | None:
    """A finite float, else None (missing key, empty cell, NaN, text)."""
    if v is None or isinstance(v, bool) or (isinstance(v, str) and not v.strip()):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def mastery(row: Mapping[str, Any], metric: str = MASTERY_METRIC, threshold: float = MASTERY_THRESHOLD) -> dict[str, Any]:
    """``{"mastery_acc", "mastery_min_bucket", "mastered"}`` of one run's row (see the module docstring)."""
    none = {"mastery_acc": None, "mastery_min_bucket": None, "mastered": None}
    length = finite(row.get("pretrain_ctx"))
    if length is None or length != int(length):
        return none
    head = f"{BASE_PREFIX}{metric}@{int(length)}"
    acc = finite(row.get(head))
    if acc is None:
        return none
    buckets = [
        v
        for k, x in row.items()
        if isinstance(k, str) and k.startswith(head + "[") and k.endswith("]") and (v := finite(x)) is not None
    ]
    low = min(buckets) if buckets else None
    ok = acc >= threshold and (low is None or low >= threshold)
    return {"mastery_acc": acc, "mastery_min_bucket": low, "mastered": int(ok)}


def mastery_metric(target: str | ColumnKey, columns: Iterable[str] | None = None) -> str | None:
    """The accuracy metric whose mastery a target's numbers rest on: that of the target's task,
    ``mqar_acc`` for ``mqar_acc@1024[d>128]#ladder_mean`` (also for ``mqar_lp@…`` and
    ``mqar_chain_hop2_acc@…``: mastery is judged on the task's accuracy).

    A dense task (``archpool.tasks.dense``) is found by its name and one of its family's statistics,
    behind any recipe prefix (``remedy_mqar_rebind_acc@…`` → ``mqar_rebind_acc``). For another
    task, ``<task>_acc``, its recipe prefix dropped when ``columns`` are given and hold
    ``base_<metric>@…`` columns for the shorter name. None for a target that is not a score at a length.
    ``target`` is the column's name or its parsed key."""
    key = target if isinstance(target, ColumnKey) else ColumnKey.parse(target)
    if key is None:
        return None
    task = dense_task(key.metric)
    if task is not None:
        return f"{task}_acc"
    metric = key.metric
    if not metric.endswith("_acc"):
        task, sep, _mode = metric.rpartition("_")
        metric = f"{task}_acc" if sep else f"{metric}_acc"
    if columns is not None:
        have = {c.partition("@")[0] for c in columns if c.startswith(BASE_PREFIX)}
        parts = metric.split("_")
        for i in range(len(parts)):
            candidate = "_".join(parts[i:])
            if BASE_PREFIX + candidate in have:
                return candidate
    return metric


def dense_task(metric: str) -> str | None:
    """The dense task a score metric is of: ``<task>_<stat>`` or ``<recipe>_<task>_<stat>``, ``stat`` one
    of the task's family's statistics (the longest task name that fits); None for any other metric."""
    from archpool.tasks import TASKS

    found = [
        name
        for name, t in TASKS.items()
        if t.family is not None
        and any(metric == f"{name}_{stat}" or metric.endswith(f"_{name}_{stat}") for stat in t.family.stats)
    ]
    return max(found, key=len, default=None)


def mastery_frame(df: pd.DataFrame, metric: str = MASTERY_METRIC, threshold: float = MASTERY_THRESHOLD) -> pd.DataFrame:
    """Per run (index of ``df``): ``mastery_acc``, ``mastery_min_bucket``, ``mastered``, ``from``.

    Computed from the ``base_<metric>@L`` columns when the table has them for that run, else the table's
    own ``mastery_*`` columns (``from`` says which: ``base`` | ``table`` | None)."""
    rows = []
    table_cols = all(c in df.columns for c in MASTERY_COLUMNS)
    for _, r in df.iterrows():
        m = mastery(r.to_dict(), metric, threshold)
        src = "base" if m["mastered"] is not None else None
        cell = finite(r["mastered"]) if src is None and table_cols else None
        if cell is not None:
            m = {
                "mastery_acc": finite(r["mastery_acc"]),
                "mastery_min_bucket": finite(r["mastery_min_bucket"]),
                "mastered": int(cell >= 0.5),
            }
            src = "table"
        rows.append({**m, "from": src})
    return pd.DataFrame(rows, index=df.index, columns=[*MASTERY_COLUMNS, "from"])
