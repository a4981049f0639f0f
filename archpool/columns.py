"""The metric-naming contract of ``results.csv``: the pool writes these names, the analysis reads them back.

- a score at a context length: ``<task>_<mode>@<length>`` (``ruler_ll@512``); a dense task's accuracy
  and gold log-prob ``<task>_acc@L`` / ``<task>_lp@L``, per distance bucket ``<task>_acc@L[64<d<=128]``
  and beyond each bucket edge ``<task>_acc@L[d>128]``; chains ``<task>_chain@L``, ``<task>_hop2_acc@L``;
- before extension: the ``base_`` prefix (a ``_pre`` suffix is read as the same);
- a second extension recipe: the ``<recipe>_`` prefix; an extension from a pretraining milestone:
  the ``@<fraction>`` suffix (``@0.5``, never a length: lengths have two or more digits).

Pure Python: the writer (``archpool.pool``) and the reader (``archpool.analysis``) both import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from archpool.axes import N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SWA
from archpool.names import SCORED_SUITES

RESULTS_FILE = "results.csv"  # one row per run, in a pool directory
ANSWERS_FILE = "items.parquet"  # one row per scored answer, beside results.csv (archpool.analysis.answers)
# the design columns a pool writes first, in this order (what a run is, not what it measured)
DESIGN_COLUMNS = (
    "run", "arch", SWA, QK_NORM, NORM, N_KV_HEADS, "n_heads", PRETRAIN_CTX, "seed", "init", "fp8",
    "window", "d_ff", "n_layers", "d_model", "short_ctx", "feature_count", "state", "error",
)  # fmt: skip
BASE_PREFIX = "base_"
# ``[base_]<metric>@<length>[_pre|_post]``, the length an integer of two or more digits
LENGTH_RE = re.compile(r"^(?:(?P<base>base_))?(?P<metric>.+)@(?P<length>\d{2,})(?:_(?P<phase>pre|post))?$")
# ``<metric>@<length>[<filter>]``: a score at a length, optionally one distance bucket or tail (``[d>128]``)
SCORE_RE = re.compile(r"^(?P<metric>[^@\[\]]+)@(?P<length>\d{2,})(?P<filter>\[[^\]]*\])?$")
# an extension ladder: ``<metric>#ext<N>`` after N steps of extension, ``<metric>#ladder_mean`` over the rungs,
# ``<metric>#ladder_auc`` over the extension steps
RUNG_SEP = "#"
LADDER_MEAN = "ladder_mean"
LADDER_AUC = "ladder_auc"  # area under the ladder curve over extension steps / the last budget


RULER_TASKS_TOTAL = 13  # the tasks of RULER (lm-evaluation-harness's ``ruler`` group), the paper's RULER mean
_HARNESS_RULER_RE = re.compile(r"^(?P<base>base_)?ruler@(?P<length>\d+)$")


def ruler_tasks_column(column: str) -> str | None:
    """For lm-eval's RULER mean ``[base_]ruler@L``: the column counting the tasks that mean covers
    (``[base_]ruler_tasks@L``); None for any other column."""
    m = _HARNESS_RULER_RE.match(split_rung(column)[0])
    return None if m is None else f"{m['base'] or ''}ruler_tasks@{m['length']}"


def rung_label(budget: int) -> str:
    """The suffix label of a ladder rung: ``ext5`` after 5 extension steps (``ext0``: the RoPE change alone)."""
    return f"ext{int(budget)}"


def split_rung(column: str) -> tuple[str, str]:
    """``(stem, label)`` of a ladder column: ``("mqar_acc@1024[d>128]", "ext5")`` for
    ``mqar_acc@1024[d>128]#ext5``; ``(column, "")`` for a column without a rung suffix."""
    stem, sep, label = column.partition(RUNG_SEP)
    return (stem, label) if sep else (column, "")


def rung_budget(label: str) -> int | None:
    """The extension steps of a rung label (``ext5`` → 5); None for ``ladder_mean`` or anything else."""
    m = re.fullmatch(r"ext(\d+)", label)
    return int(m[1]) if m else None


@dataclass(frozen=True)
class ColumnKey:
    """A score column's name, typed: ``[base_]<metric>@<length>[[<filter>]][#<rung>]``.

    ``metric`` keeps a second recipe's prefix (``men_mqar_acc``); ``filter`` is a distance bucket or tail
    without its brackets (``d>128``); ``rung`` a ladder label (``ext150``, ``ladder_mean``) or empty;
    ``base`` marks a measurement before extension. ``parse(key.format()) == key``."""

    metric: str
    length: int
    filter: str = ""
    rung: str = ""
    base: bool = False

    @classmethod
    def parse(cls, column: str) -> ColumnKey | None:
        """The key of ``column``; None for a column that is not a score at a length (a milestone's
        ``@<fraction>`` suffix included)."""
        stem, rung = split_rung(column)
        base = stem.startswith(BASE_PREFIX)
        m = SCORE_RE.match(stem.removeprefix(BASE_PREFIX))
        if not m:
            return None
        return cls(m["metric"], int(m["length"]), (m["filter"] or "")[1:-1], rung, base)

    def format(self) -> str:
        head = f"{BASE_PREFIX if self.base else ''}{self.metric}@{self.length}"
        return head + (f"[{self.filter}]" if self.filter else "") + (f"{RUNG_SEP}{self.rung}" if self.rung else "")

    __str__ = format

    @property
    def budget(self) -> int | None:
        """The extension steps of the rung (None without one, or for ``ladder_mean``)."""
        return rung_budget(self.rung)

    def but(self, **changes: Any) -> ColumnKey:
        """This key with ``changes`` (``key.but(rung="", base=True)``)."""
        return replace(self, **changes)


