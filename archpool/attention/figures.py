"""Pool figures of the attention stage (matplotlib, Agg): sink strength vs long-context score with R²,
entropy vs sink strength coloured by QK-norm (the paper's fig. 7), and per-layer profiles.

Each function takes a list of *summaries*: attention results (``runner.analyze`` output, with
``metrics``, ``model`` and ``per_layer``) or flat rows of results.csv (``run``, ``qk_norm``,
``attn_*`` columns). Scores are a list aligned with the summaries, a ``{run: score}`` mapping, or the
name of a column / metric. Each returns a ``Figure``; ``png(fig)`` gives the bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from archpool.axes import AXIS, QK_NORM

QK_COLORS = {"none": "#d62728", "layerwise": "#1f77b4", "headwise": "#2ca02c"}


def _norm(s: Mapping[str, Any]) -> dict[str, Any]:
    if "metrics" in s:
        name = s.get("name") or Path(str(s.get("target", "?"))).name
        return {
            "name": name,
            QK_NORM: s.get("model", {}).get(QK_NORM, s.get(QK_NORM, "none")),
            "metrics": dict(s["metrics"]),
            "per_layer": s.get("per_layer", {}),
        }
    return {
        "name": str(s.get("run", s.get("name", "?"))),
        QK_NORM: str(s.get(QK_NORM, "none")),
        "metrics": {k: v for k, v in s.items() if isinstance(v, (int, float))},
        "per_layer": s.get("per_layer", {}),
    }


def _scores(sums: list[dict], scores: Sequence[float] | Mapping[str, float] | str | None) -> list[float | None]:
    if scores is None:
        return [None] * len(sums)
    if isinstance(scores, str):
        return [s["metrics"].get(scores) for s in sums]
    if isinstance(scores, Mapping):
        return [scores.get(s["name"]) for s in sums]
    return list(scores)


def _ok(*vals) -> bool:
    return all(v is not None and isinstance(v, (int, float)) and math.isfinite(float(v)) for v in vals)


def linear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float] | None:
    """Least squares y = a + b x with R² (scipy.stats.linregress); None with fewer than 3 points."""
    if len(x) < 3 or len(set(x)) < 2:
        return None
    from scipy.stats import linregress

    fit = linregress(x, y)
    return {
        "slope": float(fit.slope),
        "intercept": float(fit.intercept),
        "r2": float(fit.rvalue**2),
        "p": float(fit.pvalue),
        "n": len(x),
    }


def sink_vs_score(
    summaries: Sequence[Mapping[str, Any]], scores, *, sink: str = "attn_sink_rate", score_label: str = "long-context score"
) -> Figure:
    sums = [_norm(s) for s in summaries]
    ys = _scores(sums, scores)
    pts = [(s["metrics"].get(sink), y, s) for s, y in zip(sums, ys) if _ok(s["metrics"].get(sink), y)]
    fig, ax = plt.subplots(figsize=(5, 4))
    for x, y, s in pts:
        ax.scatter(x, y, color=QK_COLORS.get(s[QK_NORM], "gray"), edgecolor="k", linewidth=0.5, zorder=3)
        ax.annotate(s["name"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    fit = linear_fit([p[0] for p in pts], [p[1] for p in pts])
    title = "sink strength vs score"
    if fit:
        xs = sorted(p[0] for p in pts)
        ax.plot([xs[0], xs[-1]], [fit["intercept"] + fit["slope"] * v for v in (xs[0], xs[-1])], "k--", lw=1)
        title += f"  (R² = {fit['r2']:.2f}, n = {fit['n']})"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(sink)
    ax.set_ylabel(score_label)
    _legend(ax, {s[QK_NORM] for _, _, s in pts})
    fig.tight_layout()
    return fig


def entropy_vs_sink(
    summaries: Sequence[Mapping[str, Any]], *, sink: str = "attn_sink_rate", entropy: str = "attn_entropy_norm"
) -> Figure:
    sums = [_norm(s) for s in summaries]
    fig, ax = plt.subplots(figsize=(5, 4))
    seen = set()
    for s in sums:
        x, y = s["metrics"].get(sink), s["metrics"].get(entropy)
        if not _ok(x, y):
            continue
        seen.add(s[QK_NORM])
        ax.scatter(x, y, color=QK_COLORS.get(s[QK_NORM], "gray"), edgecolor="k", linewidth=0.5, zorder=3)
        ax.annotate(s["name"], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(sink)
    ax.set_ylabel(entropy)
    ax.set_title(f"attention entropy vs sink strength, by {AXIS[QK_NORM].label}", fontsize=9)
    _legend(ax, seen)
    fig.tight_layout()
    return fig


def per_layer_profiles(
    summaries: Sequence[Mapping[str, Any]], metrics: Sequence[str] = ("sink_rate", "first_token_mass", "entropy_norm")
) -> Figure:
    sums = [_norm(s) for s in summaries]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.2), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for s in sums:
            vals = s["per_layer"].get(m)
            if not vals:
                continue
            ax.plot(range(len(vals)), vals, marker="o", ms=3, label=s["name"], color=QK_COLORS.get(s[QK_NORM]))
            types = s["per_layer"].get("layer_types") or []
            for i, t in enumerate(types):  # hollow markers: sliding-window layers
                if t == "sliding_attention":
                    ax.scatter(i, vals[i], facecolor="white", edgecolor="k", s=12, zorder=3)
        ax.set_xlabel("layer")
        ax.set_title(m, fontsize=9)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def _legend(ax, qk_norms) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", ls="", color=QK_COLORS.get(q, "gray"), label=f"{AXIS[QK_NORM].label}: {q}")
        for q in sorted(qk_norms)
    ]
    if handles:
        ax.legend(handles=handles, fontsize=7)


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130)
    plt.close(fig)
    return buf.getvalue()


def save_figures(summaries: Sequence[Mapping[str, Any]], out_dir: str | Path, scores=None) -> list[Path]:
    """Write attention_sink_vs_score.png (when scores are given), attention_entropy_vs_sink.png and
    attention_layers.png into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs = {"attention_entropy_vs_sink.png": entropy_vs_sink(summaries), "attention_layers.png": per_layer_profiles(summaries)}
    if scores is not None:
        figs["attention_sink_vs_score.png"] = sink_vs_score(summaries, scores)
    paths = []
    for name, fig in figs.items():
        (out / name).write_bytes(png(fig))
        paths.append(out / name)
    return paths
