"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no display, no global state).

Each function takes an :func:`archpool.analysis.summary.analyze` result (and the table where it needs more
columns) and returns a ``Figure``, or ``None`` when the data for it is absent.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from archpool.analysis import archs
from archpool.analysis.archs import Mean
from archpool.analysis.results import AxisVerdict
from archpool.columns import ColumnKey, split_rung

COUNT_COLORS = ["#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027"]  # 0 … 4 features
TOP_PREDICTORS = 15  # the predictor figure shows the strongest ones; the table lists all


def _t(s: object) -> str:
    """Text from a table, safe from matplotlib's mathtext (``$`` would start a formula)."""
    return str(s).replace("$", r"\$")


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


MAX_FIGURE_ROWS = 60  # a figure with one row per item shows at most this many (the tables list all)


def scores_by_run(r: Mapping[str, Any]) -> Figure:
    """Paper fig. 1: the target per run, sorted, coloured by architecture.

    Bars start at 0, so they are drawn only when the axis contains 0; otherwise each run is a dot (a bar
    from the axis edge would encode nothing but the axis limits). A pool of more than ``MAX_FIGURE_ROWS``
    runs shows the lowest and highest runs, half each, and says how many it left out."""
    runs = sorted(r["runs"], key=lambda x: x["target"])
    left_out = max(0, len(runs) - MAX_FIGURE_ROWS)
    if left_out:
        half = MAX_FIGURE_ROWS // 2
        runs = runs[:half] + runs[-half:]
    fig = _figure(8, 0.9 + 0.28 * len(runs))
    ax = fig.add_subplot()
    values = [x["target"] for x in runs]
    arch = {x["run"]: x.get("arch") or archs.SEED_SUFFIX.sub("", x["run"]) for x in runs}
    palette = arch_colors(list(dict.fromkeys(arch[x["run"]] for x in sorted(runs, key=lambda x: x["run"]))))
    colors = [palette[arch[x["run"]]] for x in runs]
    lo, hi = min(values), max(values)
    pad = 0.08 * (hi - lo) + 1e-9
    if lo <= 0 <= hi or (lo > 0 and lo <= 0.25 * hi) or (hi < 0 and hi >= 0.25 * lo):
        ax.barh(range(len(runs)), values, color=colors)  # 0 is on (or near) the axis: bars from 0
        ax.set_xlim(min(lo, 0) - pad, max(hi, 0) + pad)
        ax.axvline(0, color="k", lw=0.8)
    else:
        ax.hlines(range(len(runs)), lo - pad, values, color="#dddddd", lw=0.8, zorder=1)
        ax.scatter(values, range(len(runs)), c=colors, edgecolor="k", linewidth=0.4, s=36, zorder=3)
        ax.set_xlim(lo - pad, hi + pad)
    ax.set_yticks(range(len(runs)), [_t(x["run"]) for x in runs], fontsize=7)
    ax.set_ylim(-0.7, len(runs) - 0.3)
    ax.set_xlabel(_t(r["target"]))
    shown = f"{len(runs)} of {r['n']} runs: the lowest and highest" if left_out else f"{r['n']} runs"
    ax.set_title(f"{_t(r['target'])} per run ({shown}), coloured by architecture")
    if len(palette) <= len(ARCH_PALETTE):  # beyond that, colours repeat and a legend would mislead
        handles = [Line2D([], [], marker="o", ls="", color=c, label=_t(a)) for a, c in palette.items()]
        ax.legend(handles=handles, fontsize=8, loc="best")
    return fig


def predictor_r2(r: dict[str, Any]) -> Figure:
    """In-sample and leave-one-out R² of every predictor of the target."""
    names = list(r["predictors"])[:TOP_PREDICTORS][::-1]
    fig = _figure(7, 1.0 + 0.35 * len(names))
    ax = fig.add_subplot()
    y = np.arange(len(names))
    r2 = [r["predictors"][n].get("r2") or 0.0 for n in names]
    loo = [max(r["predictors"][n].get("loo_r2") or 0.0, 0.0) for n in names]
    ax.barh(y + 0.2, r2, height=0.4, color="#4575b4", label="in-sample R²")
    ax.barh(y - 0.2, loo, height=0.4, color="#91bfdb", label="leave-one-out R² (≥ 0 shown)")
    ax.set_yticks(y, [_t(n) for n in names], fontsize=8)
    ax.set_xlim(0, 1)
    more = len(r["predictors"]) - len(names)
    ax.set_xlabel(f"R² against {_t(r['target'])}" + (f" (top {len(names)} of {len(r['predictors'])})" if more > 0 else ""))
    ax.legend(fontsize=8, loc="lower right")
    return fig


