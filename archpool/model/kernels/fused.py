"""The CPU flash kernel under the tiles of ``archpool.model.kernels.local``, with hand-written backwards.

On CPU (float32, bfloat16) both tilings run the flash kernel directly (``FusedTileAttention``,
``FusedDocumentAttention``): a windowed or document-masked layer then holds for backward what a full
causal layer holds (q, k, v, the output and the log-sum-exp), where autograd through the tiles
would keep the tiled copies of K and V or every tile's mask. The window kernel reads each batch
row's tiles as strided views (no tiled copies). Results are the same bits as autograd's through
the tiles. Other devices (and float64) take the autograd path (``fused_backward_applies``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import FunctionCtx

from archpool.model.kernels.local import WindowTiles, document_mask


def fused_backward_applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the hand-written backwards (``FusedTileAttention``, ``FusedDocumentAttention``) can run:
    the CPU flash kernel, float32 or bfloat16."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16) and k.dtype == v.dtype == q.dtype


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as the additive one the CPU flash kernel takes (0 allowed, -inf not), in ``dtype``."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU flash kernel under a boolean ``mask``: the output and the log-sum-exp (what its backward needs)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=_additive(mask, q.dtype))


def _flash_grad(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CPU flash kernel's backward: gradients of q, k and v."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, False, attn_mask=_additive(mask, q.dtype)
    )


class FusedTileAttention(torch.autograd.Function):
    """Tiled sliding-window attention through the CPU flash kernel, forward and backward by hand.

    The kernel reads each batch row's tiles as strided views (``WindowTiles.row_queries`` /
    ``row_keys``: the tiles of queries and the overlapping tiles of keys, no copies), and writes its
    output in the untiled layout. Autograd through the tiling would save tiled copies of K and V
    (each key sits in about ``width / block`` = 3 tiles); this saves only what full causal SDPA
    saves — q, k, v, the output and the log-sum-exp — and re-tiles in backward, folding the tiles'
    key gradients back (``WindowTiles.fold_row``). Rows run one after another, each in runs of
    ``chunks``."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: WindowTiles, doc_ids: torch.Tensor | None
    ) -> torch.Tensor:
        qp, kp, vp = tiles.padded_queries(q), tiles.padded_keys(k), tiles.padded_keys(v)
        B, H, _, D = qp.shape
        yp = q.new_empty(B, H, tiles.n, tiles.block, D)  # each kernel call's output lands in its tiles' rows
        lse = q.new_empty(B, H, tiles.n, tiles.block, dtype=torch.float32)
        runs = tiles.chunks(doc_ids, q.device)
        for r in range(B):
            for run in runs:
                for t0, t1, mask in run:
                    out, tile_lse = _flash(
                        tiles.row_queries(qp[r], t0, t1),
                        tiles.row_keys(kp[r], t0, t1),
                        tiles.row_keys(vp[r], t0, t1),
                        tiles.row_mask(mask, r),
                    )
                    yp[r, :, t0:t1] = out.transpose(0, 1)
                    lse[r, :, t0:t1] = tile_lse.transpose(0, 1)
        y = yp.view(B, H, -1, D)[:, :, : tiles.T]
        ctx.tiles, ctx.doc_ids = tiles, doc_ids
        ctx.save_for_backward(q, k, v, y, lse)  # lse: (B, H, n, block)
        return y

    @staticmethod
    def backward(ctx: FunctionCtx, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, y, lse = ctx.saved_tensors
        tiles: WindowTiles = ctx.tiles
        qp, kp, vp = tiles.padded_queries(q), tiles.padded_keys(k), tiles.padded_keys(v)
        yp, gp = tiles.padded_queries(y), tiles.padded_queries(grad_y)
        gk, gv = tiles.fold_buffer(k), tiles.fold_buffer(v)
        grad_q = torch.empty_like(qp).view(tiles.B, q.shape[1], tiles.n, tiles.block, q.shape[3])
        runs = tiles.chunks(ctx.doc_ids, q.device)
        for r in range(tiles.B):
            for run in runs:
                for t0, t1, mask in run:
                    a, b, c = _flash_grad(
                        tiles.row_queries(gp[r], t0, t1),
                        tiles.row_queries(qp[r], t0, t1),
                        tiles.row_keys(kp[r], t0, t1),
                        tiles.row_keys(vp[r], t0, t1),
                        tiles.row_queries(yp[r], t0, t1),
                        lse[r, :, t0:t1].transpose(0, 1),
                        tiles.row_mask(mask, r),
                    )
                    grad_q[r, :, t0:t1] = a.transpose(0, 1)
                    tiles.fold_row(gk[r], b, t0, t1)
                    tiles.fold_row(gv[r], c, t0, t1)
        grad_q = grad_q.view(tiles.B, q.shape[1], -1, q.shape[3])[:, :, : tiles.T]
        return grad_q, tiles.folded(gk), tiles.folded(gv), None, None


class FusedDocumentAttention(torch.autograd.Function):
    """``document_attention`` through the CPU flash kernel with a hand-written backward: saves q, k, v,
    the output and the log-sum-exp (what full causal SDPA saves) and rebuilds each tile's mask in
    backward, where autograd through the tiles would hold every tile's float mask (T²/2 in all)."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor, tiles: list
    ) -> torch.Tensor:
        outs, lses = [], []
        for s, e, lo in tiles:
            out, lse = _flash(q[:, :, s:e], k[:, :, lo:e], v[:, :, lo:e], document_mask(doc_ids, s, e, lo))
            outs.append(out)
            lses.append(lse)
        y = torch.cat(outs, dim=2)
        ctx.tiles = tiles
        ctx.save_for_backward(q, k, v, doc_ids, y, torch.cat(lses, dim=2))
        return y

    @staticmethod
    def backward(ctx: FunctionCtx, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, doc_ids, y, lse = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        gq, gk, gv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for s, e, lo in ctx.tiles:
            mask = document_mask(doc_ids, s, e, lo)
            a, b, c = _flash_grad(
                grad_y[:, :, s:e], q[:, :, s:e], k[:, :, lo:e], v[:, :, lo:e], y[:, :, s:e], lse[:, :, s:e], mask
            )
            gq[:, :, s:e] = a
            gk[:, :, lo:e] += b
            gv[:, :, lo:e] += c
        return gq, gk, gv, None, None
