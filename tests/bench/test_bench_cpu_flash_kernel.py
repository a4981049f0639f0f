"""The CPU flash-kernel benchmark: the backward calls it times alone are FusedTiles' own, and it runs end to end."""

import json

import pytest
import torch

from archpool.model.kernels.local import LocalMask, window_key_tiles

BENCH_SCRIPT = "bench_cpu_flash_kernel"


def test_backward_calls_alone_are_the_ones_fused_tiles_makes(bench, monkeypatch):
    # the same kernel calls, tile for tile, with the same arguments as the model's op's backward makes
    from archpool.model.kernels.dispatch import sliding_window_attention

    T, W, heads = 300, 64, 2
    q, k, v = (x.requires_grad_() for x in bench.model_layout(T, heads, 8))
    grad = torch.randn(1, T, heads, 8).transpose(1, 2)
    calls = {"alone": [], "fused": []}
    real = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

    def recorder(name):
        def record(*args, attn_mask=None):
            calls[name].append([a.clone() for a in args[:6]] + [attn_mask.clone()])
            return real(*args, attn_mask=attn_mask)

        return record

    y = sliding_window_attention(q, k, v, W, None, 32)
    op = "_scaled_dot_product_flash_attention_for_cpu_backward"
    monkeypatch.setattr(torch.ops.aten, op, recorder("alone"))
    bench.backward_calls_only(y, grad.contiguous())
    monkeypatch.setattr(torch.ops.aten, op, recorder("fused"))
    y.backward(grad)
    assert len(calls["alone"]) == len(calls["fused"]) == -(-T // 32)
    for mine, theirs in zip(calls["alone"], calls["fused"]):
        assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(mine, theirs))


def test_tiles_compute_half_again_the_pairs_a_window_allows(bench):
    # 128 queries over 384 keys for a window of 256: the rectangles hold 1.5x the allowed pairs
    T, W, heads = 4096, 256, 2
    allowed = int(LocalMask(W).dense(T, T, torch.device("cpu")).sum())
    assert bench.tile_pairs(window_key_tiles(T, T, W, 128), heads) / (heads * allowed) == pytest.approx(1.5, rel=0.02)


def test_runs_end_to_end_and_writes_its_json(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    res = bench.main(["--T", "1024", "--lengths", "64", "128", "--calls", "1", "--json", str(out)])
    assert json.loads(out.read_text())["walk"]["tiles"] == res["walk"]["tiles"] == 1024 // 128 - 2
    assert [r["L"] for r in res["causal_skip"]] == [64, 128]
    assert res["backward"]["backward_s"] > 0 and res["walk"]["cached_ns_per_pair"] > 0 and res["split"]["split_s"] > 0
    assert "| 128 |" in capsys.readouterr().out


@pytest.mark.parametrize("T,W,block", [(600, 64, 32), (257, 100, 48)])
def test_split_tiles_compute_the_shipped_op(bench, T, W, block):
    # the split alternative the benchmark times is exact: output and gradients as the shipped op's
    from archpool.model.kernels.dispatch import sliding_window_attention

    q, k, v = (x.requires_grad_() for x in bench.model_layout(T, 2, 8))
    grad = torch.randn(1, 2, T, 8)
    got = []
    for y in (
        sliding_window_attention(q, k, v, W, None, block),
        bench.SplitTiles.apply(q, k, v, W, bench.split_tiles(T, W, block)),
    ):
        y.backward(grad)
        got.append([y.detach()] + [x.grad for x in (q, k, v)])
        q.grad = k.grad = v.grad = None
    for a, b in zip(*got):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_split_tiles_refuse_blocks_as_wide_as_the_window(bench):
    with pytest.raises(ValueError, match="block"):
        bench.split_tiles(100, 32, 32)
