"""Does a pool's answer carry to the paper's 7B pool? The transfer score of its single-feature arms.

A pool's *single-feature arms* are pairs of architectures that differ in one of five features and in
nothing else of their design: QK-norm (of any kind), GQA (fewer KV heads than query heads), SWA, a short
pretraining context, and post-sublayer norm. The paper's matched pairs are the same thing among its 26
published runs (:func:`paper_profile`). For each feature and each of four lengths (the pool's lengths that
stand for the paper's HELMET at 8K, 16K, 32K and 64K: 1×, 2×, 4× and 8× the pretraining context unless
told otherwise), an effect is the mean over seeds of the seed-paired difference of the two arms.

- **Standardised effects.** A pool effect is divided by the standard deviation (ddof 1) of the group's
  architecture means at that length; a paper effect by the standard deviation of the 26 runs' HELMET at
  that length. Both are then in units of "spread between the architectures measured", whatever the
  metric (accuracy, log-probability, HELMET points).
- **The transfer score** is the cosine similarity of the two standardised profiles over every (feature,
  length) cell both have: 1 when the pool's effects are proportional to the paper's, 0 when unrelated,
  negative when reversed.
- **Its interval** resamples the pool's seeds with replacement (one draw for every arm, so the pairing
  holds) and adds to every published score independent normal noise of the paper's run-to-run standard
  deviation at that length (:func:`paper_noise_sd`, from its replicate pairs), 2,000 draws, percentile.
- **A cell's own interval** comes from one additive model over every architecture of the group at that
  length (value = architecture + seed + noise): the seed variance is pooled across the arms, with
  (A − 1)(S − 1) degrees of freedom instead of S − 1 for one pair.

The rule that uses it to choose a small-scale design is docs/results/transfer/rule.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from scipy import stats as sps

from archpool.analysis.effects import arch_labels
from archpool.analysis.table import features
from archpool.axes import FEATURES, N_KV_HEADS, NORM, POST_NORM, QK_NORM
from archpool.columns import ColumnKey
from archpool.paper.table import HELMET_COLUMNS, PaperRun, paper_runs

CARRY_FEATURES = (*FEATURES, POST_NORM)
PAPER_MULTIPLES = (1, 2, 4, 8)  # HELMET 8K, 16K, 32K, 64K of the paper's 8K pretraining context
BOOTSTRAP = 2000
ALPHA = 0.05
GROUP_COLUMNS = ("d_model", "n_layers", "n_heads", "d_ff_ratio", "init", "fp8")
"""Design columns that, where a table has them, must agree for two architectures to form a pair."""


# ---------------------------------------------------------------------------------------------
# the paper's side


def paper_flags(run: PaperRun) -> dict[str, int]:
    """The five features of a published run: the paper's four flags and post-sublayer norm."""
    return {**run.flags, POST_NORM: int(run.design[NORM] == "post")}


def _differ_in_one(a: dict[str, int], b: dict[str, int], feature: str) -> bool:
    return a[feature] == 1 and b[feature] == 0 and all(a[f] == b[f] for f in CARRY_FEATURES if f != feature)


def paper_pairs(feature: str) -> list[tuple[PaperRun, PaperRun]]:
    """The published (with, without) pairs for ``feature``: runs whose five features differ in that one
    only and whose fp8 agrees; the pairs within one init group where the feature has any, else all."""
    runs = paper_runs()
    pairs = [
        (a, b)
        for a in runs
        for b in runs
        if _differ_in_one(paper_flags(a), paper_flags(b), feature) and a.design["fp8"] == b.design["fp8"]
    ]
    same_init = [(a, b) for a, b in pairs if a.design["init"] == b.design["init"]]
    return same_init or pairs


def replicate_pairs() -> list[tuple[PaperRun, PaperRun]]:
    """Published runs that share every feature, QK-norm kind and KV-head count: they differ only in init
    group, d_ff or fp8, so their differences measure the paper's run-to-run noise."""
    runs = paper_runs()
    key = [(paper_flags(r), r.design[QK_NORM], r.design[N_KV_HEADS]) for r in runs]
    return [(runs[i], runs[j]) for i in range(len(runs)) for j in range(i + 1, len(runs)) if key[i] == key[j]]