def target_vs_count(r: Mapping[str, Any]) -> Figure:
    """Target against feature count with the OLS fit; right: leave-one-out predictions vs observed."""
    runs, p = r["runs"], r["predictors"]["feature_count"]
    fig = _figure(10, 4)
    ax, ax2 = fig.subplots(1, 2)
    x = np.array([q["feature_count"] for q in runs], float)
    y = np.array([q["target"] for q in runs], float)
    jitter = np.random.default_rng(0).uniform(-0.08, 0.08, len(x))
    ax.scatter(x + jitter, y, c=[COUNT_COLORS[int(c)] for c in x], edgecolor="k", linewidth=0.4, zorder=3)
    if p.get("coef") is not None:
        xs = np.linspace(x.min() - 0.2, x.max() + 0.2, 50)
        ax.plot(
            xs,
            p["intercept"] + p["coef"] * xs,
            color="k",
            label=f"fit: {p['intercept']:.2f} {p['coef']:+.2f}·count\nR² {_num(p.get('r2'))}, LOO R² {_num(p.get('loo_r2'))}",
        )
        ax.legend(fontsize=8)
    ax.set_xticks(range(int(x.min()), int(x.max()) + 1))
    ax.set_xlabel("feature count")
    ax.set_ylabel(_t(r["target"]))
    ax.set_title("target vs feature count")
    loo = np.array([np.nan if q["loo_count"] is None else q["loo_count"] for q in runs], float)
    ax2.scatter(loo, y, c=[COUNT_COLORS[int(c)] for c in x], edgecolor="k", linewidth=0.4, zorder=3)
    ok = np.isfinite(loo)
    if ok.any():
        lim = [min(loo[ok].min(), y.min()), max(loo[ok].max(), y.max())]
        ax2.plot(lim, lim, color="grey", ls="--", label="observed = predicted")
        ax2.legend(fontsize=8)
    ax2.set_xlabel("leave-one-out prediction from count")
    ax2.set_ylabel(_t(r["target"]))
    ax2.set_title("leave-one-out predictions")
    return fig


def effects(r: dict[str, Any]) -> Figure | None:
    """Matched-pair effects per axis (dots: pairs, bar: mean) and interactions, against the seed spread."""
    ae, inter = r["axis_effects"], r["interactions"]
    if not ae and not inter:
        return None
    sd = r["spread"]["seed_sd"]
    fig = _figure(11, 1.2 + 0.45 * max(len(ae), len(inter), 2))
    ax, ax2 = fig.subplots(1, 2)
    for i, e in enumerate(ae):
        pts = [p["effect"] for p in r["pairs"] if (p["axis"], p["from"], p["to"]) == (e["axis"], e["from"], e["to"])]
        ax.scatter(pts, [i] * len(pts), color="#4575b4", s=14, zorder=3)
        ax.barh(i, e["mean"], height=0.5, color="#d73027" if e["below_seed_sd"] else "#fc8d59", alpha=0.6)
    ax.set_yticks(range(len(ae)), [f"{e['axis']}: {e['from']}→{e['to']} (n={e['n']})" for e in ae], fontsize=8)
    ax2_labels = []
    for i, it in enumerate(inter):
        for dy, key, color in ((0.18, "with", "#d73027"), (-0.18, "without", "#4575b4")):
            if it[key] is not None:
                ax2.barh(i + dy, it[key], height=0.34, color=color, label=f"{key} B" if i == 0 else None)
        ax2_labels.append(
            f"{it['effect_of']} | {it['given']} (n={it['n_with']}/{it['n_without']})" + (" ★" if it["stressed"] else "")
        )
    ax2.set_yticks(range(len(inter)), ax2_labels, fontsize=8)
    for a in (ax, ax2):
        a.invert_yaxis()
        a.axvline(0, color="k", lw=0.8)
        if sd is not None:
            a.axvspan(-sd, sd, color="grey", alpha=0.2, label="± seed sd")
        a.set_xlabel(f"effect on {_t(r['target'])}")
    ax.set_title("matched-pair effects by axis" + ("" if sd is not None else " (no seed replicates)"))
    stressed = any(it["stressed"] for it in inter)
    ax2.set_title(
        "A | B: effect of A with B (red), without B (blue)" + ("\n★ the paper's stressed pair: SWA | GQA" if stressed else ""),
        fontsize=10,
    )
    if inter:
        ax2.legend(fontsize=8, loc="best")
    return fig


