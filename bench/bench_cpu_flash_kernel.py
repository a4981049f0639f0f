"""What the CPU flash kernel costs under the sliding-window tiles: the measurements that bound how
close ``local_attention`` comes to its ideal speed-up on CPU.

    nice -n 5 .venv/bin/python -m bench.bench_cpu_flash_kernel --json bench/results/cpu_flash_kernel.json

1 thread, float32, q/k/v as the model's projections give them ((B, T, H, D) memory seen as
(B, H, T, D)), 8 heads of 32, window 256, tiles of 128 queries. Three measurements:

- **causal skip**: one flash-kernel call over L queries and L keys with ``is_causal`` against the
  same call without a mask, alternated, best of at least 20 each. A kernel that skipped the masked triangle would take about
  half the time; a ratio near 1 means a tile pays for every pair of its rectangle, masked or not, so
  cutting a tile into a causal diagonal square and a masked band saves no work.
- **walk**: the forward flash-kernel calls of the window tiles of a T-token sequence
  (``window_key_tiles``), in order (``walk``: each tile's new rows of q, k and v come from memory)
  against one middle tile called as many times (``cached``: its data stays in cache), with and
  without the tile's mask; ns per computed pair (heads × rows × keys of every tile). Beside them:
  full causal SDPA's forward per pair on the same tensors, and the time to copy every tile's new
  rows of q, k and v and nothing else (what reading them from memory costs here, without arithmetic).
- **split tiles**: the shipped op (one masked call per tile) against each tile cut in two, its
  diagonal square through the kernel's causal mode and the masked band of keys before it, merged by
  log-sum-exp (``SplitTiles``): forward + backward, interleaved, median of the rounds. It computes
  fewer pairs only if the causal mode skips the masked triangle.
- **backward parts**: ``FusedTiles``' backward over the same sequence against its flash-kernel calls
  alone (the same calls on the tensors and tiles it saved, their results dropped); the difference is
  what the writes around the calls cost (each tile's key gradients copied into place, its query
  gradients added into dQ, zero-filled first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from archpool.model.kernels.dispatch import sliding_window_attention
from archpool.model.kernels.fused import TileMasks, tile_backward
from archpool.model.kernels.local import KEY_ALIGN, KeyTile, LocalMask, round_up, window_key_tiles
from bench.bench_cpu_ceilings import best_seconds

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def model_layout(T: int, heads: int, head_dim: int, seed: int = 0) -> list[torch.Tensor]:
    """q, k, v of B = 1 in the model's layout: (1, T, H, D) memory seen as (1, H, T, D)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, T, heads, head_dim, generator=g).transpose(1, 2) for _ in range(3)]


def causal_skip(lengths: list[int], heads: int, head_dim: int, calls: int) -> list[dict]:
    """Seconds of one flash-kernel call of L queries over L keys, causal and unmasked: the two
    alternated, best of ``calls`` each."""
    rows = []
    for L in lengths:
        qkv = model_layout(L, heads, head_dim)
        times: dict[bool, list[float]] = {False: [], True: []}
        for causal in times:
            FLASH(*qkv, 0.0, causal)
        for _ in range(calls):
            for causal in times:
                times[causal].append(best_seconds(partial(FLASH, *qkv, 0.0, causal), 1, warmup=0))
        plain, causal = min(times[False]), min(times[True])
        rows.append({"L": L, "plain_s": plain, "causal_s": causal, "causal_over_plain": causal / plain})
    return rows


def tile_pairs(tiles: list[KeyTile], heads: int) -> int:
    """Query-key pairs the kernel computes over ``tiles``: every pair of each tile's rectangle."""
    return heads * sum((t.e - t.s) * (t.hi - t.lo) for t in tiles)


def forward_tiles(q, k, v, tiles: list[KeyTile], masks: TileMasks | None) -> None:
    """The forward flash-kernel calls of ``tiles`` (outputs dropped), masked by ``masks`` or not at all."""
    for t in tiles:
        m = masks(t) if masks is not None else None
        FLASH(q[:, :, t.s : t.e], k[:, :, t.lo : t.hi], v[:, :, t.lo : t.hi], 0.0, False, attn_mask=m)


def copy_new_rows(q, k, v, tiles: list[KeyTile], sink: torch.Tensor) -> None:
    """Copy what each tile reads that no earlier tile read: its query rows and its last keys' rows."""
    Q, K, V = (x.transpose(1, 2) for x in (q, k, v))  # (1, T, H, D) memory, rows contiguous
    for t in tiles:
        n = t.e - t.s
        for x, a in ((Q, t.s), (K, t.hi - n), (V, t.hi - n)):
            sink[:n].copy_(x[0, a : a + n])


