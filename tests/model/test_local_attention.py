"""Blockwise local attention against SDPA with the dense mask: forward, backward, GQA, documents, decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import archpool.model.kernels.dispatch as dispatch
import archpool.model.kernels.fused as fused
import archpool.model.kernels.local as la
from archpool.model.config import ModelConfig
from archpool.model.kernels.dispatch import local_attention
from archpool.model.kernels.local import LocalMask, document_starts, local_attention_probs
from archpool.model.model import Decoder

TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(B: int, H: int, KV: int, T: int, S: int | None = None, D: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    S = S or T
    q = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    k = torch.randn(B, KV, S, D, generator=g, requires_grad=True)
    v = torch.randn(B, KV, S, D, generator=g, requires_grad=True)
    return q, k, v


def dense_reference(q, k, v, mask: LocalMask):
    allowed = mask.dense(q.shape[2], k.shape[2], q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=q.shape[1] != k.shape[1])


def check_forward_backward(q, k, v, mask: LocalMask, block: int):
    got = local_attention(q, k, v, mask, block=block)
    want = dense_reference(q, k, v, mask)
    torch.testing.assert_close(got, want, **TOL)
    w = torch.randn_like(got)
    g_got = torch.autograd.grad((got * w).sum(), (q, k, v))
    g_want = torch.autograd.grad((want * w).sum(), (q, k, v))
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, **TOL)


def docs(B: int, T: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    bounds = (torch.rand(B, T, generator=g) < 0.08).long()
    bounds[:, 0] = 0
    return bounds.cumsum(1)


@pytest.mark.parametrize("T,window,block", [(37, 5, 8), (64, 16, 8), (50, 7, 16), (33, 40, 8), (9, 3, 4), (1, 4, 8)])
def test_sliding_window_matches_dense_mask(T, window, block):
    check_forward_backward(*qkv(2, 4, 4, T), LocalMask(window), block)


@pytest.mark.parametrize("KV", [1, 2])
def test_sliding_window_gqa_matches_dense_mask(KV):
    check_forward_backward(*qkv(2, 4, KV, 45, seed=1), LocalMask(6), 8)


@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("KV", [4, 2])
def test_documents_match_dense_mask(window, KV):
    doc_ids = docs(3, 53, seed=2)
    check_forward_backward(*qkv(3, 4, KV, 53, seed=3), LocalMask(window, doc_ids), 8)


def test_documents_not_sorted_fall_back_to_exact_ranges():
    doc_ids = torch.tensor([[0] * 10 + [1] * 10 + [0] * 11])
    assert document_starts(doc_ids).eq(0).all()
    check_forward_backward(*qkv(1, 2, 2, 31, seed=4), LocalMask(None, doc_ids), 8)
    check_forward_backward(*qkv(1, 2, 2, 31, seed=4), LocalMask(12, doc_ids), 8)


@pytest.mark.parametrize("window", [None, 5])
def test_queries_after_cached_keys_match_dense_mask(window):
    # a KV-cache step: T queries are the last T of S keys
    q, k, v = qkv(2, 4, 2, 19, S=27, seed=5)
    if window is None:
        want = dense_reference(q, k, v, LocalMask(None))
        got, _ = local_attention_probs(q, k, v, LocalMask(None), block=4, return_probs=False)
        torch.testing.assert_close(got, want, **TOL)
    else:
        check_forward_backward(q, k, v, LocalMask(window), 4)


@pytest.mark.parametrize("mask", [LocalMask(None), LocalMask(5), LocalMask(None, docs(2, 29, 6)), LocalMask(7, docs(2, 29, 7))])
def test_blockwise_probabilities_match_dense(mask):
    q, k, v = qkv(2, 4, 2, 29, seed=8)
    y, probs = local_attention_probs(q, k, v, mask, block=8)
    allowed = mask.dense(29, 29, q.device)
    scores = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) / 8**0.5
    want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    torch.testing.assert_close(probs, want, **TOL)
    torch.testing.assert_close(y, want @ v.repeat_interleave(2, 1), **TOL)
    gy = torch.autograd.grad(y.sum(), q)[0]
    torch.testing.assert_close(gy, torch.autograd.grad((want @ v.repeat_interleave(2, 1)).sum(), q)[0], **TOL)


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 8 rows inside the Decoder, so short test sequences take the blockwise path."""
    monkeypatch.setattr(la, "default_block", lambda window: 8)
    monkeypatch.setattr(dispatch, "default_block", lambda window: 8)
    assert la.pays_off(24, LocalMask(None, torch.zeros(1, 24)))


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=256)
    base.update(kw)
    return ModelConfig.from_dict(base)