# --- per-architecture figures: one colour per architecture, mean over seeds with 95% t-intervals ---

ARCH_PALETTE = ("#1b1b1b", "#d73027", "#4575b4", "#1a9850", "#984ea3", "#ff7f00", "#a65628", "#f781bf", "#999999")
CHANCE_STYLE = dict(color="grey", ls=":", lw=1)


def arch_colors(archs: Sequence[str]) -> dict[str, str]:
    """A colour per architecture (the first, usually the baseline, in black); cycles beyond nine."""
    return {a: ARCH_PALETTE[i % len(ARCH_PALETTE)] for i, a in enumerate(archs)}


def _errorbar(ax, xs: list[float], ms: list[Mean], color: str, label: str | None, **kw: Any) -> None:
    ys = np.array([m.mean for m in ms])
    err = np.array([[m.mean - m.lo for m in ms], [m.hi - m.mean for m in ms]])
    ax.errorbar(xs, ys, yerr=err, color=color, label=label, marker="o", ms=4, lw=1.4, capsize=3, **kw)


def _arch_lines(
    ax,
    df: pd.DataFrame,
    points: Mapping[int, str] | Mapping[float, str],
    colors: Mapping[str, str],
    labelled: bool = True,
    **kw: Any,
) -> None:
    """One line per architecture through ``points`` (x → column): mean over seeds with 95% CIs."""
    means = {x: archs.per_arch(df, c) for x, c in points.items()}
    for a, color in colors.items():
        pts = [(x, m[a]) for x, m in means.items() if a in m]
        if pts:
            _errorbar(ax, [x for x, _ in pts], [m for _, m in pts], color, a if labelled else None, **kw)


def _arch_figure(df: pd.DataFrame) -> tuple[Figure, Any, dict[str, str]]:
    """A page-width figure with one axes, and a colour per architecture of ``df``."""
    fig = _figure(8, 4.2)
    return fig, fig.add_subplot(), arch_colors(archs.arch_order(df))


def _accuracy_axis(ax, chance: float | None, legend_loc: str = "lower left") -> None:
    """Accuracy from 0 to 1 with the chance line and the architectures' legend."""
    _chance(ax, chance)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("accuracy (fraction of answers)")
    ax.legend(fontsize=8, loc=legend_loc, ncols=2)


def _chance(ax, chance: float | None) -> None:
    if chance is not None:
        ax.axhline(chance, **CHANCE_STYLE, label=f"chance ({chance:.3g})")


