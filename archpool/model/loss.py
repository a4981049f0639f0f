"""The LM head fused with its cross-entropy, in row chunks: the (tokens × vocab) logits never exist whole.

``linear_cross_entropy(hidden, weight, targets)`` equals
``F.cross_entropy(hidden @ weight.T, targets, ignore_index=-100, reduction="sum")`` (softmax in
float32). For each chunk of rows it computes the logits into one reused buffer, the loss, and, in the
same pass, the gradients with respect to ``hidden`` and ``weight``: softmax minus one-hot, multiplied
back through the head. Backward only scales those stored gradients. On a CPU this removes the
log-softmax backward, the zero-filled NLL gradient and the page faults of a fresh logits-sized tensor
per step (bench/results/train.md); on a GPU it removes the logits' memory. Rows whose target is
ignored (-100) never reach the head: answer-only task documents ignore most of a batch.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100
CHUNK_ELEMENTS = 1 << 22  # logits per chunk (16 MiB in float32)
MIN_CHUNK_ROWS = 512  # fewer rows make the head's matmuls inefficient (bench/results/train.md)


def default_chunk_rows(n_rows: int, vocab: int) -> int:
    """Rows per chunk: about ``CHUNK_ELEMENTS`` logits, at least ``MIN_CHUNK_ROWS`` rows."""
    return max(1, min(n_rows, max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS // vocab)))


def _head_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The matmul dtype: autocast's when it is on for this device, else the hidden states'."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return hidden.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_rows: int, dtype: torch.dtype, need_grad: bool):
        h, w = hidden.to(dtype), weight.to(dtype)
        n, vocab = h.shape[0], w.shape[0]
        grad_h = torch.empty_like(hidden) if need_grad else None
        acc = torch.promote_types(dtype, torch.float32)  # softmax and sums: float32 at least
        direct = dtype == acc  # no casts between the matmuls and the softmax
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_grad else None
        total = torch.zeros((), dtype=acc, device=hidden.device)
        buf = torch.empty(chunk_rows, vocab, dtype=acc, device=hidden.device)
        for start in range(0, n, chunk_rows):
            hc, tc = h[start : start + chunk_rows], targets[start : start + chunk_rows]
            z = buf[: hc.shape[0]]
            if direct:
                torch.mm(hc, w.t(), out=z)
            else:
                z.copy_(hc @ w.t())
            valid = tc != IGNORE_INDEX
            idx = tc.masked_fill(~valid, 0)[:, None]
            target_logit = z.gather(1, idx).squeeze(1)
            row_max = z.amax(1, keepdim=True)
            z.sub_(row_max).exp_()
            row_sum = z.sum(1, keepdim=True)
            lse = (row_max + row_sum.log()).squeeze(1)
            total += torch.where(valid, lse - target_logit, 0.0).sum()
            if grad_h is None or grad_w is None:  # not need_grad
                continue
            z.mul_(valid[:, None] / row_sum)  # softmax (0 on ignored rows)
            z.scatter_add_(1, idx, -valid[:, None].to(z.dtype))  # minus one-hot
            g = z if direct else z.to(dtype)
            grad_h[start : start + chunk_rows] = g @ w
            if direct:
                grad_w.addmm_(g.t(), hc)
            else:
                grad_w += g.t() @ hc
        if (
            grad_h is not None and grad_w is not None
        ):  # need_grad; otherwise grad mode is off or nothing requires grad: backward never runs
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return total

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out.to(grad_h.dtype), grad_w * grad_out.to(grad_w.dtype), None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, chunk_rows: int | None = None
) -> torch.Tensor:
    """Summed next-token cross-entropy (a float32 or float64 scalar) of ``hidden`` (…, d) under the head ``weight``
    (V, d) against ``targets`` (…); targets equal to -100 are ignored. ``chunk_rows`` overrides
    ``default_chunk_rows``."""
    h, t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if h.shape[0] != t.shape[0]:
        raise ValueError(f"targets: {tuple(targets.shape)} does not match hidden states {tuple(hidden.shape[:-1])}")
    need_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows: must be >= 1, got {chunk_rows}")
    h, t = _scored_rows(h, t)
    rows = min(chunk_rows, max(h.shape[0], 1)) if chunk_rows else default_chunk_rows(h.shape[0], weight.shape[0])
    return _LinearCrossEntropy.apply(h, weight, t, rows, _head_dtype(hidden), need_grad)


def _scored_rows(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Only the rows whose target is scored: an ignored row adds nothing to the loss or to either
    gradient, so its logits are never computed (answer-only task documents ignore most rows; the
    demo's batches ignore 56-76%). ``index_select``'s backward puts zeros on the dropped rows.
    On a GPU ``nonzero`` waits for the device once per call."""
    scored = t != IGNORE_INDEX
    rows = scored.nonzero().squeeze(1)
    if rows.numel() == t.numel():
        return h, t
    return h.index_select(0, rows), t.index_select(0, rows)
