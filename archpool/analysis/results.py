"""What the analysis hands the report: typed results (the verdict per axis, the transfer cells, the
predictors, the matched-pair effects), the words their tests allow, and the one precision every effect is
written with. Each result's ``to_dict()`` is its entry in ``analysis.json``.

Nothing here computes a statistic: the results are made by :mod:`archpool.analysis.report_data`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from archpool.columns import RULER_TASKS_TOTAL

# What an effect's tests allow one to say (docs/extensibility.md, "Statistics: the words")
EFFECT = "effect"  # beyond noise (Holm) and at least the smallest effect of interest
BELOW_INTEREST = "below interest"  # beyond noise, but smaller than the smallest effect of interest
EQUIVALENT = "equivalent"  # not beyond noise, and the equivalence test rules out the smallest effect of interest
UNRESOLVED = "unresolved"  # neither: the interval allows no effect and effects larger than the smallest of interest
UNTESTED = "untested"  # no test: one seed and no answers, or no spread to test against

# What a transfer cell says about the paper's effect (archpool.analysis.transfer)
REPRODUCES, CONTRADICTS, SMALLER, CANNOT_RESOLVE = "reproduces", "contradicts", "smaller than the paper's", "cannot resolve"
CEILING = "at the ceiling"
NO_LARGER = "no effect larger than the smallest of interest"
BELOW = "beyond noise, below the smallest of interest"

Interval = tuple[float | None, float | None]


def fmt(v: float | None, signed: bool = True, digits: int = 3) -> str:
    """One precision for every accuracy and effect in the report: ``+0.035``, ``—`` when absent."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def fmt_ci(ci: Interval | list[float | None] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return ""
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def target_label(a: Mapping[str, Any]) -> str:
    """The pool's ranking named as what it averages: a RULER mean over fewer than RULER's 13 tasks says
    so, since the paper's RULER averages all 13 (the two are compared as rankings, never as scores)."""
    k = a.get("target_tasks")
    return "this pool's target" + (
        f" (RULER, {k} of {RULER_TASKS_TOTAL} tasks)" if k is not None and k < RULER_TASKS_TOTAL else ""
    )


@dataclass(frozen=True)
class AxisVerdict:
    """One row of the verdict table (``None``: not measured)."""

    feature: str
    name: str
    change: str
    n: int
    after: float | None
    after_ci: Interval
    seed_sd: float | None
    beyond_noise: bool  # the test of the effect after extension, Holm-corrected over the axes, below 0.05
    claim: str  # what the tests allow one to say (EFFECT, EQUIVALENT, ...)
    before: float | None
    before_ci: Interval
    before_present: bool  # the effect at each arm's own length before extension is itself an effect
    did: float | None
    did_ci: Interval
    did_from: str | None
    did_claim: str  # the same claim for the extension-only effect (difference in differences)
    p: float | None  # the test of the effect after extension
    p_holm: float | None  # Holm-adjusted over the verdict's axes
    p_equivalent_holm: float | None  # the equivalence test against ± min_effect, Holm-adjusted likewise
    did_p_holm: float | None  # the same for the extension-only effect
    mde: float | None  # smallest effect the design detects with 80% power at 0.05 / axes
    seeds_needed: int | None  # seeds needed to detect the observed effect at that level (None: not reachable)
    min_effect: float  # the smallest effect of interest
    source: str  # "answers" (seeds and documents as noise) or "seeds" (seed means only)
    co_column: str | None  # the co-target: the target's answers scored by the gold log-probability
    co_after: float | None
    co_ci: Interval
    co_claim: str
    treated: float | None  # the same gap with both arms given the second recipe (a treatment)
    treated_ci: Interval
    treated_recipe: str | None
    ceiling: float | None  # the baseline's accuracy at the target when it and the arm's are within min_effect of 1
    paper_points: float | None
    paper_multiple: int | None
    meaning: str
    carries: str = ""  # whether this scale's answer is known to carry to 7B (the scale ladder and the transfer score)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TransferCell:
    """One axis at one multiple of the pretraining context."""

    feature: str
    multiple: int
    length: int
    column: str
    n: int
    effect: float | None
    ci95: Interval
    relative: float | None  # effect / the baseline's mean
    p_holm: float | None
    p_equivalent_holm: float | None  # the equivalence test against ± min_effect, Holm over the table
    claim: str
    mde: float | None
    min_effect: float
    paper_points: float | None
    paper_relative: float | None  # the paper's effect / its baseline's HELMET
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Predictor:
    """One fitted predictor of the target: the feature count, a four-axis model or a metric column.
    ``record`` is the fit as the analysis writes it (every statistic, in its order)."""

    name: str
    kind: str  # "count", "axes" or "metric"
    phase: str  # a metric's phase ("pre", "post", ...); "" for the design's models
    n: int
    n_groups: int | None
    r2: float | None
    loo_r2: float | None
    coef: float | None
    ci95: Interval
    p: float | None
    note: str
    record: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> Predictor:
        ci = d.get("ci95") or (None, None)
        return cls(
            name=name,
            kind=d["kind"],
            phase=d.get("phase", ""),
            n=d["n"],
            n_groups=d.get("n_groups"),
            r2=d.get("r2"),
            loo_r2=d.get("loo_r2"),
            coef=d.get("coef"),
            ci95=(ci[0], ci[1]),
            p=d.get("p"),
            note=d.get("note", ""),
            record=dict(d),
        )

    @property
    def known_before_extension(self) -> bool:
        """Fixed by the design or measured before extension."""
        return self.kind != "metric" or self.phase == "pre"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.record)


