"""The zero-compute screen: what the paper's 26 runs say about a model with these four features.

Three readings of the published table (:mod:`archpool.paper.table`), all the paper's 7B results
under its recipe (140B tokens pretraining, NTK extension to 64K), never a measurement of the model:

- the count regression: OLS of HELMET@32K on the feature count over the 26 runs, its prediction at
  the model's count with a 95% prediction interval (statsmodels ``get_prediction``);
- the nearest released runs: those with the same four flags (else the fewest flags apart), with
  their published scores;
- the per-length pattern: each feature's single-feature delta at HELMET 8K/16K/32K/64K, the mean
  over matched pairs of published runs that differ in that flag only (same other flags, same norm
  placement, same fp8).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from archpool.axes import FEATURES, GQA, NORM, QK_NORM, SHORT_CTX, SWA
from archpool.paper.table import HELMET_COLUMNS, KNOWN_ERROR_NOTE, KNOWN_ERRORS, PaperRun, paper_runs

TARGET = "helmet_32k"
LABEL = (
    "the paper's 7B results under its recipe (140B pretraining tokens, NTK extension to 64K): "
    "an estimate from published runs, not a measurement of this model"
)


def model_flags(features: dict[str, Any]) -> dict[str, int]:
    """The four flags of a :func:`archpool.model.features.features` result."""
    return dict(
        qk_norm=int(features[QK_NORM] != "none"),
        gqa=int(bool(features[GQA])),
        swa=int(bool(features[SWA])),
        short_ctx=int(bool(features[SHORT_CTX])),
    )


def count_regression(count: int, alpha: float = 0.05) -> dict[str, Any]:
    """HELMET@32K ~ 1 + count over the published runs; the fit and its prediction at ``count``."""
    import statsmodels.api as sm

    runs = paper_runs()
    x = np.array([r.count for r in runs], dtype=float)
    y = np.array([r.scores[TARGET] for r in runs], dtype=float)
    res = sm.OLS(y, sm.add_constant(x)).fit()
    frame = res.get_prediction(np.array([[1.0, float(count)]])).summary_frame(alpha=alpha)
    return dict(
        target=TARGET,
        n=len(runs),
        intercept=float(res.params[0]),
        slope=float(res.params[1]),
        r2=float(res.rsquared),
        count=int(count),
        prediction=float(frame["mean"].iloc[0]),
        interval=[float(frame["obs_ci_lower"].iloc[0]), float(frame["obs_ci_upper"].iloc[0])],
        level=1 - alpha,
    )


def _distance(a: dict[str, int], b: dict[str, int]) -> int:
    return sum(a[f] != b[f] for f in FEATURES)


def nearest_runs(flags: dict[str, int]) -> dict[str, Any]:
    """The published runs with the same flags, else those the fewest flags apart."""
    runs = paper_runs()
    best = min(_distance(flags, r.flags) for r in runs)
    chosen = sorted((r for r in runs if _distance(flags, r.flags) == best), key=lambda r: -(r.scores[TARGET] or 0))
    return dict(
        flags_apart=best,
        runs=[
            dict(
                name=r.name,
                flags=r.flags,
                norm=r.design[NORM],
                scores=r.scores,
                note=KNOWN_ERROR_NOTE if r.name in KNOWN_ERRORS else "",
            )
            for r in chosen
        ],
    )


def _matched(a: PaperRun, b: PaperRun, feature: str) -> bool:
    """``a`` has ``feature`` and ``b`` does not; every other flag, the norm placement and fp8 agree."""
    fa, fb = a.flags, b.flags
    return (
        fa[feature] == 1
        and fb[feature] == 0
        and all(fa[f] == fb[f] for f in FEATURES if f != feature)
        and a.design[NORM] == b.design[NORM]
        and a.design["fp8"] == b.design["fp8"]
    )


def single_feature_deltas() -> dict[str, dict[str, Any]]:
    """Per feature: the matched pairs and the mean HELMET difference (with − without) at each length."""
    runs = paper_runs()
    out = {}
    for feature in FEATURES:
        pairs = [(a, b) for a in runs for b in runs if _matched(a, b, feature)]
        deltas = {  # the paper publishes every run's HELMET scores
            col: (float(np.mean([cast(float, a.scores[col]) - cast(float, b.scores[col]) for a, b in pairs])) if pairs else None)
            for col in HELMET_COLUMNS
        }
        out[feature] = dict(pairs=[[a.name, b.name] for a, b in pairs], deltas=deltas)
    return out


def screen(features: dict[str, Any]) -> dict[str, Any]:
    """The paper's estimate for a model with these features (see the module docstring)."""
    flags = model_flags(features)
    count = sum(flags.values())
    return dict(
        source=features.get("source", ""),
        label=LABEL,
        flags=flags,
        count=count,
        regression=count_regression(count),
        nearest=nearest_runs(flags),
        per_length=single_feature_deltas(),
    )


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def format_screen(s: dict[str, Any]) -> str:
    """The screen as text, labelled as the paper's results."""
    flags = s["flags"]
    reg = s["regression"]
    lo, hi = reg["interval"]
    lines = [
        f"{s['source']}: the paper's estimate for this feature set",
        f"  ({s['label']})",
        "  flags        " + "  ".join(f"{f}={flags[f]}" for f in FEATURES) + f"  count={s['count']}",
        f"  HELMET@32K   {reg['prediction']:.1f}  ({reg['level']:.0%} prediction interval {lo:.1f} to {hi:.1f}; "
        f"OLS over the paper's {reg['n']} runs: {reg['intercept']:.2f} {reg['slope']:+.2f} x count, R² {reg['r2']:.3f})",
    ]
    near = s["nearest"]
    what = "same flags" if near["flags_apart"] == 0 else f"{near['flags_apart']} flag(s) apart (no published run has these flags)"
    lines.append(f"  nearest released runs ({what}): HELMET 8K/16K/32K/64K, RULER 32K, LongPPL")
    for r in near["runs"]:
        sc = r["scores"]
        helmet = "/".join(_num(sc[c]) for c in HELMET_COLUMNS)
        note = f"  [{r['note']}]" if r["note"] else ""
        lines.append(f"    {r['name']:<32} {helmet:<22} {_num(sc['ruler_32k']):>5}  {_num(sc['longppl'], '{:.2f}'):>5}{note}")
    lines.append("  per-length pattern: the paper's single-feature deltas in HELMET (with - without, matched pairs)")
    lines.append(f"    {'feature':<10} {'has':<4} {'8K':>6} {'16K':>6} {'32K':>6} {'64K':>6}  pairs")
    for feature, d in s["per_length"].items():
        vals = " ".join(f"{_num(d['deltas'][c], '{:+.1f}'):>6}" for c in HELMET_COLUMNS)
        lines.append(f"    {feature:<10} {'yes' if flags[feature] else 'no':<4} {vals}  {len(d['pairs'])}")
    return "\n".join(lines)