@pytest.mark.parametrize("pattern", ["olmo3", "all"])
def test_decoder_blockwise_equals_dense_masks_forward_and_backward(pattern, small_tiles):
    model = Decoder(tiny(swa_pattern=pattern, window=8), seed=1)
    dense = Decoder(tiny(swa_pattern=pattern, window=8), seed=1, local_attention=False)  # the same weights
    ids = torch.randint(0, 97, (2, 101))
    doc_ids = docs(2, 101, seed=9)
    for kw in ({}, {"doc_ids": doc_ids}):
        model.zero_grad()
        dense.zero_grad()
        loss = model(ids, targets=ids, **kw)
        loss.backward()
        want_loss = dense(ids, targets=ids, **kw)
        want_loss.backward()
        torch.testing.assert_close(loss, want_loss, **TOL)
        for a, p in zip(model.parameters(), dense.parameters()):
            torch.testing.assert_close(a.grad, p.grad, atol=1e-5, rtol=1e-4)


def test_decoding_with_windowed_cache_matches_full_forward(small_tiles):
    model = Decoder(tiny(swa_pattern="olmo3", window=6), seed=2).eval()
    dense = Decoder(tiny(swa_pattern="olmo3", window=6), seed=2, local_attention=False).eval()
    ids = torch.randint(0, 97, (2, 90))
    with torch.no_grad():
        full = dense(ids)
        torch.testing.assert_close(model(ids), full, **TOL)
        cache = model.new_cache()  # a long prefill chunk (tiled), then chunks and single tokens
        steps = [model(ids[:, :40], kv_cache=cache), model(ids[:, 40:70], kv_cache=cache)]
        steps += [model(ids[:, i : i + 1], kv_cache=cache) for i in range(70, 90)]
    torch.testing.assert_close(torch.cat(steps, 1), full, **TOL)


def test_output_attentions_blockwise_equals_dense(small_tiles):
    model = Decoder(tiny(swa_pattern="olmo3", window=5), seed=3)
    dense = Decoder(tiny(swa_pattern="olmo3", window=5), seed=3, local_attention=False)
    ids = torch.randint(0, 97, (1, 45))
    with torch.no_grad():
        logits, probs = model.forward_with_attentions(ids)
        want_logits, want_probs = dense.forward_with_attentions(ids)
    torch.testing.assert_close(logits, want_logits, **TOL)
    for a, b in zip(probs, want_probs):
        torch.testing.assert_close(a, b, **TOL)


def test_decoder_takes_the_blockwise_path(small_tiles, monkeypatch):
    calls = []
    real = dispatch.local_attention
    monkeypatch.setattr(dispatch, "local_attention", lambda *a, **kw: calls.append(a[3]) or real(*a, **kw))
    model = Decoder(tiny(swa_pattern="olmo3", window=6), seed=4)
    ids = torch.randint(0, 97, (2, 40))
    with torch.no_grad():
        model(ids, doc_ids=docs(2, 40))
    assert [m.window for m in calls] == [6, 6, 6, None]
    calls.clear()
    with torch.no_grad():
        Decoder(tiny(swa_pattern="olmo3", window=6), seed=4, local_attention=False)(ids, doc_ids=docs(2, 40))
    assert calls == []


@pytest.mark.parametrize("window", [None, 4])
def test_blockwise_probabilities_after_cached_keys(window):
    q, k, v = qkv(1, 4, 2, 13, S=21, seed=10)
    mask = LocalMask(window)
    y, probs = local_attention_probs(q, k, v, mask, block=4)
    allowed = mask.dense(13, 21, q.device)
    scores = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) / 8**0.5
    want = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
    torch.testing.assert_close(probs, want, **TOL)
    torch.testing.assert_close(y, dense_reference(q, k, v, mask), **TOL)


# --- the fused backward (CPU flash kernel, K/V kept untiled) ------------------------------------