def verdict_effects(verdicts: Sequence[AxisVerdict], seed_sd: float | None, label: str) -> Figure | None:
    """Per axis, the effect before extension (at each arm's own length) and after it (the target), each with
    its 95% CI over seeds; grey band: ± one seed sd."""
    rows = [v for v in verdicts if v.after is not None or v.before is not None]
    if not rows:
        return None
    fig = _figure(8, 1.3 + 0.6 * len(rows))
    ax = fig.add_subplot()
    for i, v in enumerate(rows):
        for dy, val, ci, color, name in (
            (-0.15, v.before, v.before_ci, "#91bfdb", "before extension (own length)"),
            (0.15, v.after, v.after_ci, "#d73027", "after extension (target)"),
        ):
            if val is None:
                continue
            lo, hi = (ci[0] if ci[0] is not None else val), (ci[1] if ci[1] is not None else val)
            ax.errorbar(
                [val], [i + dy], xerr=[[val - lo], [hi - val]], fmt="o", color=color, capsize=3, label=name if i == 0 else None
            )
    ax.set_yticks(range(len(rows)), [f"{v.name} ({v.change}, n={v.n})" if v.change else v.name for v in rows], fontsize=9)
    ax.invert_yaxis()
    ax.axvline(0, color="k", lw=0.8)
    if seed_sd:
        ax.axvspan(-seed_sd, seed_sd, color="grey", alpha=0.2, label="± seed sd")
    ax.set_xlabel(f"effect of switching the feature on (difference in {label})")
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.06), ncols=3, frameon=False)
    return fig


def accuracy_by_length(
    df: pd.DataFrame,
    after: Mapping[int, str],
    before: Mapping[int, str] | None = None,
    chance: float | None = None,
    long_ctx: int | None = None,
    label: str = "accuracy (fraction of answers)",
) -> Figure | None:
    """A score vs evaluation length per architecture: after extension (solid) and before it (dashed, where
    measured); dotted vertical line: the pretraining context."""
    before = before or {}
    if len(after) < 2:
        return None
    fig, ax, colors = _arch_figure(df)
    _arch_lines(ax, df, after, colors)
    _arch_lines(ax, df, before, colors, labelled=False, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({*after, *before}), [f"{n:,}" for n in sorted({*after, *before})])
    if long_ctx:
        ax.axvline(long_ctx, color="k", ls=":", lw=0.8)
    _chance(ax, chance)
    if "accuracy" in label:
        ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(_t(label))
    ax.set_title("Score vs evaluation length (solid: after extension; dashed: before)")
    ax.legend(fontsize=8, loc="lower left", ncols=2)
    return fig


def accuracy_by_distance(df: pd.DataFrame, target: str, chance: float | None = None) -> Figure | None:
    """Accuracy per key–query distance bucket at the target's length, one line per architecture."""
    cols = archs.distance_columns(df, target)
    if len(cols) < 2:
        return None
    fig, ax, colors = _arch_figure(df)
    labels = list(cols)
    _arch_lines(ax, df, dict(enumerate(cols.values())), colors)
    ax.set_xticks(range(len(labels)), [lab.replace("<=", "≤") for lab in labels])
    p = ColumnKey.parse(target)
    ax.set_xlabel("key–query distance (tokens)" + (f" at {p.length:,} tokens" if p else ""))
    ax.set_title("Accuracy vs key–query distance after extension")
    _accuracy_axis(ax, chance)
    return fig


def extension_curves(df: pd.DataFrame, target: str, chance: float | None = None) -> Figure | None:
    """The target's stem after every extension budget of the ladder, one line per architecture."""
    cols = archs.rung_columns(df, target)
    if len(cols) < 2:
        return None
    fig, ax, colors = _arch_figure(df)
    _arch_lines(ax, df, cols, colors)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(list(cols), [str(n) for n in cols])
    ax.set_xlabel("extension steps (0: the RoPE change alone)")
    ax.set_title(f"Extension curves: {_t(split_rung(target)[0])}")
    _accuracy_axis(ax, chance, legend_loc="lower right")
    return fig


def loss_curves(curves: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], arch_by_run: Mapping[str, str]) -> Figure | None:
    """Training loss per architecture (mean over seeds at shared steps): pretraining, then extension."""
    phases = [p for p in ("pretrain", "extend") if any(c.get(p) for c in curves.values())]
    if not phases:
        return None
    order = list(dict.fromkeys(arch_by_run[r] for r in curves if r in arch_by_run))
    colors = arch_colors(order)
    fig = _figure(5 * len(phases), 3.8)
    axes = np.atleast_1d(fig.subplots(1, len(phases)))
    for ax, phase in zip(axes, phases):
        for a in order:
            series = [dict(curves[r].get(phase) or ()) for r in curves if arch_by_run.get(r) == a]
            series = [s for s in series if s]
            if not series:
                continue
            steps = sorted(set.intersection(*(set(s) for s in series)))
            if steps:
                ax.plot(steps, [float(np.mean([s[k] for s in series])) for k in steps], color=colors[a], lw=1.2, label=a)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (nats per token)")
        ax.set_title({"pretrain": "Pretraining loss", "extend": "Extension loss"}[phase] + " (mean over seeds)")
        ax.legend(fontsize=7, ncols=2)
    return fig


