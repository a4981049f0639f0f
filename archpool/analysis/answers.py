"""The scored answers behind results.csv (``items.parquet``), and effects estimated from them.

A pool writes one row per scored answer of every evaluation beside its results.csv (docs/evaluation.md,
"The answers table"): the run (with its architecture and seed), where the evaluation sits in the run
(the column ``prefix`` and ``rung`` that name its results.csv columns), the task, length, document,
the answer's index in its document, its key–query distance, hop and chain, whether it was right
(``correct``: 1 / 0, or a partial score of a generated answer) and the gold answer's log-probability.

A results.csv column that is a pooled mean over answers (``mqar_acc@1024[d>128]#ext25``: the share of
right answers beyond distance 128; ``mqar_lp@…``: their mean gold log-probability; a ladder's
``#ladder_mean`` / ``#ladder_auc``; a generated or likelihood score ``<task>_<mode>@L``) is, per run, a
sum over the evaluation's documents of each document's contribution ``x[d]`` (its answers in the
column's filter, divided by the run's answers in it). An effect is a contrast of runs paired by seed:
``z[s, d] = D · Σ c · x_run(s)[d]`` has the contrast's per-seed value as its row mean and its grand mean
is the effect, so :func:`archpool.analysis.crossed.components` estimates it with the noise of the
seeds and of the documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archpool.analysis import crossed
from archpool.columns import ANSWERS_FILE, BASE_PREFIX, LADDER_AUC, LADDER_MEAN, ColumnKey, rung_budget, rung_label
from archpool.errors import DataError

# the table's columns and their types (strings are categories in memory)
ANSWER_COLUMNS: dict[str, str] = {
    "run": "string",
    "arch": "string",
    "seed": "int64",
    "recipe": "string",  # "base" before extension, else the extension recipe's name
    "prefix": "string",  # the results.csv column prefix: "" (primary recipe), "base_", "<recipe>_"
    "rung": "string",  # the ladder rung label ("ext25"), "" without a ladder
    "milestone": "string",  # the pretraining milestone extended from, "" for the final checkpoint
    "task": "string",
    "mode": "string",  # dense | ll | gen
    "length": "int64",
    "doc": "int64",  # the document (sample) index; the same documents for every run at one evaluation seed
    "query": "int64",  # the answer's index in its document
    "distance": "int64",  # tokens from the binding to the query (-1 when the task has no distances)
    "hop": "int64",
    "chain": "int64",
    "correct": "float64",  # 1 / 0 (a partial score for a generated answer)
    "lp": "float64",  # the gold answer's log-probability (NaN when not scored)
}
MAX_BYTES = 4 << 30  # an answers table larger than this is refused before it is read
STATS = ("acc", "lp")  # a dense task's columns: <task>_acc@L, <task>_lp@L
MATCH_TOLERANCE = 2e-5  # results.csv rounds to 6 decimals
_FILTER = re.compile(r"^(?:d<=(?P<a>\d+)|d>(?P<b>\d+)|(?P<lo>\d+)<d<=(?P<hi>\d+))$")


def answers_path(source: str | Path) -> Path:
    """Where the answers of a results table live: ``items.parquet`` in a pool directory, or beside a CSV."""
    source = Path(source)
    return source / ANSWERS_FILE if source.is_dir() else source.with_name(ANSWERS_FILE)


def load_answers(source: str | Path) -> Answers | None:
    """The answers beside a results table or in a pool directory; None when there is no answers table
    (or it holds no answers)."""
    path = answers_path(source)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise DataError(f"{path}: not a regular file; the answers table beside a results table is a parquet file")
    answers = Answers.load(path) if path.is_file() else None
    return answers if answers is not None and answers.n else None


def distance_mask(distance: np.ndarray, filt: str) -> np.ndarray:
    """The answers a column's distance filter keeps (``d>128``, ``64<d<=128``, ``d<=64``; "" keeps all)."""
    if not filt:
        return np.ones(len(distance), bool)
    m = _FILTER.match(filt)
    if m is None:
        raise ValueError(f"unknown distance filter {filt!r}")
    if m["a"] is not None:
        return distance <= int(m["a"])
    if m["b"] is not None:
        return distance > int(m["b"])
    return (distance > int(m["lo"])) & (distance <= int(m["hi"]))


@dataclass(frozen=True)
class Selection:
    """Which answers a results.csv column averages: evaluation ``prefix``, ``task`` and ``mode``,
    ``length``, distance ``filter``, the statistic (``acc``, ``lp``, or ``score``: a generated or
    likelihood task's score in percent) and the rungs with their weights (one rung of weight 1 for a
    column that is not a ladder's mean or area)."""

    prefix: str
    task: str
    mode: str
    length: int
    filter: str
    stat: str
    rungs: tuple[tuple[str, float], ...]