def walk(T: int, window: int, block: int, heads: int, head_dim: int, calls: int) -> dict:
    """ns per computed pair of the window tiles' forward calls: walking the sequence against one tile
    in cache (masked and unmasked), full causal's forward, and the copy of the tiles' new rows."""
    q, k, v = model_layout(T, heads, head_dim)
    tiles = window_key_tiles(T, T, window, block)
    width = max(t.hi - t.lo for t in tiles)
    steady = [t for t in tiles if t.hi - t.lo == width and t.e - t.s == block]  # not the first tiles, cut at key 0
    middle = [steady[len(steady) // 2]] * len(steady)
    masks = TileMasks(LocalMask(window), 0, q.dtype)
    pairs = tile_pairs(steady, heads)
    sink = torch.empty(block, heads, head_dim)
    seconds = {
        "walk": best_seconds(lambda: forward_tiles(q, k, v, steady, masks), calls, warmup=1),
        "cached": best_seconds(lambda: forward_tiles(q, k, v, middle, masks), calls, warmup=1),
        "walk_unmasked": best_seconds(lambda: forward_tiles(q, k, v, steady, None), calls, warmup=1),
        "cached_unmasked": best_seconds(lambda: forward_tiles(q, k, v, middle, None), calls, warmup=1),
    }
    out = {f"{name}_ns_per_pair": 1e9 * s / pairs for name, s in seconds.items()}
    out["copy_new_rows_s"] = best_seconds(lambda: copy_new_rows(q, k, v, steady, sink), calls, warmup=1)
    copied = 3 * q.element_size() * heads * head_dim * block * len(steady)
    out["copy_new_rows_gb_per_s"] = copied / out["copy_new_rows_s"] / 1e9
    full = best_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 1, warmup=1)
    out["full_causal_ns_per_pair"] = 1e9 * full / (heads * T * (T + 1) / 2)
    out.update(T=T, tiles=len(steady), pairs=pairs, walk_s=seconds["walk"], cached_s=seconds["cached"])
    return out


def backward_calls_only(y: torch.Tensor, grad: torch.Tensor) -> None:
    """The flash-kernel backward calls of ``FusedTiles``' backward for output ``y``, on the tensors and
    tiles it saved, with their gradients dropped (nothing written into dQ, dK, dV)."""
    node = y.grad_fn
    saved = node.saved_tensors
    for t in node.key_tiles:
        if t.s < t.e:
            tile_backward(grad, saved, t, node.masks(t))


def backward_parts(T: int, window: int, block: int, heads: int, head_dim: int, calls: int) -> dict:
    """``FusedTiles``' backward against its flash-kernel calls alone (interleaved, best of ``calls``):
    the difference is what the gradient writes around the calls cost."""
    q, k, v = (x.requires_grad_() for x in model_layout(T, heads, head_dim))
    grad = torch.randn(1, T, heads, head_dim).transpose(1, 2)  # the model layout, as y
    whole, alone = [], []
    for _ in range(calls + 1):
        y = sliding_window_attention(q, k, v, window, None, block)
        t0 = time.perf_counter()
        backward_calls_only(y, grad.contiguous())
        alone.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        y.backward(grad)
        whole.append(time.perf_counter() - t0)
        q.grad = k.grad = v.grad = None
    return {"T": T, "backward_s": min(whole[1:]), "kernel_calls_s": min(alone[1:])}


def split_tiles(T: int, window: int, block: int) -> list[tuple[KeyTile, KeyTile | None]]:
    """Each tile of ``block`` queries cut in two: its diagonal square (keys [s, e), causal) and the band
    of the ``window - 1`` keys before it (rounded up to ``KEY_ALIGN``, cut at key 0; None for tile 0)."""
    if not block < window:
        raise ValueError(f"split_tiles: block ({block}) must be below the window ({window}), or band rows see no key")
    band = round_up(window - 1, KEY_ALIGN)
    return [
        (KeyTile(s, min(T, s + block), s, min(T, s + block)), KeyTile(s, min(T, s + block), max(0, s - band), s) if s else None)
        for s in range(0, T, block)
    ]


class SplitTiles(torch.autograd.Function):
    """Sliding-window attention of q (B, H, T, D) over k, v (B, H, T, D), each tile as ``split_tiles``
    cuts it: two flash-kernel calls merged by log-sum-exp; the backward gives both calls the merged
    output and log-sum-exp, so their gradients add up to the whole tile's."""

    @staticmethod
    def forward(ctx, q, k, v, window: int, parts: list[tuple[KeyTile, KeyTile | None]]):
        masks = TileMasks(LocalMask(window), 0, q.dtype)
        y = torch.empty_like(q)
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        for diag, band in parts:
            s, e = diag.s, diag.e
            out, l_diag = FLASH(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], 0.0, True)
            if band is not None:
                o_band, l_band = FLASH(
                    q[:, :, s:e], k[:, :, band.lo : band.hi], v[:, :, band.lo : band.hi], 0.0, False, attn_mask=masks(band)
                )
                l_both = torch.logaddexp(l_diag, l_band)
                out = (l_diag - l_both).exp()[..., None] * out + (l_band - l_both).exp()[..., None] * o_band
                l_diag = l_both
            y[:, :, s:e] = out
            lse[:, :, s:e] = l_diag
        ctx.masks, ctx.parts = masks, parts
        ctx.save_for_backward(q, k, v, y, lse)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        q, k, v, y, lse = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        gq, gk, gv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for diag, band in ctx.parts:
            s, e = diag.s, diag.e
            for t, causal in ((diag, True), (band, False)):
                if t is None:
                    continue
                a, b, c = FLASH_BACKWARD(
                    grad_y[:, :, s:e],
                    q[:, :, s:e],
                    k[:, :, t.lo : t.hi],
                    v[:, :, t.lo : t.hi],
                    y[:, :, s:e],
                    lse[:, :, s:e],
                    0.0,
                    causal,
                    attn_mask=None if causal else ctx.masks(t),
                )
                gq[:, :, s:e] += a
                gk[:, :, t.lo : t.hi] += b
                gv[:, :, t.lo : t.hi] += c
        return gq, gk, gv, None, None