def _attention_unit(column: str) -> str:
    if "rate" in column:
        return "% of head × sample entries with a sink"
    if "mass" in column:
        return "attention mass on the first token, 0–1"
    if "entropy" in column:
        return "nats" if "norm" not in column else "fraction of the maximum"
    return ""


def _varies(values: pd.Series) -> bool:
    """False for a column with one value in every run (a panel of it would show nothing but its offset)."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    return len(v) > 1 and float(v.max() - v.min()) > 1e-9 * max(1.0, float(v.abs().max()))


def attention_by_arch(df: pd.DataFrame, sink: str | None, entropy: str | None) -> Figure | None:
    """Attention sink strength and entropy after extension, per architecture (mean and 95% CI over seeds)."""
    cols = [c for c in (sink, entropy) if c and c in df.columns and _varies(df[c])]
    if not cols:
        return None
    order = archs.arch_order(df)[:MAX_FIGURE_ROWS]
    colors = arch_colors(order)
    fig = _figure(5 * len(cols), 0.9 + 0.45 * len(order))
    axes = np.atleast_1d(fig.subplots(1, len(cols)))
    for ax, col in zip(axes, cols):
        means = archs.per_arch(df, col)
        for i, a in enumerate(order):
            m = means.get(a)
            if m is not None:
                ax.errorbar([m.mean], [i], xerr=[[m.mean - m.lo], [m.hi - m.mean]], fmt="o", color=colors[a], capsize=3)
        ax.set_yticks(range(len(order)), order, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"{_t(col)} ({_attention_unit(col)})")
        ax.set_title("sink strength" if col == sink else "attention entropy")
    return fig


def calibration(cal: Mapping[str, Any]) -> Figure | None:
    """The calibration curve: the baseline's value at the target per value of the difficulty knob (mean and
    seeds), the headroom window, points that fail mastery, the rule's choice and the scored point."""
    points = [p for p in cal.get("points") or [] if p.get("baseline")]
    if not points:
        return None
    fig = _figure(6.5, 3.6)
    ax = fig.add_subplot()
    xs = list(range(len(points)))
    lo, hi = cal["window"]
    ax.axhspan(lo, hi, color="#e0ecf4", zorder=0, label=f"headroom window [{lo:g}, {hi:g}]")
    means = [p["baseline_mean"] for p in points]
    ax.plot(xs, means, color="#4575b4", lw=1.2, zorder=2)
    for x, p in zip(xs, points):
        ax.scatter([x] * len(p["baseline"]), p["baseline"], s=10, color="#4575b4", alpha=0.5, zorder=3)
        face = "#4575b4" if p["all_mastered"] else "white"
        ax.scatter([x], [p["baseline_mean"]], s=45, facecolor=face, edgecolor="#4575b4", zorder=4)
        if p["value"] == cal.get("chosen"):
            ax.scatter([x], [p["baseline_mean"]], s=220, marker="*", color="#d73027", zorder=5, label="rule's choice")
        if p["value"] == cal.get("scored"):
            ax.scatter([x], [p["baseline_mean"]], s=260, facecolor="none", edgecolor="k", lw=1.2, zorder=6, label="scored")
    ax.set_xticks(xs, [_t(p["value"]) for p in points])
    ax.set_xlabel(_t(f"{cal['task']}: {cal['knob']}"))
    ax.set_ylabel(_t("baseline at the target"))
    ax.set_title(_t(cal["target"]), fontsize=9)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _num(v: float | None) -> str:
    """A fit statistic to two decimals, or "n/a" where it is undefined (two architectures have no held-out fit)."""
    return "n/a" if v is None else f"{v:.2f}"