@dataclass
class DocValues:
    """One column's per-document contributions ``x[run][d]`` over ``n_docs`` documents (they sum to the
    run's value), and each run's answers in it."""

    x: dict[str, np.ndarray]
    n: dict[str, int]
    n_docs: int

    def value(self, run: str) -> float:
        return float(self.x[run].sum())


GroupKey = tuple[str, str, str, int, str]  # prefix, task, mode, length, rung (of extensions from the final checkpoint)


class Answers:
    """The answers of a pool (see the module docstring), grouped once by evaluation for fast column lookups."""

    def __init__(self, frame: pd.DataFrame, source: str = ""):
        missing = [c for c in ANSWER_COLUMNS if c not in frame.columns]
        if missing:
            raise DataError(f"{source or 'answers'}: not an answers table (no column {missing[0]!r})")
        self.source = source
        self.n = len(frame)
        f = frame.reset_index(drop=True)
        runs = f["run"].astype(str)
        self.seed_of: dict[str, Any] = dict(zip(runs, (int(s) for s in f["seed"])))
        self.arch_of: dict[str, str] = dict(zip(runs, f["arch"].astype(str)))
        self._groups: dict[GroupKey, dict[str, np.ndarray]] = {}
        final = f[f["milestone"].astype(str) == ""]  # a column names an extension from a milestone by a suffix no key parses
        for key, g in final.groupby(["prefix", "task", "mode", "length", "rung"], sort=False, observed=True):
            prefix, task, mode, length, rung = key
            self._groups[(str(prefix), str(task), str(mode), int(length), str(rung))] = {
                "run": g["run"].astype(str).to_numpy(),
                "doc": g["doc"].to_numpy(np.int64),
                "distance": g["distance"].to_numpy(np.int64),
                "correct": g["correct"].to_numpy(float),
                "lp": g["lp"].to_numpy(float),
            }
        self._cache: dict[str, DocValues | None] = {}

    @classmethod
    def load(cls, path: str | Path) -> Answers:
        """Read ``items.parquet``; DataError naming the file when it is larger than ``MAX_BYTES`` or not a
        readable answers table (its columns missing or of the wrong types)."""
        path = Path(path)
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise DataError(f"{path}: {size:,} bytes, more than the {MAX_BYTES:,} an answers table may hold")
        try:
            frame = pd.read_parquet(path, columns=list(ANSWER_COLUMNS))
            frame = frame.astype({c: ("string" if t == "string" else t) for c, t in ANSWER_COLUMNS.items()})
            return cls(frame, str(path))
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as e:
            raise DataError(f"{path}: not a readable answers table ({type(e).__name__}: {str(e)[:200]})") from None

    def selection(self, column: str) -> Selection | None:
        """The answers behind ``column``, or None for a column that is not a mean over answers."""
        key = ColumnKey.parse(column)
        if key is None:
            return None
        name, _, stat = key.metric.rpartition("_")
        if stat in ("ll", "gen"):
            stat, mode = "score", stat
        elif stat in STATS:
            mode = "dense"
        else:
            return None
        if key.base:
            candidates = [(BASE_PREFIX, name)]
        else:
            prefixes = sorted({k[0] for k in self._groups if k[0] != BASE_PREFIX}, key=len, reverse=True)
            candidates = [(p, name[len(p) :]) for p in prefixes if name.startswith(p) and len(name) > len(p)]
        for prefix, task in candidates:
            rungs = self._rungs(prefix, task, mode, key.length, key.rung)
            if rungs is not None:
                return Selection(prefix, task, mode, key.length, key.filter, stat, rungs)
        return None

    def _rungs(self, prefix: str, task: str, mode: str, length: int, rung: str) -> tuple[tuple[str, float], ...] | None:
        """The rungs (and weights) a column's rung label stands for, when the answers have them all."""
        if rung not in (LADDER_MEAN, LADDER_AUC):
            return ((rung, 1.0),) if (prefix, task, mode, length, rung) in self._groups else None
        budgets = sorted(
            b
            for (p, t, m, n, r) in self._groups
            if (p, t, m, n) == (prefix, task, mode, length) and (b := rung_budget(r)) is not None
        )
        if len(budgets) < 2:
            return None
        if rung == LADDER_MEAN:
            return tuple((rung_label(b), 1 / len(budgets)) for b in budgets)
        span = budgets[-1] - budgets[0]  # trapezoids over the extension steps, divided by the span
        w = dict.fromkeys(budgets, 0.0)
        for b0, b1 in zip(budgets, budgets[1:]):
            w[b0] += (b1 - b0) / 2 / span
            w[b1] += (b1 - b0) / 2 / span
        return tuple((rung_label(b), w[b]) for b in budgets)

    def doc_values(self, column: str) -> DocValues | None:
        """Per run, each document's contribution to ``column`` (None when the answers do not cover it)."""
        if column not in self._cache:
            self._cache[column] = self._doc_values(column)
        return self._cache[column]

    def _doc_values(self, column: str) -> DocValues | None:
        sel = self.selection(column)
        if sel is None:
            return None
        total: dict[str, np.ndarray] = {}
        counts: dict[str, int] = {}
        n_docs: int | None = None
        for rung, weight in sel.rungs:
            g = self._groups[(sel.prefix, sel.task, sel.mode, sel.length, rung)]
            D = int(g["doc"].max()) + 1
            if n_docs not in (None, D):
                return None
            n_docs = D
            keep = distance_mask(g["distance"], sel.filter)
            value = {"acc": g["correct"], "score": 100.0 * g["correct"], "lp": g["lp"]}[sel.stat]
            for run in np.unique(g["run"]):
                m = keep & (g["run"] == run)
                n = int(m.sum())
                if n == 0 or not np.all(np.isfinite(value[m])):
                    return None
                total[run] = total.get(run, 0.0) + weight * np.bincount(g["doc"][m], weights=value[m], minlength=D) / n
                counts.setdefault(run, n)
        return DocValues(total, counts, int(n_docs or 0)) if total else None

    def contrast(
        self, terms: Sequence[tuple[str, Sequence[str], float]], seeds: Iterable[Any] | None = None
    ) -> dict[str, Any] | None:
        """The effect ``Σ c · column(runs)`` paired by seed, from the answers (see the module docstring):
        each term is (column, runs, coefficient), runs of one seed averaged; only ``seeds`` (default:
        every seed all terms have). None when the answers do not cover a term or the terms' documents differ."""
        values: list[tuple[DocValues, list[str], float]] = []
        for col, runs, c in terms:
            v = self.doc_values(col)
            if v is None:
                return None
            values.append((v, list(runs), float(c)))
        if not values or len({v.n_docs for v, _, _ in values}) != 1:
            return None
        D = values[0][0].n_docs
        by_seed: list[dict[Any, list[np.ndarray]]] = []
        for v, runs, _ in values:
            groups: dict[Any, list[np.ndarray]] = {}
            for r in runs:
                if r in v.x:
                    groups.setdefault(self.seed_of[r], []).append(v.x[r])
            by_seed.append(groups)
        common = set.intersection(*(set(g) for g in by_seed))
        if seeds is not None:
            common &= set(seeds)
        if not common:
            return None
        order = sorted(common)
        z = np.zeros((len(order), D))
        for i, s in enumerate(order):
            for (_, _, c), groups in zip(values, by_seed):
                z[i] += D * c * np.mean(groups[s], axis=0)
        first, runs0 = values[0][0], values[0][1]
        n_answers = next((first.n[r] for r in runs0 if r in first.n), 0)
        return estimate(z, order, n_answers, self._range([(col, c) for col, _, c in terms]))

    def _range(self, terms: Sequence[tuple[str, float]]) -> tuple[float, float] | None:
        """The values ``Σ c · column`` can take when every column is a share of answers (an accuracy in
        [0, 1], a score in [0, 100]); None when one is a log-probability (unbounded)."""
        lo = hi = 0.0
        for col, c in terms:
            sel = self.selection(col)
            top = {"acc": 1.0, "score": 100.0}.get(sel.stat) if sel is not None else None
            if top is None:
                return None
            lo, hi = lo + min(0.0, c * top), hi + max(0.0, c * top)
        return lo, hi

    def arm_matrix(self, weights: Sequence[tuple[str, float]], arms: Sequence[Sequence[str]]) -> np.ndarray | None:
        """``y[a, s, d] = D · Σ w · column(arm a's run of seed s)[d]`` (arms × seeds × documents) over the seeds
        every arm has one run of: the layout :func:`archpool.analysis.crossed.arm_seed_variance` pools the
        seed variance over. None when the answers do not cover a column, the documents differ, or fewer than
        two seeds are common."""
        found = [(self.doc_values(col), w) for col, w in weights]
        values = [(v, w) for v, w in found if v is not None]
        if not found or len(values) < len(found) or len({v.n_docs for v, _ in values}) != 1:
            return None
        D = values[0][0].n_docs
        per_arm: list[dict[Any, str]] = []
        for runs in arms:
            by_seed: dict[Any, str] = {}
            for r in runs:
                if all(r in v.x for v, _ in values):
                    by_seed.setdefault(self.seed_of[r], r)
            per_arm.append(by_seed)
        common = sorted(set.intersection(*(set(a) for a in per_arm))) if per_arm else []
        if len(common) < 2 or len(per_arm) < 2:
            return None
        y = np.zeros((len(per_arm), len(common), D))
        for a, by_seed in enumerate(per_arm):
            for i, seed in enumerate(common):
                y[a, i] = D * sum(w * v.x[by_seed[seed]] for v, w in values)
        return y

    def check(self, df: pd.DataFrame, columns: Iterable[str]) -> None:
        """DataError when the answers do not belong to ``df``: a run the answers hold that results.csv lacks, a
        run whose seed or architecture differs between them (seed labels swapped would pair the wrong runs), or
        a run's value of a column, rebuilt from the answers, that is not the one results.csv holds (an answers
        table from another pool or another run of it)."""
        where = self.source or ANSWERS_FILE
        runs = [str(r) for r in df["run"]]
        extra = sorted(set(self.seed_of) - set(runs))
        if extra:
            raise DataError(
                f"{where}: run {extra[0]!r} ({len(extra)} in all) is in the answers but not in results.csv; "
                "the answers table belongs to another results table"
            )
        seeds = pd.to_numeric(df["seed"], errors="coerce") if "seed" in df.columns else pd.Series(np.nan, index=df.index)
        archs = df["arch"].astype(str) if "arch" in df.columns else None
        for i, run in enumerate(runs):
            if run not in self.seed_of:
                continue
            if pd.notna(seeds.iloc[i]) and float(seeds.iloc[i]) != float(self.seed_of[run]):
                raise DataError(
                    f"{where}: run {run!r} has seed {self.seed_of[run]} in the answers and {seeds.iloc[i]:g} in results.csv; "
                    "the answers table belongs to another results table"
                )
            if archs is not None and archs.iloc[i].strip() and archs.iloc[i] != self.arch_of[run]:
                raise DataError(
                    f"{where}: run {run!r} is architecture {self.arch_of[run]!r} in the answers and {archs.iloc[i]!r} in "
                    "results.csv; the answers table belongs to another results table"
                )
        for col in columns:
            v = self.doc_values(col) if col in df.columns else None
            if v is None:
                continue
            for run, x in zip(df["run"], pd.to_numeric(df[col], errors="coerce")):
                if run in v.x and pd.notna(x) and abs(v.value(run) - float(x)) > MATCH_TOLERANCE * max(1.0, abs(float(x))):
                    raise DataError(
                        f"{self.source or ANSWERS_FILE}: run {run!r}, column {col!r}: the answers give "
                        f"{v.value(run):.6f}, results.csv {float(x):.6f}; the answers table belongs to another results table"
                    )


