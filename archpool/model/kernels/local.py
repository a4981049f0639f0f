"""What a layer may attend to (``LocalMask``) and blockwise local attention: sliding windows and
document masks at O(T·W) cost on any device.

SDPA given a dense (T, S) boolean mask computes every query against every key, so a sliding-window
layer costs more than a full causal one (whose fused kernel skips the upper triangle). Here queries
are cut into tiles of ``block`` rows and each tile attends only to the keys its rows can reach
(``KeyTile``: queries [s, e) over keys [lo, hi)):

- sliding window ``W``: tile [s, s + block) needs keys [s - W + 1, s + block): ``block + W - 1``
  of them, rounded up to a multiple of ``KEY_ALIGN`` (the extra keys, in front, masked; the CPU
  kernel runs aligned widths faster per pair) (``window_key_tiles``).
- documents only (full-attention layer, intra-document mask): tile [s, e) sees keys from the start
  of the earliest document among its rows (``document_tiles``).

Queries are always the last ``T`` positions of the ``S`` keys (``S > T`` with a KV cache).
The result is exact: each query sees the same keys with the same softmax as with the dense mask.
``tiled_sdpa`` (windows: equal-width tiles stacked into the batch dimension, one SDPA call per mask,
``WindowTiles``) and ``tiled_document_sdpa`` run through SDPA with autograd through the tiling (any
device); ``archpool.model.kernels.fused`` runs the tiles one by one through the CPU flash kernel
with a hand-written backward, and ``archpool.model.kernels.dispatch.local_attention`` picks between
them. That backward tiles the other way round (``window_tiles_by_key``, ``document_tiles_by_key``):
each tile owns a block of keys and holds every query that may attend to them, so each key's
gradient is written once and only the queries' gradients accumulate. ``local_attention_probs`` is
the same tiling written out (the eager path), returning probabilities for analysis without ever
holding a T×S score matrix in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class KeyTile:
    """One tile: the queries [s, e) (indices among the T queries) over the keys [lo, hi) (indices among
    the S keys; query i is key ``S - T + i``)."""

    s: int
    e: int
    lo: int
    hi: int


@dataclass(frozen=True)
class LocalMask:
    """What a layer may attend to, without the T×S mask: causal, within ``window`` tokens (query
    included, as transformers' ``sliding_window``) and, with ``doc_ids`` (B, T), the same document."""

    window: int | None = None
    doc_ids: torch.Tensor | None = None

    def allows(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """(Tq, Tk) boolean, True where the query at ``q_pos[i]`` may attend to the key at ``k_pos[j]``
        (absolute positions): causal and within ``window``; documents are not looked at."""
        if self.window is None:
            return q_pos[:, None] >= k_pos[None, :]
        diff = q_pos[:, None] - k_pos[None, :]
        return (diff >= 0) & (diff < self.window)

    def tile(self, tile: KeyTile, offset: int, device: torch.device) -> torch.Tensor:
        """What queries [tile.s, tile.e) (key positions ``offset + s`` ...) may attend to among keys
        [tile.lo, tile.hi): (e - s, hi - lo) boolean, or (B, 1, e - s, hi - lo) with documents."""
        allowed = self.allows(
            torch.arange(offset + tile.s, offset + tile.e, device=device), torch.arange(tile.lo, tile.hi, device=device)
        )
        if self.doc_ids is not None:
            d = self.doc_ids
            return (allowed & (d[:, tile.s : tile.e, None] == d[:, None, tile.lo : tile.hi]))[:, None]
        return allowed

    def dense(self, T: int, S: int, device: torch.device) -> torch.Tensor:
        """The equivalent boolean mask, (T, S) or (B, 1, T, S) with documents; queries are the last T keys."""
        allowed = self.allows(torch.arange(S - T, S, device=device), torch.arange(S, device=device))
        if self.doc_ids is not None:
            d = self.doc_ids
            allowed = allowed[None] & (d[:, S - T :, None] == d[:, None, :])
            return allowed[:, None]
        return allowed


# The CPU flash kernel runs key widths that are a multiple of 64 about 1.2x faster per pair than one
# key short of it (W = 256, tiles of 128 rows: 384 keys against 383), so tiles round their width up.
KEY_ALIGN = 64


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``n``: a tile's key count, aligned."""
    return -(-n // multiple) * multiple


def default_block(window: int | None) -> int:
    """Query tile rows: half the window, between 32 and 256 (on 2 CPU threads at W = 256, T = 8192,
    tiles of 128 rows were the best compromise: forward 64 ≈ 128 < 256, forward+backward 128 ≈ 256 < 64;
    with aligned widths and strided tiles, 1 thread, T = 16384: 64-256 rows within noise of each other)."""
    if window is None:  # documents only: 128 measured 1.0-1.5x faster than 256 at T = 1024-4096
        return 128
    return max(32, min(256, window // 2))


def pays_off(T: int, mask: LocalMask, block: int | None = None) -> bool:
    """Whether tiling beats one dense-masked SDPA call: at least three tiles of queries and, for a
    window, T > 2W (measured on CPU: at T = 2W dense and tiled are even, at 4W tiled is 1.4-1.8x faster)."""
    if mask.window is not None and 2 * mask.window >= T:
        return False
    return 3 * (block or default_block(mask.window)) <= T


def window_key_tiles(T: int, S: int, window: int, block: int, align: int = KEY_ALIGN) -> list[KeyTile]:
    """The key tiles of a sliding window: tile [s, e) sees the ``e - s + window - 1`` keys ending at
    its last query, rounded up to a multiple of ``align`` (the extra keys, in front, masked) and cut
    at key 0."""
    offset = S - T
    tiles = []
    for s in range(0, T, block):
        e = min(T, s + block)
        width = round_up(e - s + window - 1, align)
        tiles.append(KeyTile(s, e, max(0, offset + e - width), offset + e))
    return tiles


def window_tiles_by_key(T: int, S: int, window: int, block: int) -> list[KeyTile]:
    """The backward's tiles of a sliding window: each owns ``block`` keys [lo, hi) (every key in exactly
    one tile) and holds the ``hi - lo + window - 1`` queries that may attend to them, cut at the ends;
    a tile of cached keys no query reaches has no queries (s == e)."""
    offset = S - T
    tiles = []
    for lo in range(0, S, block):
        hi = min(S, lo + block)
        s = min(T, max(0, lo - offset))
        tiles.append(KeyTile(s, min(T, max(0, hi - offset + window - 1)), lo, hi))
    return tiles


@dataclass(frozen=True)
class WindowTiles:
    """Equal-width sliding-window tiles stacked into the batch dimension (``tiled_sdpa``): ``n`` tiles
    of ``block`` query rows, tile ``i`` seeing the ``width`` keys that end at its last row: the
    ``block + window - 1`` it needs, rounded up to a multiple of ``align`` (the extra keys, at the
    front, are masked, as are the padded keys before key 0)."""

    B: int
    T: int
    S: int
    window: int
    block: int
    align: int = KEY_ALIGN

    @property
    def n(self) -> int:
        return -(-self.T // self.block)

    @property
    def tail(self) -> int:  # padded query rows (discarded)
        return self.n * self.block - self.T

    @property
    def width(self) -> int:  # keys per tile: the ``block + window - 1`` it needs, rounded up to ``align``
        return round_up(self.block + self.window - 1, self.align)

    @property
    def reach(self) -> int:  # keys of a tile before its first query's own key
        return self.width - self.block

    @property
    def offset(self) -> int:  # key index of query 0
        return self.S - self.T

    @property
    def front(self) -> int:  # padded keys before key 0 (masked)
        return max(0, self.reach - self.offset)

    @property
    def first(self) -> int:  # index, in the padded keys, of tile 0's first key
        return self.offset - self.reach + self.front

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> (n * B, H, block, D), tile-major."""
        B, H, _, D = x.shape
        xp = F.pad(x, (0, 0, 0, self.tail)) if self.tail else x
        return xp.reshape(B, H, self.n, self.block, D).permute(2, 0, 1, 3, 4).reshape(-1, H, self.block, D)

    def keys(self, x: torch.Tensor) -> torch.Tensor:
        """(B, KV, S, D) -> (n * B, KV, width, D), tile-major: the overlapping key windows."""
        B, KV, _, D = x.shape
        xp = F.pad(x, (0, 0, self.front, self.tail))[:, :, self.first :]
        return xp.unfold(2, self.width, self.block).permute(2, 0, 1, 4, 3).reshape(-1, KV, self.width, D)

    def untile(self, y: torch.Tensor) -> torch.Tensor:
        """(n * B, H, block, D) -> (B, H, T, D)."""
        _, H, _, D = y.shape
        return y.view(self.n, self.B, H, self.block, D).permute(1, 2, 0, 3, 4).reshape(self.B, H, -1, D)[:, :, : self.T]

    def masks(self, doc_ids: torch.Tensor | None, device: torch.device) -> list[tuple[slice, torch.Tensor]]:
        """(rows of the tiled batch, boolean mask) per SDPA call. Without documents, the tiles past
        the first few (whose keys start before key 0) share one (block, width) band mask, broadcast."""
        n, B, block, width = self.n, self.B, self.block, self.width
        rows = torch.arange(block, device=device)[:, None]
        cols = torch.arange(width, device=device)[None, :]
        lag = rows + self.reach - cols  # query position minus key position
        band = (lag >= 0) & (lag < self.window)  # (block, width): causal band of one tile
        key_index = torch.arange(n, device=device)[:, None] * block + (self.offset - self.reach) + cols  # (n, width)
        allowed = band & (key_index >= 0)[:, None, :]  # (n, block, width)
        if doc_ids is not None:
            if self.offset:
                raise ValueError("doc_ids: intra-document masking is not supported with a KV cache")
            q_doc = F.pad(doc_ids, (0, self.tail), value=-2).view(B, n, block)
            k_doc = F.pad(F.pad(doc_ids, (self.front, 0), value=-1), (0, self.tail), value=-2)[:, self.first :]
            allowed = allowed & (q_doc[..., :, None] == k_doc.unfold(1, width, block)[..., None, :])  # (B, n, block, width)
            return [(slice(0, n * B), allowed.transpose(0, 1).reshape(n * B, 1, block, width))]
        edge = min(n, -(-self.front // block)) * B  # rows of the tiles that reach before key 0
        parts = [(slice(0, edge), allowed[: edge // B].repeat_interleave(B, dim=0)[:, None])] if edge else []
        if edge < n * B:
            parts.append((slice(edge, n * B), band))
        return parts


def tiled_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: WindowTiles, doc_ids: torch.Tensor | None
) -> torch.Tensor:
    """The tiles through ``F.scaled_dot_product_attention``, autograd through the tiling (any device)."""
    gqa = q.shape[1] != k.shape[1]
    q_t, k_t, v_t = tiles.queries(q), tiles.keys(k), tiles.keys(v)
    parts = [
        F.scaled_dot_product_attention(q_t[rows], k_t[rows], v_t[rows], attn_mask=mask, enable_gqa=gqa)
        for rows, mask in tiles.masks(doc_ids, q.device)
    ]
    return tiles.untile(torch.cat(parts) if len(parts) > 1 else parts[0])


def document_starts(doc_ids: torch.Tensor) -> torch.Tensor:
    """Per token, the index of the first token of its document (B, T), for contiguous documents;
    zeros when ids are not non-decreasing along a row (then a document may recur later)."""
    B, T = doc_ids.shape
    if T > 1 and not bool((doc_ids[:, 1:] >= doc_ids[:, :-1]).all()):
        return torch.zeros_like(doc_ids)
    idx = torch.arange(T, device=doc_ids.device).expand(B, T)
    new = torch.ones_like(doc_ids, dtype=torch.bool)
    new[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    return torch.where(new, idx, torch.zeros_like(idx)).cummax(dim=1).values


def document_tiles(doc_ids: torch.Tensor, block: int) -> list[KeyTile]:
    """The key tiles of an intra-document mask: each tile sees keys from its earliest document's start,
    moved earlier (masked keys) so that the tile's key count is a multiple of ``KEY_ALIGN`` where it can."""
    T = doc_ids.shape[1]
    starts = document_starts(doc_ids)[:, ::block].amin(dim=0).tolist()
    tiles = []
    for i, lo in enumerate(starts):
        s, e = i * block, min(T, (i + 1) * block)
        tiles.append(KeyTile(s, e, max(0, e - round_up(e - lo, KEY_ALIGN)), e))
    return tiles


def document_ends(doc_ids: torch.Tensor) -> torch.Tensor:
    """Per token, the index just past the last token of its document (B, T), for contiguous documents;
    T when ids are not non-decreasing along a row (``document_starts`` read from the other end)."""
    T = doc_ids.shape[1]
    return T - document_starts((-doc_ids).flip(1)).flip(1)


def document_tiles_by_key(doc_ids: torch.Tensor, block: int) -> list[KeyTile]:
    """The backward's tiles of an intra-document mask: each owns ``block`` keys [lo, hi) and holds the
    queries from ``lo`` to the end of the latest document among its keys (over the batch)."""
    T = doc_ids.shape[1]
    ends = document_ends(doc_ids).amax(dim=0).tolist()
    return [KeyTile(lo, ends[min(T, lo + block) - 1], lo, min(T, lo + block)) for lo in range(0, T, block)]


def tiled_document_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor, tiles: list[KeyTile]
) -> torch.Tensor:
    """Causal attention within documents, the ``document_tiles`` through ``F.scaled_dot_product_attention``
    one by one, autograd through the tiles (any device)."""
    gqa = k.shape[1] != q.shape[1]
    mask = LocalMask(None, doc_ids)
    return torch.cat(
        [
            F.scaled_dot_product_attention(
                q[:, :, t.s : t.e],
                k[:, :, t.lo : t.hi],
                v[:, :, t.lo : t.hi],
                attn_mask=mask.tile(t, 0, q.device),
                enable_gqa=gqa,
            )
            for t in tiles
        ],
        dim=2,
    )


def local_attention_probs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: LocalMask | None,
    block: int = 128,
    return_probs: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The eager math, one tile of query rows at a time over only the keys it can reach.

    Returns the output (B, H, T, D) and, if ``return_probs``, the probabilities (B, H, T, S) (zeros
    outside each row's reach). Scores are in the input dtype and the softmax in float32, as in the dense path.
    Peak memory beyond the output is one tile's scores, not T×S."""
    mask = mask or LocalMask()
    B, H, T, D = q.shape
    KV, S = k.shape[1], k.shape[2]
    offset = S - T
    groups = H // KV
    scale = math.sqrt(D)
    probs = q.new_zeros(B, H, T, S) if return_probs else None
    starts = [t.lo for t in document_tiles(mask.doc_ids, block)] if mask.doc_ids is not None else None
    out = []
    for i, s in enumerate(range(0, T, block)):
        e = min(T, s + block)
        hi = e + offset
        lo = 0 if mask.window is None else max(0, s + offset - mask.window + 1)
        if starts is not None:
            lo = max(lo, starts[i])
        kt, vt = k[:, :, lo:hi], v[:, :, lo:hi]
        if groups > 1:
            kt, vt = kt.repeat_interleave(groups, dim=1), vt.repeat_interleave(groups, dim=1)
        allowed = mask.tile(KeyTile(s, e, lo, hi), offset, q.device)
        scores = (q[:, :, s:e] @ kt.transpose(-1, -2)) / scale
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")).float(), dim=-1).to(q.dtype)
        if probs is not None:
            probs[:, :, s:e, lo:hi] = p
        out.append(p @ vt)
    return torch.cat(out, dim=2), probs
