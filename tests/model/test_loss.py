"""The fused, chunked LM-head cross-entropy against PyTorch's own ``F.cross_entropy`` on full logits."""

import pytest
import torch
import torch.nn.functional as F

from archpool.model import ModelConfig
from archpool.model.loss import linear_cross_entropy
from archpool.model.model import Decoder


def _problem(n=37, d=16, vocab=50, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=dtype, requires_grad=True)
    w = (0.3 * torch.randn(vocab, d, generator=g, dtype=dtype)).requires_grad_()
    t = torch.randint(0, vocab, (n,), generator=g)
    t[::5] = -100
    return h, w, t


def _reference(h, w, t):
    loss = F.cross_entropy(h @ w.t(), t, ignore_index=-100, reduction="sum")
    gh, gw = torch.autograd.grad(loss * 0.37, (h, w))
    return loss, gh, gw


@pytest.mark.parametrize("chunk_rows", [1, 5, 16, 37, 100, None])
def test_matches_cross_entropy_loss_and_gradients(chunk_rows):
    h, w, t = _problem()
    ref_loss, ref_gh, ref_gw = _reference(h, w, t)
    loss = linear_cross_entropy(h, w, t, chunk_rows=chunk_rows)
    gh, gw = torch.autograd.grad(loss * 0.37, (h, w))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(gh, ref_gh, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64():
    h, w, t = _problem(n=9, d=4, vocab=7, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: linear_cross_entropy(a, b, t, chunk_rows=4), (h, w))


def test_large_logits_are_stable():
    h, w, t = _problem()
    with torch.no_grad():
        w.mul_(300.0)  # logits in the thousands: a naive exp overflows
    loss = linear_cross_entropy(h, w, t)
    ref = F.cross_entropy(h @ w.t(), t, ignore_index=-100, reduction="sum")
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-2)


def test_all_ignored_and_no_grad():
    h, w, t = _problem()
    zero = linear_cross_entropy(h, w, torch.full_like(t, -100))
    assert zero.item() == 0.0
    gh, gw = torch.autograd.grad(zero, (h, w))
    assert not gh.any() and not gw.any()
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, _reference(h, w, t)[0], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("chunk_rows", [3, None])
def test_ignored_rows_are_never_scored(chunk_rows):
    """Answer-only batches: the head multiplies only scored rows (counted in FLOPs), and the loss and
    both gradients still equal full-logits cross-entropy, with exact zeros on the ignored rows."""
    from torch.utils.flop_counter import FlopCounterMode

    h, w, t = _problem(n=40, d=16, vocab=50)
    t[:] = -100
    t[[3, 17, 18, 39]] = torch.tensor([1, 0, 49, 7])
    ref_loss, ref_gh, ref_gw = _reference(h, w, t)
    with FlopCounterMode(display=False) as every_row:
        linear_cross_entropy(h, w, t.masked_fill(t == -100, 2), chunk_rows=chunk_rows)
    with FlopCounterMode(display=False) as counter:
        loss = linear_cross_entropy(h, w, t, chunk_rows=chunk_rows)
    assert counter.get_total_flops() * 10 == every_row.get_total_flops() > 0  # 4 rows of 40
    gh, gw = torch.autograd.grad(loss * 0.37, (h, w))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(gh, ref_gh, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-5, atol=1e-6)
    assert not gh[t == -100].any()


def test_bf16_autocast_is_close_to_float32():
    h, w, t = _problem(n=64, d=32, vocab=100)
    ref_loss, ref_gh, ref_gw = _reference(h, w, t)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, t, chunk_rows=16)
    gh, gw = torch.autograd.grad(loss * 0.37, (h, w))
    assert loss.dtype == torch.float32 and gh.dtype == torch.float32 and gw.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=0.5)
    torch.testing.assert_close(gh, ref_gh, rtol=0.1, atol=2e-2)
    torch.testing.assert_close(gw, ref_gw, rtol=0.1, atol=2e-2)


def test_shape_mismatch_names_targets():
    h, w, t = _problem()
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(h, w, t[:-1])
    with pytest.raises(ValueError, match="chunk_rows"):
        linear_cross_entropy(h, w, t, chunk_rows=0)


@pytest.mark.parametrize("tie", [False, True])
def test_decoder_targets_path_equals_logits_path(tie):
    cfg = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32, tie_embeddings=tie)
    a, b = Decoder(cfg, seed=3), Decoder(cfg, seed=3)
    x = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, 1)
    y[:, -1] = -100
    ref = F.cross_entropy(a(x).flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum")
    ref.backward()
    fused = b(x, targets=y)
    fused.backward()
    torch.testing.assert_close(fused, ref, rtol=1e-6, atol=1e-5)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pb.grad, pa.grad, rtol=1e-4, atol=1e-6, msg=name)
