"""Presets: the real families as the paper replicated them (docs/paper.md §1–2), at any size.

A preset is family (the axes) × size (the shapes). Scaled sizes keep the paper's ratios: the long
pretraining context is the size's ``ctx``; families pretrained at 4K in the paper get ``ctx / 2``;
the sliding window is half the long context; GQA keeps 1 KV head per 4 query heads; MLP widths keep
each family's ratio to the MHA width (14336 / 11008 for the Llama 3 replica, 12288 / 11008 for Qwen 3).
"""

from __future__ import annotations

from typing import Any

from archpool.axes import GQA, NORM, QK_NORM, SHORT_CTX, SWA
from archpool.errors import ConfigError
from archpool.study import scaled_d_ff

# name -> shapes. ``ctx`` is the long pretraining context of the size (8192 at 7B).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, n_layers=4, n_heads=4, vocab_size=512, ctx=128),
    "small": dict(d_model=128, n_layers=4, n_heads=8, vocab_size=4096, ctx=256),
    "base": dict(d_model=256, n_layers=8, n_heads=8, vocab_size=8192, ctx=512),
    "100m": dict(d_model=768, n_layers=12, n_heads=12, vocab_size=32768, ctx=2048),
    "1b": dict(d_model=2048, n_layers=16, n_heads=16, vocab_size=100352, ctx=4096),
    "7b": dict(d_model=4096, n_layers=32, n_heads=32, vocab_size=100352, ctx=8192, d_ff=11008),
}

# family -> its axes and features (the names of archpool.axes). ``short_ctx``: pretrained at half the long
# context; ``gqa``: 1 KV head per 4 heads.
FAMILIES: dict[str, dict[str, Any]] = {
    "llama2": dict(norm="pre", qk_norm="none", gqa=False, swa=False, short_ctx=True, theta=10_000.0, ff_ratio=1.0, eps=1e-5),
    "llama3": dict(
        norm="pre", qk_norm="none", gqa=True, swa=False, short_ctx=False, theta=500_000.0, ff_ratio=14336 / 11008, eps=1e-5
    ),
    "qwen3": dict(
        norm="pre",
        qk_norm="headwise",
        gqa=True,
        swa=False,
        short_ctx=False,
        theta=500_000.0,
        ff_ratio=12288 / 11008,
        eps=1e-6,
        layers_ratio=36 / 32,
    ),
    "olmo2": dict(
        norm="post", qk_norm="layerwise", gqa=False, swa=False, short_ctx=True, theta=500_000.0, ff_ratio=1.0, eps=1e-6
    ),
    "olmo3": dict(
        norm="post", qk_norm="layerwise", gqa=False, swa=True, short_ctx=False, theta=500_000.0, ff_ratio=1.0, eps=1e-6
    ),
}


def preset_dict(family: str, size: str = "tiny") -> dict[str, Any]:
    """The ModelConfig fields of ``family`` at ``size`` (overridable by the caller)."""
    if family not in FAMILIES:
        raise ConfigError("preset", f"unknown preset {family!r}; allowed: {', '.join(FAMILIES)}")
    if size not in SIZES:
        raise ConfigError("size", f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    fam, shp = FAMILIES[family], SIZES[size]
    n_heads = shp["n_heads"]
    d_ff = scaled_d_ff(shp["d_model"], fam["ff_ratio"], shp.get("d_ff"))
    n_layers = shp["n_layers"]
    if size == "7b" and "layers_ratio" in fam:
        n_layers = round(n_layers * fam["layers_ratio"])
    ctx = shp["ctx"] // 2 if fam[SHORT_CTX] else shp["ctx"]
    return dict(
        family=family,
        vocab_size=shp["vocab_size"],
        d_model=shp["d_model"],
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=max(1, n_heads // 4) if fam[GQA] else n_heads,
        d_ff=d_ff,
        norm_eps=fam["eps"],
        max_seq_len=ctx,
        norm=fam[NORM],
        qk_norm=fam[QK_NORM],
        window=shp["ctx"] // 2 if fam[SWA] else None,
        swa_pattern="olmo3" if fam[SWA] else "none",
        rope=dict(theta=fam["theta"]),
    )
