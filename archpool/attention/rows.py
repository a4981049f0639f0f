"""Attention rows for selected queries, recomputed from captured post-RoPE q and k.

``softmax(q kᵀ · scale + mask)`` for a block of query rows at a time, in float32, with GQA handled by
grouping query heads over their shared key head (no repeated keys) and, for sliding-window layers,
only the keys some query of the block can see. A full T×T map is never built unless asked for
(``full_attention``, for short inputs and tests).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from archpool.model.kernels.local import LocalMask

DEFAULT_BUDGET_BYTES = 256 << 20  # float32 probabilities held at once, per chunk


@dataclass
class RowChunk:
    """Attention probabilities ``probs`` (B, H, c, S) of queries at ``q_pos`` (c,) over keys at ``k_pos`` (S,)."""

    q_index: slice  # which of the given query rows these are
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    probs: torch.Tensor


def _key_range(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> tuple[int, int]:
    """Index range [lo, hi) of the (sorted) keys that any of the queries may attend to."""
    hi = int(torch.searchsorted(k_pos, q_pos.max(), right=True))
    if window is None:
        return 0, hi
    lo = int(torch.searchsorted(k_pos, q_pos.min() - window + 1))
    return lo, hi


def attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    window: int | None = None,
    scale: float | None = None,
    chunk: int | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> Iterator[RowChunk]:
    """Yield the attention rows of queries ``q`` (B, H, Tq, D) over keys ``k`` (B, KV, Tk, D) in chunks.

    ``q_pos`` / ``k_pos`` are absolute positions (sorted); the mask is causal, within ``window``
    (query included, as transformers' ``sliding_window``) when given. ``scale`` defaults to 1/√D.
    """
    B, H, Tq, D = q.shape
    KV = k.shape[1]
    if H % KV:
        raise ValueError(f"query heads {H} are not a multiple of key heads {KV}")
    G = H // KV
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q_pos, k_pos = q_pos.to(q.device), k_pos.to(k.device)
    if chunk is None:
        chunk = max(1, budget_bytes // max(1, 4 * B * H * k.shape[2]))
    for s in range(0, Tq, chunk):
        e = min(Tq, s + chunk)
        qp = q_pos[s:e]
        lo, hi = _key_range(qp, k_pos, window)
        kp = k_pos[lo:hi]
        kc = k[:, :, lo:hi].float()  # (B, KV, S, D)
        qc = q[:, :, s:e].float().reshape(B, KV, G, e - s, D)
        scores = torch.einsum("bkgqd,bksd->bkgqs", qc, kc).reshape(B, H, e - s, hi - lo) * scale
        allowed = LocalMask(window).allows(qp, kp)
        scores = scores.masked_fill(~allowed, float("-inf"))
        yield RowChunk(slice(s, e), qp, kp, torch.softmax(scores, dim=-1))


def full_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    window: int | None = None,
    scale: float | None = None,
    q_pos: torch.Tensor | None = None,
    k_pos: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole map (B, H, Tq, Tk) for short inputs; by default queries are the last Tq of the keys."""
    Tq, Tk = q.shape[2], k.shape[2]
    k_pos = torch.arange(Tk) if k_pos is None else k_pos
    q_pos = k_pos[Tk - Tq :] if q_pos is None else q_pos
    out = torch.zeros(q.shape[0], q.shape[1], Tq, Tk)
    for c in attention_rows(q, k, q_pos, k_pos, window=window, scale=scale):
        lo = int(torch.searchsorted(k_pos, c.k_pos[0])) if len(c.k_pos) else 0
        out[:, :, c.q_index, lo : lo + c.probs.shape[-1]] = c.probs
    return out
