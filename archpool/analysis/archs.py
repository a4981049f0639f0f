"""Per-architecture views of a results table: which runs share an architecture, their mean with a 95%
t-interval over seeds, and the families of columns a target belongs to (by length, distance, rung).

An architecture is the pool's ``arch`` column (the name a pool gives a recipe); without it, the run name
less its seed suffix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from archpool.columns import ColumnKey, keyed_columns

SEED_SUFFIX = re.compile(r"_s\d+$")
_BOUND = re.compile(r"(?:(?P<lo>\d+)<)?d(?:(?P<op><=|>)(?P<hi>\d+))?")


@dataclass(frozen=True)
class Mean:
    """Mean over seeds with a 95% t-interval (``lo``/``hi`` equal the mean for one seed)."""

    mean: float
    lo: float
    hi: float
    n: int


def arch_of(df: pd.DataFrame) -> pd.Series:
    """The architecture label of every row."""
    if "arch" in df.columns and df["arch"].notna().all() and (df["arch"].astype(str) != "").all():
        return df["arch"].astype(str)
    return df["run"].astype(str).str.replace(SEED_SUFFIX, "", regex=True)


def arch_order(df: pd.DataFrame) -> list[str]:
    """Architectures in the pool's order (first appearance)."""
    return list(dict.fromkeys(arch_of(df)))


def mean_ci(values: pd.Series | list[float]) -> Mean | None:
    v = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), dtype=float)
    if len(v) == 0:
        return None
    m = float(v.mean())
    if len(v) < 2:
        return Mean(m, m, m, 1)
    h = float(sps.t.ppf(0.975, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return Mean(m, m - h, m + h, len(v))


def per_arch(df: pd.DataFrame, column: str) -> dict[str, Mean]:
    """Mean ± CI of ``column`` per architecture (architectures without a value are left out)."""
    if column not in df.columns:
        return {}
    arch = arch_of(df)
    out = {}
    for a in arch_order(df):
        m = mean_ci(df.loc[arch == a, column])
        if m is not None:
            out[a] = m
    return out


def _by_length(df: pd.DataFrame, like: ColumnKey) -> dict[int, str]:
    """``{length: column}`` of the columns that are ``like`` at another length, shortest first."""
    out = {k.length: c for c, k in keyed_columns(df.columns).items() if k == like.but(length=k.length)}
    return dict(sorted(out.items()))


def length_columns(df: pd.DataFrame, target: str) -> dict[int, str]:
    """The target's metric, filter and rung at every evaluated length: ``{length: column}``."""
    p = ColumnKey.parse(target)
    return _by_length(df, p) if p else {}


def base_length_columns(df: pd.DataFrame, target: str) -> dict[int, str]:
    """Before extension: the target's metric and filter at every length it was evaluated (``base_`` columns)."""
    p = ColumnKey.parse(target)
    return _by_length(df, p.but(base=True, rung="")) if p and not p.base else {}


def _bucket_key(label: str) -> tuple[float, float] | None:
    """``(lo, hi)`` of a distance bucket label (``64<d<=128`` → (64, 128); ``d<=64`` → (0, 64)); None for tails."""
    m = _BOUND.fullmatch(label)
    if not m:
        return None
    if m["lo"] is not None and m["op"] == "<=":
        return float(m["lo"]), float(m["hi"])
    if m["lo"] is None and m["op"] == "<=":
        return 0.0, float(m["hi"])
    if m["lo"] is None and m["op"] == ">":
        return None  # a tail (``d>128``) overlaps the buckets
    return None


def distance_columns(df: pd.DataFrame, target: str) -> dict[str, str]:
    """The disjoint key–query distance buckets of the target's metric at its length and rung, nearest first,
    plus the last open bucket (``d>512``) when it exists: ``{label: column}``."""
    p = ColumnKey.parse(target)
    if p is None:
        return {}
    found = {k.filter: c for c, k in keyed_columns(df.columns).items() if k.filter and k == p.but(filter=k.filter)}
    closed = sorted((k for k in found if _bucket_key(k)), key=lambda k: _bucket_key(k) or (0, 0))
    if not closed:
        return {}
    last_hi = int((_bucket_key(closed[-1]) or (0, 0))[1])
    out = {k: found[k] for k in closed}
    if f"d>{last_hi}" in found:
        out[f"d>{last_hi}"] = found[f"d>{last_hi}"]
    return out


def rung_columns(df: pd.DataFrame, target: str) -> dict[int, str]:
    """The target's stem at every extension budget: ``{steps: column}`` (empty without a ladder)."""
    p = ColumnKey.parse(target)
    if p is None or not p.rung:
        return {}
    out = {k.budget: c for c, k in keyed_columns(df.columns).items() if k.budget is not None and k == p.but(rung=k.rung)}
    return dict(sorted(out.items()))
