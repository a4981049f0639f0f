"""A side-by-side text table of several attention results (one column per target)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from archpool.attention.stats import VARIANTS
from archpool.axes import NORM, QK_NORM

ROWS = [
    ("sink rate, T=64, no BOS (%)", ("sink", "no_bos", "rate")),
    ("sink rate, T=64, BOS (%)", ("sink", "bos", "rate")),
]


def summaries_table(results: Sequence[dict[str, Any]]) -> str:
    """A side-by-side text table of several results (one column per target)."""
    names = [r.get("name") or Path(str(r.get("target", "?"))).name for r in results]
    rows: list[tuple[str, list[str]]] = [
        (QK_NORM, [str(r["model"].get(QK_NORM)) for r in results]),
        (NORM, [str(r["model"].get(NORM)) for r in results]),
    ]
    for label, path in ROWS:
        rows.append((label, [_fmt(_get(r, path)) for r in results]))
    lengths = sorted({T for r in results for T in r["long"]["no_bos"]}, key=int)
    for T in lengths:
        for v in VARIANTS:
            rows.append(
                (
                    f"first-token mass, T={T}, {v.replace('_', ' ')}",
                    [_fmt(_get(r, ("long", v, T, "first_token_mass"))) for r in results],
                )
            )
        for key, label in (
            ("entropy", "entropy (nats)"),
            ("entropy_norm", "entropy / log i"),
            ("entropy_sinkless", "entropy, sink excluded"),
            ("entropy_sinkless_norm", "entropy / log, sink excl."),
        ):
            rows.append((f"{label}, T={T}", [_fmt(_get(r, ("long", "no_bos", T, key))) for r in results]))
    if any("retrieval" in r for r in results):
        rows.append(("NIAH accuracy (needle test)", [_fmt(_get(r, ("retrieval", "accuracy"))) for r in results]))
        rows.append(("retrieval heads (score > 0.1)", [_fmt(_get(r, ("retrieval", "n_heads_above"))) for r in results]))
        rows.append(("top-k retrieval score (mean)", [_fmt(_get(r, ("retrieval", "topk_mean"))) for r in results]))
        rows.append(
            (
                "NIAH acc., top-k heads masked",
                [_fmt(_get(r, ("retrieval", "ablation", "top_masked", "accuracy"))) for r in results],
            )
        )
        rows.append(
            (
                "NIAH acc., k random masked",
                [_fmt(_get(r, ("retrieval", "ablation", "random_masked", "accuracy"))) for r in results],
            )
        )
    w = max(len(label) for label, _ in rows)
    cw = [max(10, len(n)) for n in names]
    lines = [" " * w + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cw))]
    for label, vals in rows:
        lines.append(label.ljust(w) + "  " + "  ".join(v.rjust(c) for v, c in zip(vals, cw)))
    return "\n".join(lines)


def _get(r: dict, path: tuple) -> Any:
    for p in path:
        if not isinstance(r, dict) or p not in r:
            return None
        r = r[p]
    return r


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)
