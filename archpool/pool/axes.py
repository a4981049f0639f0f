"""A run's axis values, in pool units or the paper's 7B units, as ModelConfig fields.

- ``axis_code``: the short name part of a factorial cell (``lqk``, ``swa``, ``2kv``);
- ``kv_heads`` / ``context`` / ``swa``: one axis value (``"8/32"``, ``"short"``, ``true``) at a pool's size;
- ``scale_paper_row``: one row of olmpool-architectures.csv (7B units) mapped onto a pool size, every ratio kept.

The axes' names and values are the registry's (:mod:`archpool.axes`).
"""

from __future__ import annotations

import math
from typing import Any

from archpool import study
from archpool.axes import AXES, N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SWA, canonical_qk_norm
from archpool.config import check_keys
from archpool.errors import ConfigError
from archpool.model.presets import SIZES

PAPER_ROW_KEYS = (*AXES, "fp8", "d_ff", "n_layers", "params_b", "name")
"""The columns of one row of the paper's architecture table a ``paper:`` run may give."""

# The paper's 7B reference shapes that ``paper:`` rows are expressed in (docs/paper.md §2).
PAPER = dict(n_heads=32, long_ctx=8192, d_ff=11008, n_layers=32)


def axis_code(axis: str, value: Any) -> str:
    """Short, readable name part for an axis value (``lqk``, ``swa``, ``2kv``, ``short``)."""
    if axis == QK_NORM:
        v = {"none": "noqk", "layerwise": "lqk", "headwise": "hqk"}.get(canonical_qk_norm(value))
        return v or f"qk{value}"
    if axis == SWA:
        return "swa" if value not in (False, 0, "none", "off", None) else "full"
    if axis == N_KV_HEADS:
        return f"{str(value).replace('/', 'of')}kv"
    if axis == PRETRAIN_CTX:
        return f"ctx{value}" if isinstance(value, int) else str(value)
    return str(value)


def plain_size(size: str) -> dict[str, Any]:
    shp = dict(SIZES[size])
    ctx = shp.pop("ctx")
    return dict(shp, max_seq_len=ctx, rope=dict(theta=10_000.0))


def kv_heads(value: Any, n_heads: int, fld: str) -> int:
    """An absolute count, or ``"k/N"`` = the paper's k KV heads of N query heads, scaled to n_heads."""
    if isinstance(value, int) and not isinstance(value, bool):
        kv = value
    elif isinstance(value, str) and "/" in value:
        try:
            k, n = (int(x) for x in value.split("/"))
        except ValueError:
            raise ConfigError(fld, f"a count or 'k/N', got {value!r}") from None
        if (n_heads * k) % n:
            raise ConfigError(fld, f"{value} of {n_heads} query heads is not a whole number of KV heads")
        kv = n_heads * k // n
    elif value in ("mha", "none"):
        kv = n_heads
    elif value == "mqa":
        kv = 1
    else:
        raise ConfigError(fld, f"a KV-head count, 'k/N', 'mha' or 'mqa', got {value!r}")
    if not 1 <= kv <= n_heads or n_heads % kv:
        raise ConfigError(fld, f"{kv} KV heads must divide n_heads={n_heads}")
    return kv


def context(value: Any, long_ctx: int, fld: str) -> int:
    if value == "long":
        return long_ctx
    if value == "short":
        return study.pool_short_ctx(long_ctx)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ConfigError(fld, f"'long', 'short' or a token count, got {value!r}")


