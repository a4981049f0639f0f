"""The attention kernels a layer calls, each ``(q, k, v, mask) -> output``: SDPA (with windows and
documents tiled by ``local_attention`` once long enough to pay), FlexAttention and the eager math.
``archpool.model.kernels.ATTENTION_FUNCTIONS`` maps each ``attn_impl`` name to one of them.

``q`` is (B, H, T, D), ``k`` and ``v`` (B, KV, S, D) with the queries the last T of the S keys;
``mask`` is ``None`` (plain causal), a ``LocalMask``, a dense boolean mask or, for FlexAttention,
a block mask (``flex_block_mask``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from archpool.model.kernels.fused import FusedTiles, fused_backward_applies
from archpool.model.kernels.local import (
    LocalMask,
    WindowTiles,
    default_block,
    document_tiles,
    document_tiles_by_key,
    local_attention_probs,
    pays_off,
    tiled_document_sdpa,
    tiled_sdpa,
    window_key_tiles,
    window_tiles_by_key,
)


# Opaque to torch.compile: a per-block compiled graph breaks around the tiles. Traced, the hand-written
# backwards made the extension's recompile at a new length (dynamic shapes) take 40-110 s in every run
# of the demo pool instead of a few seconds from inductor's cache; eager tiles cost the same per step.
@torch.compiler.disable
def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: LocalMask, block: int | None = None) -> torch.Tensor:
    """Attention of ``q`` (B, H, T, D) over ``k``/``v`` (B, KV, S, D) under ``mask``; (B, H, T, D)."""
    block = block or default_block(mask.window)
    if mask.doc_ids is not None and k.shape[2] != q.shape[2]:
        raise ValueError("doc_ids: intra-document masking is not supported with a KV cache")
    if mask.window is not None:
        return sliding_window_attention(q, k, v, mask.window, mask.doc_ids, block)
    if mask.doc_ids is not None:
        return document_attention(q, k, v, mask.doc_ids, block)
    raise ValueError("local_attention: plain causal attention needs no tiling (use SDPA's is_causal)")


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, doc_ids: torch.Tensor | None = None, block: int = 128
) -> torch.Tensor:
    """Sliding-window attention in tiles of ``block`` queries. On CPU in float32/bfloat16 each tile
    runs through the flash kernel on slices of q, k and v (``FusedTiles``); elsewhere the tiles are
    stacked into the batch dimension, one SDPA call per mask (``WindowTiles``)."""
    T, S = q.shape[2], k.shape[2]
    if fused_backward_applies(q, k, v):
        key_tiles = window_tiles_by_key(T, S, window, block)
        return FusedTiles.apply(q, k, v, LocalMask(window, doc_ids), window_key_tiles(T, S, window, block), key_tiles)
    return tiled_sdpa(q, k, v, WindowTiles(q.shape[0], T, S, window, block), doc_ids)


def document_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor, block: int = 128
) -> torch.Tensor:
    """Causal attention within documents, tile by tile (``document_tiles``). On CPU in float32/bfloat16
    the backward is ``FusedTiles``': no per-tile masks or key copies held for backward."""
    tiles = document_tiles(doc_ids, block)
    if fused_backward_applies(q, k, v):
        return FusedTiles.apply(q, k, v, LocalMask(None, doc_ids), tiles, document_tiles_by_key(doc_ids, block))
    return tiled_document_sdpa(q, k, v, doc_ids, tiles)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | LocalMask | None) -> torch.Tensor:
    """SDPA with GQA handled by the kernel (no repeated K/V); ``mask=None`` means plain causal.
    A ``LocalMask`` (window / documents) is tiled blockwise when long enough to pay, else made dense."""
    gqa = q.shape[1] != k.shape[1]
    if isinstance(mask, LocalMask):
        T, S = q.shape[2], k.shape[2]
        if mask.window is None and mask.doc_ids is None and T == S:
            mask = None
        elif (mask.window is not None or mask.doc_ids is not None) and pays_off(T, mask):
            return local_attention(q, k, v, mask)
        else:
            mask = mask.dense(T, S, q.device)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def flex_block_mask(T: int, window: int | None, doc_ids: torch.Tensor | None, device: torch.device):
    """FlexAttention block mask for causal (+ window, + same-document) attention: only the blocks
    that hold allowed pairs are computed, so sliding layers cost O(T·window) at any length.

    The window travels as a tensor (``T`` on full layers, where it allows every causal pair), so
    full and sliding layers share one ``mask_mod``: compiled FlexAttention guards on the values of
    Python constants captured by ``mask_mod`` and would otherwise compile once per window."""
    from torch.nn.attention.flex_attention import create_block_mask

    span = torch.tensor(T if window is None else min(window, T), device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = (q_idx >= kv_idx) & (q_idx - kv_idx < span)
        if doc_ids is not None:
            allowed = allowed & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])
        return allowed

    B = doc_ids.shape[0] if doc_ids is not None else None
    return create_block_mask(mask_mod, B, None, T, T, device=device, _compile=device.type == "cuda")


FLEX_RECOMPILE_LIMIT = 64
"""Compiled FlexAttention specialises on shapes (``dynamic=False`` gives the fastest kernels): one
compile per (length, batch, heads, documents or not). An evaluation over a ladder of lengths needs
more than dynamo's default of 8; past the limit dynamo would fall back to eager FlexAttention, which
materialises the T×T score matrix."""

_compiled_flex = None


def flex_attention_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask) -> torch.Tensor:
    """FlexAttention (the GPU path; compiled on CUDA). On CPU it has a forward only (docs/runtime.md)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    fn: Callable[..., torch.Tensor] = flex_attention
    if q.is_cuda:
        if _compiled_flex is None:
            import torch._dynamo

            limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILE_LIMIT)
            torch._dynamo.config.recompile_limit = limit
            _compiled_flex = torch.compile(flex_attention, dynamic=False)
        fn = _compiled_flex
    return fn(q, k, v, block_mask=block_mask, enable_gqa=q.shape[1] != k.shape[1])


def eager_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | LocalMask | None, return_probs: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The math written out; returns the attention probabilities (B, H, Tq, Tk) for analysis.
    Without a dense mask it runs tile by tile (``local_attention_probs``): no T×T scores in flight."""
    if mask is None or isinstance(mask, LocalMask):
        return local_attention_probs(q, k, v, mask, return_probs=return_probs)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is None:
        T, S = q.shape[2], k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return probs @ v, probs


def eager_output(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | LocalMask | None) -> torch.Tensor:
    """``eager_attention``'s output alone (no probabilities kept): the ``eager`` kernel."""
    return eager_attention(q, k, v, mask, return_probs=False)[0]