def keyed_columns(columns: Any) -> dict[str, ColumnKey]:
    """``{column: key}`` for the score columns among ``columns``."""
    keys = {c: ColumnKey.parse(c) for c in columns if isinstance(c, str)}
    return {c: k for c, k in keys.items() if k is not None}


ACCURACY_STATS = ("acc", "chain")  # a dense task's accuracy and its chains' accuracy: shares of right answers


def is_accuracy(column: str | ColumnKey) -> bool:
    """True for a column (its name, or its parsed key) that is a share of right answers in [0, 1]
    (``mqar_acc@1024[d>128]#ext12``, ``mqar_chain_chain@512``, ``mastery_acc``); False for log-probabilities,
    perplexities and 0–100 scores."""
    key = column if isinstance(column, ColumnKey) else ColumnKey.parse(column)
    metric = key.metric if key is not None else split_rung(str(column))[0]
    return metric.rpartition("_")[2] in ACCURACY_STATS


def lower_is_better(metric: str) -> bool:
    """Perplexity and loss metrics (``ppl``/``loss`` in the name, e.g. LongPPL): lower is better."""
    m = metric.lower()
    return "ppl" in m or "loss" in m


def is_pre_extension(column: str) -> bool:
    """A column measured before extension (``base_`` prefix or ``_pre`` suffix)."""
    return column.startswith(BASE_PREFIX) or column.endswith("_pre")


def affixes(recipe: str, milestone: str, primary_recipe: str) -> tuple[str, str]:
    """(prefix, suffix) of a stage's metrics: ``base_`` before extension (recipe ``base``), ``<recipe>_``
    for a recipe other than the primary one, ``@<fraction>`` for an extension from a milestone."""
    if recipe == "base":
        return BASE_PREFIX, ""
    prefix = "" if recipe in ("", primary_recipe) else f"{recipe}_"
    return prefix, f"@{milestone}" if milestone else ""


def _put(out: dict[str, float], name: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out[name] = round(float(value), 6)


def dense_columns(r: dict[str, Any]) -> dict[str, float]:
    """A dense task result's columns (accuracy, log-prob, buckets, tails, chains)."""
    task, length, res = r["task"], r["length"], r["result"]
    out: dict[str, float] = {}
    _put(out, f"{task}_acc@{length}", res.get("acc"))
    _put(out, f"{task}_lp@{length}", res.get("lp"))
    for label, b in {**(res.get("tails") or {}), **(res.get("buckets") or {})}.items():
        if b.get("n"):
            _put(out, f"{task}_acc@{length}[{label}]", b.get("acc"))
            _put(out, f"{task}_lp@{length}[{label}]", b.get("lp"))
    if res.get("chains"):
        _put(out, f"{task}_chain@{length}", res["chains"].get("acc"))
        _put(out, f"{task}_hop2_acc@{length}", (res.get("hops") or {}).get("2", {}).get("acc"))
    return out


def eval_columns(result: dict[str, Any]) -> dict[str, float]:
    """An eval stage's result (tasks, suite aggregates, LongPPL, validation perplexity) as columns."""
    m: dict[str, float] = {}
    for r in result.get("tasks", []):
        if "score" not in r:
            continue
        if r["mode"] == "dense":
            m.update(dense_columns(r))
            continue
        _put(m, f"{r['task']}_{r['mode']}@{r['length']}", r["score"])
        if r["mode"] == "ll" and r.get("gold_logprob_mean") is not None:
            _put(m, f"{r['task']}_lp@{r['length']}", r["gold_logprob_mean"])
    for key, entry in (result.get("aggregate") or {}).items():
        mode, _, length = key.partition("@")
        for suite in SCORED_SUITES:
            _put(m, f"{suite}_{mode}@{length}", (entry.get(suite) or {}).get("score"))
    for r in result.get("longppl") or []:
        if "skipped" not in r:
            for k in ("ppl", "longppl"):
                _put(m, f"{k}@{r['length']}", r.get(k))
    val = (result.get("short") or {}).get("val_ppl") or {}
    for kind in ("short", "long"):
        if isinstance(val, dict):
            _put(m, f"val_ppl_{kind}", (val.get(kind) or {}).get("ppl"))
    return m