@cache
def paper_noise_sd() -> tuple[float, ...]:
    """Per HELMET length, the paper's run-to-run standard deviation: the RMS difference of its replicate
    pairs divided by √2 (two runs' noise in each difference)."""
    pairs = replicate_pairs()
    return tuple(
        float(np.sqrt(np.mean([(cast(float, a.scores[c]) - cast(float, b.scores[c])) ** 2 for a, b in pairs])) / math.sqrt(2))
        for c in HELMET_COLUMNS  # the paper publishes every run's HELMET scores
    )


def _paper_matrix() -> tuple[list[PaperRun], np.ndarray]:
    runs = list(paper_runs())
    return runs, np.array([[r.scores[c] for c in HELMET_COLUMNS] for r in runs], float)


@dataclass(frozen=True)
class PaperProfile:
    """The paper's per-feature effects (HELMET points, features × the four lengths), the spread between
    its runs at each length, and the pairs behind each feature."""

    effects: np.ndarray
    sd: np.ndarray
    pairs: dict[str, list[tuple[str, str]]]

    @property
    def standardised(self) -> np.ndarray:
        z: np.ndarray = self.effects / self.sd
        return z


def _pair_index() -> tuple[dict[str, list[tuple[int, int]]], dict[str, list[tuple[str, str]]]]:
    runs = list(paper_runs())
    where = {r.name: i for i, r in enumerate(runs)}
    index = {f: [(where[a.name], where[b.name]) for a, b in paper_pairs(f)] for f in CARRY_FEATURES}
    names = {f: [(a.name, b.name) for a, b in paper_pairs(f)] for f in CARRY_FEATURES}
    return index, names