def split_against_shipped(T: int, window: int, block: int, heads: int, head_dim: int, rounds: int) -> dict:
    """Forward + backward seconds of the shipped op (``FusedTiles``) and of ``SplitTiles``, interleaved."""
    q, k, v = (x.requires_grad_() for x in model_layout(T, heads, head_dim))
    cases = {
        "shipped": partial(sliding_window_attention, q, k, v, window, None, block),
        "split": partial(SplitTiles.apply, q, k, v, window, split_tiles(T, window, block)),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds + 1):
        for name in list(cases)[r % 2 :] + list(cases)[: r % 2]:
            t0 = time.perf_counter()
            cases[name]().sum().backward()
            times[name].append(time.perf_counter() - t0)
            q.grad = k.grad = v.grad = None
    med = {name: statistics.median(ts[1:]) for name, ts in times.items()}
    return {"T": T, "shipped_s": med["shipped"], "split_s": med["split"], "split_speed": med["shipped"] / med["split"]}


def report(res: dict) -> str:
    w = res["walk"]
    lines = [
        f"CPU flash kernel, {res['heads']} heads × {res['head_dim']}, float32, {res['threads']} thread(s), "
        f"torch {res['torch']}, model layout",
        "",
        "| L | no mask s | is_causal s | causal / no mask |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['L']:,} | {r['plain_s'] * 1e3:.2f} ms | {r['causal_s'] * 1e3:.2f} ms | {r['causal_over_plain']:.2f} |"
        for r in res["causal_skip"]
    ]
    lines += [
        "",
        f"window tiles' forward, T = {w['T']:,}, W = {res['window']}, {res['block']}-query tiles ({w['tiles']} tiles):",
        "",
        "| ns per computed pair | masked | unmasked |",
        "|---|---:|---:|",
        f"| one tile, in cache | {w['cached_ns_per_pair']:.2f} | {w['cached_unmasked_ns_per_pair']:.2f} |",
        f"| walking the sequence | {w['walk_ns_per_pair']:.2f} | {w['walk_unmasked_ns_per_pair']:.2f} |",
        f"| full causal SDPA forward | {w['full_causal_ns_per_pair']:.2f} | |",
        "",
        f"walking / in cache: {w['walk_ns_per_pair'] / w['cached_ns_per_pair']:.2f}×; copying every tile's new rows of "
        f"q, k, v alone: {w['copy_new_rows_s'] * 1e3:.1f} ms ({w['copy_new_rows_gb_per_s']:.1f} GB/s), against "
        f"{(w['walk_s'] - w['cached_s']) * 1e3:.1f} ms that walking adds",
    ]
    sp, b = res["split"], res["backward"]
    lines += [
        "",
        f"tiles split into a causal diagonal square and a masked band, T = {sp['T']:,}, forward + backward: "
        f"{sp['split_s'] * 1e3:.0f} ms against the shipped op's {sp['shipped_s'] * 1e3:.0f} ms "
        f"({sp['split_speed']:.2f}× its speed)",
    ]
    lines += [
        "",
        f"FusedTiles backward, T = {b['T']:,}: {b['backward_s'] * 1e3:.0f} ms; its flash-kernel calls alone "
        f"{b['kernel_calls_s'] * 1e3:.0f} ms; the gradient writes around them "
        f"{(b['backward_s'] - b['kernel_calls_s']) * 1e3:.0f} ms",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=16384, help="sequence length of the walk and the backward")
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024], help="causal-skip call sizes")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--calls", type=int, default=3, help="best of this many timed calls")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    res = {"torch": torch.__version__, "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d")}
    res.update(heads=args.heads, head_dim=args.head_dim, window=args.window, block=args.block)
    res["causal_skip"] = causal_skip(args.lengths, args.heads, args.head_dim, max(args.calls, 20))
    res["walk"] = walk(args.T, args.window, args.block, args.heads, args.head_dim, args.calls)
    res["split"] = split_against_shipped(args.T, args.window, args.block, args.heads, args.head_dim, args.calls)
    res["backward"] = backward_parts(args.T, args.window, args.block, args.heads, args.head_dim, args.calls)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    print(report(res), file=sys.stdout)
    return res


NAME = "cpu_flash_kernel"
DESCRIPTION = "what the CPU flash kernel costs under the sliding-window tiles (bounds local_attention's speed-up)"
FULL = ["--calls", "5"]
QUICK = ["--T", "1024", "--lengths", "64", "128", "--calls", "1"]


if __name__ == "__main__":
    main()