@dataclass(frozen=True)
class PairEffect:
    """Matched-pair effects summarised: of one axis change (``axis``: ``from_`` → ``to``) or of one count
    feature switched on (``feature``), next to the seed sd (flagged when smaller)."""

    n: int
    mean: float | None
    sd: float | None
    min: float | None
    max: float | None
    seed_sd: float | None
    below_seed_sd: bool
    axis: str | None = None
    from_: Any = None
    to: Any = None
    feature: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PairEffect:
        labels = {"axis": d["axis"], "from_": d["from"], "to": d["to"]} if "axis" in d else {"feature": d["feature"]}
        stats = {k: d[k] for k in ("n", "mean", "sd", "min", "max", "seed_sd", "below_seed_sd")}
        return cls(**stats, **labels)

    def to_dict(self) -> dict[str, Any]:
        labels = {"axis": self.axis, "from": self.from_, "to": self.to} if self.axis is not None else {"feature": self.feature}
        return {
            **labels,
            "n": self.n,
            "mean": self.mean,
            "sd": self.sd,
            "min": self.min,
            "max": self.max,
            "seed_sd": self.seed_sd,
            "below_seed_sd": self.below_seed_sd,
        }


@dataclass(frozen=True)
class ReportData:
    """Everything the report lays out: the analysis of the (merged) results table, typed where the report
    reads it, its findings, and its tables as data (``tables``: name → frame, each also a CSV).

    ``analysis`` is the :func:`archpool.analysis.summary.analyze` record; ``to_dict()`` is analysis.json."""

    analysis: Mapping[str, Any]
    table: pd.DataFrame = field(repr=False)  # the results table the analysis used (identical columns merged)
    findings: Mapping[str, Any]
    aliases: Mapping[str, list[str]]  # a metric column → the identical columns merged into it
    predictors: tuple[Predictor, ...]
    axis_effects: tuple[PairEffect, ...]
    feature_effects: tuple[PairEffect, ...]
    verdicts: tuple[AxisVerdict, ...]
    transfer: tuple[TransferCell, ...]
    rung_zero: tuple[Mapping[str, Any], ...]  # per axis at the ladder's rung 0: feature, column, effect, base_mean, test
    tables: Mapping[str, pd.DataFrame] = field(repr=False)
    min_effect: float
    long_ctx: int | None  # the longest pretraining context of the runs analysed
    target_multiple: int | None  # the target's length as a multiple of ``long_ctx``

    @property
    def target(self) -> str:
        target: str = self.analysis["target"]
        return target

    def to_dict(self) -> dict[str, Any]:
        """The analysis.json record: the analysis, its findings, the merged columns, the verdict and transfer."""
        return {
            **self.analysis,
            "predictors": {p.name: p.to_dict() for p in self.predictors},
            "axis_effects": [e.to_dict() for e in self.axis_effects],
            "feature_effects": [e.to_dict() for e in self.feature_effects],
            "findings": self.findings,
            "merged_columns": self.aliases,
            "verdict": [v.to_dict() for v in self.verdicts],
            "transfer": [c.to_dict() for c in self.transfer],
        }


def typed_predictors(predictors: Mapping[str, Mapping[str, Any]]) -> tuple[Predictor, ...]:
    return tuple(Predictor.from_dict(k, p) for k, p in predictors.items())


def typed_effects(effects: Sequence[Mapping[str, Any]]) -> tuple[PairEffect, ...]:
    return tuple(PairEffect.from_dict(e) for e in effects)