@pytest.mark.parametrize(
    "B,H,KV,T,S,window,block,with_docs",
    [
        (2, 4, 4, 37, 37, 5, 8, False),
        (2, 4, 1, 64, 64, 16, 8, False),
        (3, 4, 2, 19, 27, 5, 4, False),
        (2, 4, 2, 53, 53, 6, 8, True),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_tiles_equal_autograd_through_the_stacked_tiles(B, H, KV, T, S, window, block, with_docs, dtype):
    # the CPU path (flash kernel per key tile, hand-written backward) against the other devices' path
    # (equal-width tiles stacked into the batch, autograd through SDPA), in both training dtypes
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in qkv(B, H, KV, T, S=S, seed=11))
    doc_ids = docs(B, T, seed=12) if with_docs else None
    assert fused.fused_backward_applies(q, k, v)
    w = torch.randn(B, H, T, q.shape[-1]).to(dtype)
    tiles, key_tiles = la.window_key_tiles(T, S, window, block), la.window_tiles_by_key(T, S, window, block)
    got = fused.FusedTiles.apply(q, k, v, LocalMask(window, doc_ids), tiles, key_tiles)
    want = la.tiled_sdpa(q, k, v, la.WindowTiles(B, T, S, window, block), doc_ids)
    tol = TOL if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got, want, **tol)
    for a, b in zip(torch.autograd.grad((got * w).sum(), (q, k, v)), torch.autograd.grad((want * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, **tol)


@settings(max_examples=80, deadline=None)
@given(
    T=st.integers(1, 60),
    extra=st.integers(0, 12),
    window=st.integers(1, 20),
    block=st.integers(1, 12),
    align=st.sampled_from([1, 8, 64]),
)
def test_window_key_tiles_cover_every_query_once_and_every_key_it_may_see(T, extra, window, block, align):
    S = T + extra
    tiles = la.window_key_tiles(T, S, window, block, align)
    assert [t.s for t in tiles] == list(range(0, T, block)) and tiles[-1].e == T
    allowed = LocalMask(window).dense(T, S, torch.device("cpu"))
    for t in tiles:
        assert 0 <= t.lo < t.hi == S - T + t.e
        assert (t.hi - t.lo) % align == 0 or t.lo == 0  # aligned widths unless cut at key 0
        reach = allowed[t.s : t.e].nonzero()[:, 1]
        assert int(reach.min()) >= t.lo and int(reach.max()) < t.hi


@settings(max_examples=80, deadline=None)
@given(T=st.integers(1, 60), extra=st.integers(0, 40), window=st.integers(1, 20), block=st.integers(1, 12))
def test_window_tiles_by_key_cover_every_key_once_and_every_query_that_may_see_it(T, extra, window, block):
    S = T + extra
    tiles = la.window_tiles_by_key(T, S, window, block)
    assert [t.lo for t in tiles] == list(range(0, S, block)) and [t.hi for t in tiles][:-1] == [t.lo for t in tiles][1:]
    assert tiles[-1].hi == S
    allowed = LocalMask(window).dense(T, S, torch.device("cpu"))
    for t in tiles:
        seen_by = allowed[:, t.lo : t.hi].any(dim=1).nonzero()[:, 0]
        if len(seen_by) == 0:
            assert t.s == t.e  # cached keys no query reaches: the backward zero-fills their rows
        else:
            assert t.s <= int(seen_by.min()) and int(seen_by.max()) < t.e
            assert allowed[t.s : t.e, t.lo : t.hi].any(dim=1).all()  # and no query that sees none of them


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 80), block=st.integers(1, 16), seed=st.integers(0, 99))
def test_document_tiles_by_key_hold_every_query_of_their_keys_documents(B, T, block, seed):
    doc_ids = docs(B, T, seed=seed)
    allowed = LocalMask(None, doc_ids).dense(T, T, torch.device("cpu"))[:, 0].any(dim=0)  # (T, T) over the batch
    tiles = la.document_tiles_by_key(doc_ids, block)
    assert [t.lo for t in tiles] == list(range(0, T, block)) and tiles[-1].hi == T
    for t in tiles:
        seen_by = allowed[:, t.lo : t.hi].any(dim=1).nonzero()[:, 0]
        assert t.s == t.lo and int(seen_by.max()) < t.e


def test_document_ends_mirror_document_starts():
    doc_ids = torch.tensor([[0, 0, 1, 1, 1, 2], [3, 3, 3, 3, 4, 4]])
    assert la.document_ends(doc_ids).tolist() == [[2, 2, 5, 5, 5, 6], [4, 4, 4, 4, 6, 6]]
    assert la.document_ends(torch.tensor([[1, 0, 1]])).tolist() == [[3, 3, 3]]  # not contiguous: every key to the end


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves for backward while ``fn`` runs."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def test_fused_backward_saves_no_more_than_full_causal_attention():
    # the training-memory target: a windowed layer holds for backward what a full causal one holds
    q, k, v = qkv(2, 4, 2, 256, D=16, seed=13)
    full = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    fused = saved_bytes(lambda: local_attention(q, k, v, LocalMask(32), block=16))
    through_tiles = saved_bytes(lambda: la.tiled_sdpa(q, k, v, la.WindowTiles(2, 256, 256, 32, 16), None))
    assert fused <= full < through_tiles


@pytest.mark.parametrize("window", [None, 6])
def test_the_autograd_path_other_devices_take_matches_dense_mask(window):
    # float64 is not the CPU flash kernel's: the tiles go through SDPA and autograd, as on GPU without flex
    q, k, v = (x.detach().double().requires_grad_() for x in qkv(2, 4, 2, 53, seed=14))
    assert not fused.fused_backward_applies(q, k, v)
    check_forward_backward(q, k, v, LocalMask(window, docs(2, 53, seed=15)), 8)
    check_forward_backward(q, k, v, LocalMask(5), 8)