def swa(value: Any, long_ctx: int, fld: str) -> dict[str, Any]:
    """``true`` = Olmo 3's pattern (3 of 4 layers local) at a window of half the long context."""
    if value in (False, 0, None, "none", "off"):
        return dict(swa_pattern="none", window=None)
    if value in (True, 1, "olmo3"):
        return dict(swa_pattern="olmo3", window=long_ctx // 2)
    if value == "all":
        return dict(swa_pattern="all", window=long_ctx // 2)
    if isinstance(value, dict):
        check_keys(value, ("pattern", "window"), fld, "key of an swa mapping")
        return dict(swa_pattern=value.get("pattern", "olmo3"), window=value.get("window", long_ctx // 2))
    raise ConfigError(fld, f"true/false, 'all', or {{pattern, window}}, got {value!r}")


def model_ctx(pretrain_ctx: int, model: dict[str, Any], long_ctx: int) -> int:
    """The ModelConfig context. A window as long as the pretraining context (the paper's 4K window
    at 4K pretraining) is full attention until extension; the config needs window < max_seq_len, so
    the model records one more position while the trainer still uses ``pretrain_ctx``."""
    window: int | None = model.get("window")
    if model.get("swa_pattern", "none") != "none" and window and pretrain_ctx <= window <= long_ctx // 2:
        return window + 1
    return pretrain_ctx


PAPER_GEOMETRY_KEYS = ("n_heads", "swa_pattern")
"""What a pool's ``paper_geometry:`` may fix for its paper rows (docs/paper.md, "Scaling the paper's rows")."""


def paper_kv_heads(kv: int, n_heads: int) -> int:
    """The paper's ``kv`` KV heads of 32 query heads at ``n_heads`` query heads: the same ratio where it
    is whole, else the nearest divisor of ``n_heads`` (at least 1: a ratio below 1/n_heads is MQA)."""
    exact = n_heads * kv / PAPER["n_heads"]
    divisors = [d for d in range(1, n_heads + 1) if n_heads % d == 0]
    return min(divisors, key=lambda d: (abs(d - exact), d))


def scale_paper_row(
    paper: Any, model: dict[str, Any], size: str, long_ctx: int, fld: str, geometry: dict[str, Any] | None = None
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """Map one row of olmpool-architectures.csv (7B units) onto ``size``, keeping every ratio.

    By default the query heads are the size's rounded up to a multiple of 8 (so that the paper's KV
    ratios down to 4 of 32 are whole) and SWA is Olmo 3's pattern. A pool's ``paper_geometry``
    (``geometry``) can keep another head count (KV ratios then round to the nearest divisor,
    :func:`paper_kv_heads`) and another layer pattern for the SWA rows."""
    if not isinstance(paper, dict):
        raise ConfigError(fld, "a mapping of the paper's columns (swa, qk_norm, norm, n_kv_heads, pretrain_ctx, d_ff, ...)")
    check_keys(paper, sorted(PAPER_ROW_KEYS), fld, "paper column")
    for key in AXES:
        if key not in paper:
            raise ConfigError(f"{fld}.{key}", "required in a paper row")
    geometry = geometry or {}
    shp = SIZES[size]
    d_model = model["d_model"]
    # KV ratios down to 4 of 32 need n_heads divisible by 8, unless the pool keeps its own head count
    n_heads = geometry.get("n_heads") or 8 * math.ceil(shp["n_heads"] / 8)
    if d_model % n_heads or (d_model // n_heads) % 2:
        raise ConfigError(f"{fld}.n_kv_heads", f"size {size!r} (d_model={d_model}) cannot hold {n_heads} heads of even width")
    model = dict(model, n_heads=n_heads, head_dim=d_model // n_heads)
    kv = paper[N_KV_HEADS]
    if not isinstance(kv, int) or PAPER["n_heads"] % kv:
        raise ConfigError(f"{fld}.n_kv_heads", f"KV heads of the paper's 32 query heads, got {kv!r}")
    if geometry.get("n_heads"):
        model[N_KV_HEADS] = paper_kv_heads(kv, n_heads)
    else:
        model[N_KV_HEADS] = kv_heads(f"{kv}/{PAPER['n_heads']}", n_heads, f"{fld}.n_kv_heads")
    p_ctx = paper[PRETRAIN_CTX]
    if p_ctx not in (4096, 8192):
        raise ConfigError(f"{fld}.pretrain_ctx", f"the paper pretrains at 4096 or 8192, got {p_ctx!r}")
    pretrain_ctx = long_ctx * p_ctx // PAPER["long_ctx"]
    has_swa = bool(int(paper[SWA]))
    pattern = geometry.get("swa_pattern")
    model.update(swa({"pattern": pattern} if has_swa and pattern else has_swa, long_ctx, f"{fld}.swa"))
    model[QK_NORM] = canonical_qk_norm(paper[QK_NORM])
    model[NORM] = paper[NORM]
    d_ff = paper.get("d_ff", PAPER["d_ff"])
    model["d_ff"] = study.scaled_d_ff(d_model, d_ff / PAPER["d_ff"])
    layers = paper.get("n_layers", PAPER["n_layers"])
    n_layers = shp["n_layers"] * layers / PAPER["n_layers"]
    # keep "deeper" deeper even where the ratio rounds away (36/32 of 4 layers -> 5)
    model["n_layers"] = math.ceil(n_layers) if layers > PAPER["n_layers"] else max(1, math.floor(n_layers))
    columns = dict(
        paper_name=paper.get("name", ""),
        paper_d_ff=d_ff,
        paper_n_kv_heads=kv,
        paper_pretrain_ctx=p_ctx,
        paper_params_b=paper.get("params_b", ""),
        d_ff_ratio=round(d_ff / PAPER["d_ff"], 4),
        fp8=bool(int(paper.get("fp8", 0))),
    )
    return model, pretrain_ctx, columns