def clipped(ci: list[float | None], bounds: tuple[float, float] | None) -> list[float | None]:
    """An interval held inside the values its statistic can take (a difference of accuracies in [−1, 1])."""
    if bounds is None or ci[0] is None or ci[1] is None:
        return ci
    return [max(bounds[0], ci[0]), min(bounds[1], ci[1])]


def estimate(
    z: np.ndarray, seeds: Sequence[Any], n_answers: int = 0, bounds: tuple[float, float] | None = None
) -> dict[str, Any]:
    """An effect from its seeds × documents matrix: mean, 95% interval (inside ``bounds``, the values the
    statistic can take), p, standard error and degrees of freedom (:mod:`archpool.analysis.crossed`), with the
    per-seed values and their sd; ``zero_variance`` when no seed and no document differs from another (a
    t interval then says nothing)."""
    c = crossed.components(z)
    per_seed = {s: float(v) for s, v in zip(seeds, z.mean(1))}
    x = np.asarray(list(per_seed.values()))
    return {
        "mean": c["mean"],
        "ci95": [None, None] if c["se"] == 0 else clipped(crossed.interval(c["mean"], c["se"], c["df"]), bounds),
        "range": list(bounds) if bounds is not None else None,
        "zero_variance": c["se"] == 0,
        "sd": float(x.std(ddof=1)) if len(x) > 1 else None,
        "n": len(x),
        "per_seed": per_seed,
        "se": c["se"],
        "df": c["df"],
        "p": crossed.t_test(c["mean"], c["se"], c["df"]),
        "source": "answers",
        "n_docs": c["n_docs"],
        "n_answers": n_answers,
        "components": {k: c[k] for k in ("var_seed", "var_doc", "var_res")},
    }


def from_seeds(per_seed: Mapping[Any, float]) -> dict[str, Any]:
    """An effect from its per-seed values alone (no answers): the paired t over seeds. Identical
    per-seed values give no spread to test against (p None unless they are all 0)."""
    x = np.asarray(list(per_seed.values()), float)
    n = len(x)
    mean = float(x.mean()) if n else None
    sd = float(x.std(ddof=1)) if n > 1 else None
    se = sd / np.sqrt(n) if sd is not None else None
    df = float(n - 1) if n > 1 else None
    return {
        "mean": mean,
        "ci95": crossed.interval(mean, se, df) if se else [None, None],
        "sd": sd,
        "n": n,
        "per_seed": dict(per_seed),
        "se": se,
        "df": df,
        "p": crossed.t_test(mean, se, df),
        "source": "seeds",
    }