def test_fused_document_backward_saves_no_more_than_full_causal_attention():
    q, k, v = qkv(2, 4, 2, 512, D=16, seed=16)
    full = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    for doc_ids in (torch.zeros(2, 512, dtype=torch.long), docs(2, 512, seed=17)):
        fused = saved_bytes(lambda d=doc_ids: local_attention(q, k, v, LocalMask(None, d), block=32))
        assert fused <= full + doc_ids.nbytes  # + the document ids, to rebuild the tile masks


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 70),
    extra=st.integers(0, 9),
    window=st.integers(1, 24),
    block=st.integers(1, 16),
    align=st.sampled_from([1, 8, 64]),
    KV=st.sampled_from([1, 2, 4]),
    with_docs=st.booleans(),
)
def test_aligned_tiles_match_dense_mask(B, T, extra, window, block, align, KV, with_docs):
    # tile widths rounded up to `align` (extra keys masked), both paths (the CPU flash kernel per key
    # tile, and the stacked tiles): odd lengths, windows not dividing T, GQA, cached keys (S > T),
    # documents, against the dense mask
    S = T + (0 if with_docs else extra)
    q, k, v = qkv(B, 4, KV, T, S=S, seed=T * 31 + window)
    doc_ids = docs(B, T, seed=window) if with_docs else None
    stacked = la.WindowTiles(B, T, S, window, block, align=align)
    assert stacked.width % align == 0 and stacked.width >= block + window - 1
    mask = LocalMask(window, doc_ids)
    want = dense_reference(q, k, v, mask)
    w = torch.randn_like(want)
    g_want = torch.autograd.grad((want * w).sum(), (q, k, v))
    for got in (
        fused.FusedTiles.apply(
            q, k, v, mask, la.window_key_tiles(T, S, window, block, align), la.window_tiles_by_key(T, S, window, block)
        ),
        la.tiled_sdpa(q, k, v, stacked, doc_ids),
    ):
        torch.testing.assert_close(got, want, **TOL)
        for a, b in zip(torch.autograd.grad((got * w).sum(), (q, k, v)), g_want):
            torch.testing.assert_close(a, b, **TOL)


def test_fused_tiles_take_the_layout_the_model_feeds():
    # q, k, v as the projections give them: (B, T, H, D) memory seen as (B, H, T, D), and a gradient
    # that is a broadcast view (from a sum)
    B, H, KV, T, D = 2, 4, 2, 70, 8
    g = torch.Generator().manual_seed(23)
    q = torch.randn(B, T, H, D, generator=g).transpose(1, 2).requires_grad_()
    k, v = (torch.randn(B, T, KV, D, generator=g).transpose(1, 2).requires_grad_() for _ in range(2))
    mask = LocalMask(9)
    got = local_attention(q, k, v, mask, block=16)
    want = dense_reference(q, k, v, mask)
    torch.testing.assert_close(got, want, **TOL)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("T,window", [(300, 64), (257, 100)])
def test_bfloat16_tiles_match_the_float32_dense_mask(T, window):
    q, k, v = (x.detach() for x in qkv(2, 4, 2, T, D=16, seed=21))
    mask = LocalMask(window)
    want = dense_reference(q, k, v, mask)
    qb, kb, vb = (x.bfloat16().requires_grad_() for x in (q, k, v))
    got = local_attention(qb, kb, vb, mask)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    got.float().sum().backward()
    q32, k32, v32 = (x.requires_grad_() for x in (q, k, v))
    dense_reference(q32, k32, v32, mask).sum().backward()
    for a, b in ((qb, q32), (kb, k32), (vb, v32)):
        torch.testing.assert_close(a.grad.float(), b.grad, atol=5e-2, rtol=5e-2)


def test_document_tiles_take_aligned_key_ranges():
    doc_ids = docs(2, 700, seed=22)
    for t in la.document_tiles(doc_ids, 128):
        assert t.hi == t.e and (t.lo == 0 or (t.e - t.lo) % la.KEY_ALIGN == 0)
        assert t.lo <= int(la.document_starts(doc_ids)[:, t.s].min())  # every row's document start is in reach


@pytest.mark.parametrize("window", [None, 5])
def test_documents_with_cached_keys_are_refused(window):
    # document ids cover the queries only; with cached keys (S > T) they cannot say which keys share a document
    q, k, v = qkv(1, 4, 2, 40, S=48)
    with pytest.raises(ValueError, match="KV cache"):
        local_attention(q, k, v, LocalMask(window, docs(1, 40)), block=8)