def _profile_of(scores: np.ndarray, index: dict[str, list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean paired differences and the between-run SD of a (runs × lengths) score matrix, or
    of a stack of them (draws × runs × lengths)."""
    effects = np.stack(
        [
            np.mean([scores[..., i, :] - scores[..., j, :] for i, j in index[f]], axis=0)
            if index[f]
            else np.full(scores[..., 0, :].shape, np.nan)
            for f in CARRY_FEATURES
        ],
        axis=-2,
    )
    return effects, scores.std(axis=-2, ddof=1)


@cache
def paper_profile() -> PaperProfile:
    """The paper's profile as published (see the module docstring)."""
    _, scores = _paper_matrix()
    index, names = _pair_index()
    effects, sd = _profile_of(scores, index)
    return PaperProfile(effects=effects, sd=sd, pairs=names)


def paper_draws(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` standardised paper profiles (n × features × lengths), each from the published scores plus
    independent normal noise of :func:`paper_noise_sd` per run and length."""
    _, scores = _paper_matrix()
    index, _ = _pair_index()
    noisy = scores[None] + rng.normal(size=(n, *scores.shape)) * np.array(paper_noise_sd())[None, None, :]
    effects, sd = _profile_of(noisy, index)
    z: np.ndarray = effects / sd[:, None, :]
    return z


# ---------------------------------------------------------------------------------------------
# the pool's side


@dataclass(frozen=True)
class ArmPair:
    """Two architectures of a pool that differ in ``feature`` only (``with_`` has it)."""

    feature: str
    with_: str
    without: str
    group: tuple[Any, ...]


def arm_flags(df: pd.DataFrame, short_ctx: int) -> pd.DataFrame:
    """Per run: its architecture, the five features and the group (the design columns pairs must share)."""
    f = features(df, short_ctx)
    out = pd.DataFrame({"arch": arch_labels(df), "seed": pd.to_numeric(df["seed"], errors="coerce")}, index=df.index)
    for name in FEATURES:
        out[name] = f[name].astype(int)
    out[POST_NORM] = (df[NORM].astype(str) == "post").astype(int)
    cols = [c for c in GROUP_COLUMNS if c in df.columns]
    out["group"] = [tuple(f"{c}={_plain(v)}" for c, v in zip(cols, row)) for row in df[cols].itertuples(index=False)]
    return out


def _plain(v: Any) -> str:
    """A design value as written: an integral float without its ``.0``."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def matched_arm_pairs(flags: pd.DataFrame) -> list[ArmPair]:
    """Every (with, without) pair of architectures of one group whose five features differ in one only."""
    archs = flags.drop_duplicates("arch").set_index("arch")
    out = []
    for a, ra in archs.iterrows():
        for b, rb in archs.iterrows():
            if ra["group"] != rb["group"]:
                continue
            fa = {f: int(ra[f]) for f in CARRY_FEATURES}
            fb = {f: int(rb[f]) for f in CARRY_FEATURES}
            for feature in CARRY_FEATURES:
                if _differ_in_one(fa, fb, feature):
                    out.append(ArmPair(feature, str(a), str(b), ra["group"]))
    return out


def arm_values(
    df: pd.DataFrame, flags: pd.DataFrame, archs: Sequence[str], columns: Sequence[str]
) -> tuple[np.ndarray, list[int]]:
    """(architectures × seeds × lengths) values of ``columns`` over the seeds every architecture has a
    finite value at every length for, and those seeds."""
    per: dict[str, dict[int, np.ndarray]] = {}
    for arch in archs:
        rows = flags.index[flags["arch"] == arch]
        per[arch] = {}
        for i in rows:
            v = np.array([pd.to_numeric(df.at[i, c], errors="coerce") if c in df.columns else np.nan for c in columns], float)
            if np.all(np.isfinite(v)) and pd.notna(flags.at[i, "seed"]):
                per[arch][int(flags.at[i, "seed"])] = v
    seeds = sorted(set.intersection(*(set(p) for p in per.values()))) if per else []
    if not seeds:
        return np.empty((len(archs), 0, len(columns))), []
    return np.array([[per[a][s] for s in seeds] for a in archs]), seeds


def pooled_interval(values: np.ndarray, i: int, j: int, level: float = 0.95) -> dict[str, Any]:
    """The paired effect ``values[i] − values[j]`` (architectures × seeds of one length) with its interval
    from the additive model over every architecture (seed variance pooled across the arms)."""
    a, s = values.shape
    effect = float(values[i].mean() - values[j].mean())
    if s < 2 or a < 2:
        return {"effect": effect, "se": None, "df": None, "ci95": [None, None], "p": None}
    resid = values - values.mean(1, keepdims=True) - values.mean(0, keepdims=True) + values.mean()
    df = (a - 1) * (s - 1)
    ms = float((resid**2).sum() / df)
    se = math.sqrt(2 * ms / s)
    if se == 0:
        return {"effect": effect, "se": 0.0, "df": df, "ci95": [effect, effect], "p": 1.0 if effect == 0 else 0.0}
    h = float(sps.t.ppf(0.5 + level / 2, df)) * se
    p = float(2 * sps.t.sf(abs(effect) / se, df))
    return {"effect": effect, "se": se, "df": df, "ci95": [effect - h, effect + h], "p": p}


def _effects(values: np.ndarray, pairs: Sequence[tuple[str, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per feature the mean over its pairs of the seed-mean difference, standardised by the SD of the
    architecture means (values: [draws ×] architectures × seeds × lengths)."""
    means = values.mean(axis=-2)  # [draws ×] archs × lengths
    sd = means.std(axis=-2, ddof=1)
    rows = []
    for feature in CARRY_FEATURES:
        mine = [(i, j) for f, i, j in pairs if f == feature]
        rows.append(
            np.mean([means[..., i, :] - means[..., j, :] for i, j in mine], axis=0) if mine else np.full(sd.shape, np.nan)
        )
    effects = np.stack(rows, axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return effects, effects / sd[..., None, :]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity over the last two axes, cells where either is NaN left out."""
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = np.where(ok, a, 0.0), np.where(ok, b, 0.0)
    num = (a * b).sum(axis=(-2, -1))
    den = np.sqrt((a * a).sum(axis=(-2, -1)) * (b * b).sum(axis=(-2, -1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


@dataclass
class TransferScore:
    """One group's transfer score and its cells (see the module docstring)."""

    group: tuple[Any, ...]
    columns: list[str]
    archs: list[str]
    seeds: list[int]
    score: float | None
    ci95: list[float | None]
    cells: list[dict[str, Any]] = field(default_factory=list)
    not_mastered: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": list(self.group),
            "columns": self.columns,
            "archs": self.archs,
            "seeds": self.seeds,
            "score": self.score,
            "ci95": self.ci95,
            "cells": self.cells,
            "not_mastered": self.not_mastered,
        }

    def resolved_in_paper_direction(self, multiple: int = PAPER_MULTIPLES[-1]) -> list[str]:
        """The paper's four features whose effect at ``multiple`` has an interval that excludes 0 on the
        paper's side."""
        out = []
        for c in self.cells:
            lo, hi = c["ci95"]
            if c["multiple"] != multiple or c["feature"] not in FEATURES or lo is None or hi is None:
                continue
            if (c["paper_effect"] < 0 and hi < 0) or (c["paper_effect"] > 0 and lo > 0):
                out.append(c["feature"])
        return out


def _f(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def transfer_scores(
    df: pd.DataFrame,
    columns: Sequence[str] | Callable[[int], str],
    short_ctx: int,
    *,
    lengths: Sequence[int] | None = None,
    sign: float = 1.0,
    n_boot: int = BOOTSTRAP,
    rng_seed: int = 0,
    keep_unmastered: bool = False,
) -> list[TransferScore]:
    """One :class:`TransferScore` per group of the table that has matched arms.

    ``columns``: the four results columns that stand for the paper's HELMET at 8K/16K/32K/64K, or a
    function of a length giving the column at it (with ``lengths``); ``sign`` −1 for a lower-is-better
    metric. Runs that did not master their own length (a ``mastered`` column of 0) are left out and named,
    unless ``keep_unmastered`` (a design search scores every design and judges mastery apart)."""
    if callable(columns):
        if lengths is None or len(lengths) != len(PAPER_MULTIPLES):
            raise ValueError(f"a column function needs {len(PAPER_MULTIPLES)} lengths")
        cols = [columns(n) for n in lengths]
    else:
        cols = list(columns)
    if len(cols) != len(PAPER_MULTIPLES):
        raise ValueError(f"{len(PAPER_MULTIPLES)} columns expected (the paper's 8K/16K/32K/64K), got {len(cols)}")
    d = df[df["state"] != "failed"] if "state" in df.columns else df
    not_mastered: list[str] = []
    if "mastered" in d.columns:
        bad = pd.to_numeric(d["mastered"], errors="coerce") == 0
        not_mastered = sorted(str(r) for r in d.loc[bad, "run"])
        if not keep_unmastered:
            d = d[~bad]
    d = d.reset_index(drop=True)
    flags = arm_flags(d, short_ctx)
    pairs = matched_arm_pairs(flags)
    groups = list(dict.fromkeys(p.group for p in pairs))
    paper = paper_profile()
    rng = np.random.default_rng(rng_seed)
    out = []
    for group in groups:
        archs = sorted(set(flags.loc[flags["group"] == group, "arch"]))
        values, seeds = arm_values(d, flags, archs, cols)
        values = sign * values
        index = [(p.feature, archs.index(p.with_), archs.index(p.without)) for p in pairs if p.group == group]
        if len(seeds) == 0:
            out.append(TransferScore(group, cols, archs, [], None, [None, None], [], not_mastered))
            continue
        effects, z = _effects(values, index)
        score = _f(cosine(z, paper.standardised))
        draws = rng.integers(0, len(seeds), (n_boot, len(seeds)))
        _, z_boot = _effects(values[:, draws, :].transpose(1, 0, 2, 3), index)
        boot = cosine(z_boot, paper_draws(n_boot, rng))
        boot = boot[np.isfinite(boot)]
        ci: list[float | None] = (
            [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
            if len(boot) >= 20 and len(seeds) > 1
            else [None, None]
        )
        cells = []
        for fi, feature in enumerate(CARRY_FEATURES):
            mine = [(i, j) for f, i, j in index if f == feature]
            for k, multiple in enumerate(PAPER_MULTIPLES):
                if not mine:
                    continue
                i, j = mine[0]
                test = pooled_interval(values[:, :, k], i, j)
                cells.append(
                    {
                        "feature": feature,
                        "multiple": multiple,
                        "column": cols[k],
                        "with": archs[i],
                        "without": archs[j],
                        "pairs": len(mine),
                        "effect": _f(effects[fi, k]),
                        "ci95": test["ci95"] if len(mine) == 1 else [None, None],
                        "p": test["p"] if len(mine) == 1 else None,
                        "z": _f(z[fi, k]),
                        "paper_effect": _f(paper.effects[fi, k]),
                        "paper_z": _f(paper.standardised[fi, k]),
                        "same_sign": bool(np.sign(effects[fi, k]) == np.sign(paper.effects[fi, k])),
                    }
                )
        out.append(TransferScore(group, cols, archs, seeds, score, ci, cells, not_mastered))
    return out


# ---------------------------------------------------------------------------------------------
# a pool's target as a profile


@dataclass(frozen=True)
class Measure:
    """A scored measure across lengths: the target's metric, rung and distance filter, the filter either
    fixed (``d>128``) or the far half of each length (``d>{n/2}``, when the target's is half its length)."""

    key: ColumnKey  # of the target
    far_half: bool

    @classmethod
    def of(cls, target: str) -> Measure | None:
        key = ColumnKey.parse(target)
        if key is None:
            return None
        return cls(key, key.filter == f"d>{key.length // 2}")

    def column(self, length: int) -> str:
        return self.key.but(length=length, filter=f"d>{length // 2}" if self.far_half else self.key.filter).format()

    def template(self) -> str:
        return self.column(0).replace("@0", "@{n}").replace("[d>0]", "[d>{n/2}]")


def long_context(df: pd.DataFrame) -> int | None:
    """The table's long pretraining context: its largest ``pretrain_ctx``."""
    ctx = pd.to_numeric(df.get("pretrain_ctx"), errors="coerce").dropna()
    return int(ctx.max()) if len(ctx) else None


def carry_summary(
    df: pd.DataFrame,
    target: str,
    short_ctx: int,
    *,
    lengths: Sequence[int] | None = None,
    n_boot: int = BOOTSTRAP,
    rng_seed: int = 0,
    keep_unmastered: bool = False,
) -> dict[str, Any] | None:
    """The transfer score of every group of matched single-feature arms on the target's measure at
    ``lengths`` (default: 1×, 2×, 4× and 8× the long pretraining context, for the paper's 8K-64K); None
    when the table has no matched arms or the target is not a score at a length."""
    from archpool.columns import lower_is_better

    measure = Measure.of(target)
    long_ctx = long_context(df)
    if measure is None or long_ctx is None:
        return None
    lengths = list(lengths) if lengths is not None else [long_ctx * m for m in PAPER_MULTIPLES]
    cols = [measure.column(n) for n in lengths]
    if not any(c in df.columns for c in cols):
        return None
    scores = transfer_scores(
        df,
        cols,
        short_ctx,
        sign=-1.0 if lower_is_better(target) else 1.0,
        n_boot=n_boot,
        rng_seed=rng_seed,
        keep_unmastered=keep_unmastered,
    )
    if not scores:
        return None
    paper = paper_profile()
    return {
        "measure": measure.template(),
        "lengths": lengths,
        "paper_columns": list(HELMET_COLUMNS),
        "paper_pairs": {f: len(paper.pairs[f]) for f in CARRY_FEATURES},
        "paper_noise_sd": list(paper_noise_sd()),
        "groups": [s.to_dict() | {"resolved_8x": s.resolved_in_paper_direction()} for s in scores],
    }


# ---------------------------------------------------------------------------------------------
# does this answer carry? the scale ladder's evidence

LADDER_EVIDENCE = Path(__file__).with_name("transfer_ladder.json")
"""The chosen design's scale ladder, per feature and width (written by scripts/transfer_ladder.py from its runs)."""


@cache
def ladder_evidence(path: Path = LADDER_EVIDENCE) -> dict[str, Any] | None:
    """The shipped scale ladder's evidence, or None where none is shipped."""
    import json

    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) and isinstance(data.get("features"), dict) else None


def pool_width(carry: dict[str, Any] | None) -> int | None:
    """The d_model of a pool's (first) group of single-feature arms, when its table says it."""
    for g in (carry or {}).get("groups") or []:
        for part in g.get("group") or []:
            name, _, value = str(part).partition("=")
            if name == "d_model" and value.isdigit():
                return int(value)
    return None


def pool_cell(carry: dict[str, Any] | None, feature: str, multiple: int = PAPER_MULTIPLES[-1]) -> dict[str, Any] | None:
    """A pool's own transfer cell for ``feature`` at ``multiple`` (its first group), if it has one."""
    groups = (carry or {}).get("groups") or []
    return (
        next((c for c in groups[0]["cells"] if c["feature"] == feature and c["multiple"] == multiple), None) if groups else None
    )


def cell_resolved(cell: dict[str, Any]) -> str | None:
    """``"paper"`` when the cell's interval excludes 0 on the paper's side, ``"opposite"`` on the other, else None."""
    lo, hi = cell.get("ci95") or (None, None)
    paper = cell.get("paper_effect")
    if lo is None or hi is None or not paper:
        return None
    if (paper < 0 and hi < 0) or (paper > 0 and lo > 0):
        return "paper"
    if (paper < 0 and lo > 0) or (paper > 0 and hi < 0):
        return "opposite"
    return None


def carries(feature: str, cell: dict[str, Any] | None, evidence: dict[str, Any] | None, width: int | None) -> str:
    """Whether this scale's answer for ``feature`` is known to carry to the paper's 7B pool, in words: from the
    scale ladder (``evidence``: the smallest width from which the effect has the paper's sign, resolved, at every
    larger rung) and from the pool's own transfer cell at 8× (``cell``)."""
    ev = ((evidence or {}).get("features") or {}).get(feature)
    if ev is None:
        words = "unknown: no scale ladder has measured this feature"
    else:
        widths = (evidence or {}).get("widths") or []
        design = (evidence or {}).get("design", "the shipped design")
        smallest = ev.get("smallest_width")
        per_width = ev.get("per_width") or {}
        opposite = [w for w in widths if (per_width.get(str(w)) or {}).get("opposite_resolved")]
        if smallest is None:
            words = (
                f"not known to carry: on the {design} ladder (d_model {', '.join(map(str, widths))}) its effect never has the "
                "paper's sign beyond noise at every larger width"
                + (f"; the opposite sign is resolved at d_model {', '.join(map(str, opposite))}" if opposite else "")
            )
        elif width is not None and width < smallest:
            words = f"not at this width: the {design} ladder resolves the paper's sign from d_model {smallest} up"
        else:
            words = f"carries on the {design} ladder: the paper's sign, resolved from d_model {smallest} up"
    if cell is not None and cell.get("z") is not None and cell.get("paper_z") is not None:
        state = cell_resolved(cell)
        here = {"paper": "the paper's sign, resolved", "opposite": "the opposite sign, resolved"}.get(state or "", "not resolved")
        words += f"; this pool at 8×: z {cell['z']:+.2f} against the paper's {cell['paper_z']:+.2f} ({here})"
    return words
