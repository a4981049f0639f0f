"""The CPU flash kernel under the tiles of ``archpool.model.kernels.local``, with a hand-written backward.

On CPU (float32, bfloat16) sliding windows and document masks run the flash kernel tile by tile
(``FusedTiles``): each forward call reads its queries and its key range as slices of q, k and v (no
padded or tiled copies), and its output and log-sum-exp land in their rows. The backward runs over
tiles that own keys instead (``window_tiles_by_key``, ``document_tiles_by_key``): each call's key
gradients are the keys' whole gradients, written once, and its query gradients add into dQ. Over
the forward's tiles, every tile reading a key would add into its rows of dK and dV: a
document-masked op measured 1.1x slower forward + backward that way (its tiles read up to a
document's length of keys), a windowed one the same within noise (docs/runtime.md). A windowed or
document-masked layer holds for backward what a full causal layer holds (q, k, v, the output and
the log-sum-exp). One call per tile, over all heads, measured faster than stacking the tiles into
one call (docs/runtime.md): the kernel reads overlapping strided views slower than slices, and
stacked tiles' key gradients need folding back. Other devices (and float64) take the autograd path
(``fused_backward_applies``).
"""

from __future__ import annotations

from typing import Any

import torch

from archpool.model.kernels.local import KeyTile, LocalMask

CPU = torch.device("cpu")  # the flash kernel these tiles run through is the CPU's


def fused_backward_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the hand-written backward (``FusedTiles``) can run: the CPU flash kernel, float32 or bfloat16."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16) and k.dtype == v.dtype == q.dtype


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as the additive one the CPU flash kernel takes (0 allowed, -inf not), in ``dtype``."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


class TileMasks:
    """The additive mask of each tile, built on first use. Without documents a mask depends only on
    the tile's shape and on where its keys start relative to its queries, so the many equal tiles of
    a sliding window share one."""

    def __init__(self, mask: LocalMask, offset: int, dtype: torch.dtype):
        self.mask, self.offset, self.dtype = mask, offset, dtype
        self.shared: dict[tuple[int, int, int], torch.Tensor] = {}

    def __call__(self, tile: KeyTile) -> torch.Tensor:
        if self.mask.doc_ids is not None:
            return _additive(self.mask.tile(tile, self.offset, CPU), self.dtype)
        key = (tile.e - tile.s, tile.hi - tile.lo, self.offset + tile.s - tile.lo)
        if key not in self.shared:
            self.shared[key] = _additive(self.mask.tile(tile, self.offset, CPU), self.dtype)
        return self.shared[key]


def tile_backward(
    grad_y: torch.Tensor, saved: tuple[torch.Tensor, ...], t: KeyTile, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The flash-kernel backward of tile ``t`` under its additive ``mask``, on ``FusedTiles``' saved
    (q, k, v, output, log-sum-exp): the gradients of query rows [s, e) and of key rows [lo, hi)."""
    q, k, v, y, lse = saved
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_y[:, :, t.s : t.e],
        q[:, :, t.s : t.e],
        k[:, :, t.lo : t.hi],
        v[:, :, t.lo : t.hi],
        y[:, :, t.s : t.e],
        lse[:, :, t.s : t.e],
        0.0,
        False,
        attn_mask=mask,
    )


class FusedTiles(torch.autograd.Function):
    """Attention of q (B, H, T, D) over k, v (B, KV, S, D) under ``mask`` through the CPU flash kernel,
    forward over ``tiles`` (every query in exactly one tile, each tile's keys holding every key its
    queries may attend to) and backward over ``key_tiles`` (every key in exactly one tile, each tile's
    queries holding every query that may attend to its keys). Saves q, k, v, the output and the
    log-sum-exp."""

    @staticmethod
    def forward(
        ctx: Any,  # the autograd context; forward leaves the masks and key tiles on it for backward
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: LocalMask,
        tiles: list[KeyTile],
        key_tiles: list[KeyTile],
    ) -> torch.Tensor:
        masks = TileMasks(mask, k.shape[2] - q.shape[2], q.dtype)
        y = torch.empty_like(q)
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        for t in tiles:
            out, tile_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q[:, :, t.s : t.e], k[:, :, t.lo : t.hi], v[:, :, t.lo : t.hi], 0.0, False, attn_mask=masks(t)
            )
            y[:, :, t.s : t.e] = out
            lse[:, :, t.s : t.e] = tile_lse
        ctx.masks, ctx.key_tiles = masks, key_tiles
        ctx.save_for_backward(q, k, v, y, lse)
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, y, lse = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        gq, gk, gv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
        for t in ctx.key_tiles:
            if t.s == t.e:  # cached keys no query reaches
                gk[:, :, t.lo : t.hi] = 0
                gv[:, :, t.lo : t.hi] = 0
                continue
            a, b, c = tile_backward(grad_y, (q, k, v, y, lse), t, ctx.masks(t))
            gq[:, :, t.s : t.e] += a
            gk[:, :, t.lo : t.hi] = b
            gv[:, :, t.lo : t.hi] = c
        return gq, gk, gv, None, None, None
