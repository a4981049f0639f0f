"""Attention statistics, defined on attention probabilities (docs/evaluation.md §4–5).

- importance score α_k (Gu et al.): the mean attention the queries able to see key k put on it;
  the sink rate is the % of heads with α_1 > ε (ε = 0.3), averaged over samples and layers;
- first-token mass: mean of A_{i,1} over queries (no threshold);
- entropy per query, H_i = −Σ_j A_ij log(A_ij + 1e-9), raw and normalised by log|support_i|
  (log i for full-attention layers; log min(i, window) for sliding ones, so a uniform head scores 1);
  the sink-excluded variant renormalises the row without the first-token column;
- attention mass by distance i − j in log-spaced buckets {0}, [1,2), [2,4), …; the first-token
  column is excluded from the buckets (it is the first-token mass);
- retrieval score (Wu et al.): copy-paste events by top-1 attention / needle length.

``RowStats`` accumulates all of them from ``rows.RowChunk``s, so nothing needs a full map.
"""

from __future__ import annotations

import math

import torch

from archpool.attention.settings import SINK_EPS

ENTROPY_EPS = 1e-9


# ------------------------------------------------------------------------------------- definitions
def importance_scores(A: torch.Tensor) -> torch.Tensor:
    """α_k for a full causal map A (..., T, T): column sums over the T−k+1 queries that see key k."""
    T = A.shape[-1]
    seen_by = torch.arange(T, 0, -1, dtype=A.dtype, device=A.device)
    return A.sum(-2) / seen_by


def sink_rate(alpha1: torch.Tensor, eps: float = SINK_EPS) -> float:
    """% of entries of α_1 (any shape: samples × layers × heads) above ``eps``."""
    return float((alpha1 > eps).float().mean() * 100.0)


def row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row (…, S)."""
    return -(probs * torch.log(probs + ENTROPY_EPS)).sum(-1)


def support_sizes(q_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """How many keys each query may attend to (causal, within ``window``), as float."""
    n = q_pos.to(torch.float64) + 1
    if window is not None:
        n = n.clamp(max=window)
    return n


def sinkless(probs: torch.Tensor, sink_col: int | None) -> torch.Tensor:
    """Rows renormalised without the first-token column (unchanged where it is not among the keys)."""
    if sink_col is None:
        return probs
    rest = probs.clone()
    rest[..., sink_col] = 0
    return rest / rest.sum(-1, keepdim=True).clamp_min(1e-30)


def n_distance_buckets(max_len: int) -> int:
    return max(1, max_len - 1).bit_length() + 1


def bucket_labels(n: int) -> list[str]:
    labels = ["0"]
    for b in range(n - 1):
        lo, hi = 1 << b, (1 << (b + 1)) - 1
        labels.append(str(lo) if lo == hi else f"{lo}-{hi}")
    return labels


def distance_bucket(q_pos: torch.Tensor, k_pos: torch.Tensor, n_buckets: int) -> torch.Tensor:
    """Bucket index (c, S) of distance i − j: 0 for j = i, b + 1 for [2^b, 2^(b+1)); clamped into range."""
    d = (q_pos[:, None] - k_pos[None, :]).clamp(min=0)
    b = torch.where(d > 0, torch.floor(torch.log2(d.clamp(min=1).double())).long() + 1, torch.zeros_like(d))
    return b.clamp(max=n_buckets - 1)


def copy_paste_scores(
    top1: torch.Tensor, prompt_ids: torch.Tensor, generated: torch.Tensor, span: tuple[int, int]
) -> torch.Tensor:
    """Retrieval score per head for one trial (Wu et al.).

    ``top1`` (steps, L, H): the key position each head attends to most at each decoding step;
    ``generated`` (steps,): the token produced at that step. A copy-paste event is top-1 inside the
    needle ``span`` [lo, hi) of the prompt *and* the attended prompt token equal to the produced
    one. Score = events / span length (not deduplicated, as the reference code).
    """
    lo, hi = span
    prompt_ids = prompt_ids.reshape(-1)
    inside = (top1 >= lo) & (top1 < hi)
    attended = prompt_ids[top1.clamp(0, prompt_ids.numel() - 1)]
    events = inside & (attended == generated.reshape(-1, 1, 1))
    return events.float().sum(0) / max(1, hi - lo)


def token_recall(answer: list[int], response: list[int]) -> float:
    """ROUGE-1-style recall of the answer tokens in the response (multiset overlap / |answer|)."""
    from collections import Counter

    a, r = Counter(answer), Counter(response)
    return sum(min(c, r[t]) for t, c in a.items()) / max(1, len(answer))


# ------------------------------------------------------------------------------------- accumulation
class RowStats:
    """Per-(layer, head) sums over analysed queries of: first-token mass, entropies, distance mass."""

    def __init__(self, n_layers: int, n_heads: int, max_len: int):
        self.L, self.H = n_layers, n_heads
        self.nb = n_distance_buckets(max_len)
        z = lambda *s: torch.zeros(*s, dtype=torch.float64)
        self.first = z(n_layers, n_heads)
        self.ent, self.ent_norm = z(n_layers, n_heads), z(n_layers, n_heads)
        self.ent_sl, self.ent_sl_norm = z(n_layers, n_heads), z(n_layers, n_heads)
        self.dist = z(n_layers, n_heads, self.nb)
        self.n = z(n_layers)  # queries (× batch) counted
        self.n_norm = z(n_layers)  # queries with support ≥ 2
        self.n_sl_norm = z(n_layers)  # queries with ≥ 2 keys besides the first token

    def add(self, layer: int, chunk, window: int | None) -> None:
        p = chunk.probs.double()  # (B, H, c, S)
        B = p.shape[0]
        hit = (chunk.k_pos == 0).nonzero()
        sink_col = int(hit[0, 0]) if len(hit) else None
        first = p[..., sink_col] if sink_col is not None else torch.zeros(p.shape[:-1], dtype=p.dtype)
        self.first[layer] += first.sum((0, 2))
        support = support_sizes(chunk.q_pos, window)  # (c,)
        h = row_entropy(p)
        self.ent[layer] += h.sum((0, 2))
        ok = support >= 2
        self.ent_norm[layer] += (h[..., ok] / torch.log(support[ok])).sum((0, 2))
        h_sl = row_entropy(sinkless(p, sink_col))
        self.ent_sl[layer] += h_sl.sum((0, 2))
        sl_support = support - (1.0 if sink_col is not None else 0.0)
        ok_sl = sl_support >= 2
        self.ent_sl_norm[layer] += (h_sl[..., ok_sl] / torch.log(sl_support[ok_sl])).sum((0, 2))
        buckets = distance_bucket(chunk.q_pos, chunk.k_pos, self.nb)  # (c, S)
        rest = p.clone()
        if sink_col is not None:
            rest[..., sink_col] = 0
        mass = torch.zeros(*p.shape[:-1], self.nb, dtype=p.dtype)
        mass.scatter_add_(-1, buckets.expand(*p.shape[:2], *buckets.shape), rest)
        self.dist[layer] += mass.sum((0, 2))
        self.n[layer] += B * p.shape[2]
        self.n_norm[layer] += B * int(ok.sum())
        self.n_sl_norm[layer] += B * int(ok_sl.sum())

    # per (layer, head) means
    def _mean(self, s: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        n = n.clamp(min=1).reshape(-1, *([1] * (s.dim() - 1)))
        return s / n

    def summary(self, layer_types: list[str]) -> dict:
        first = self._mean(self.first, self.n)
        ent, ent_n = self._mean(self.ent, self.n), self._mean(self.ent_norm, self.n_norm)
        sl, sl_n = self._mean(self.ent_sl, self.n), self._mean(self.ent_sl_norm, self.n_sl_norm)
        dist = self._mean(self.dist, self.n)  # (L, H, nb)
        out = {
            "first_token_mass": _f(first.mean()),
            "entropy": _f(ent.mean()),
            "entropy_norm": _f(ent_n.mean()),
            "entropy_sinkless": _f(sl.mean()),
            "entropy_sinkless_norm": _f(sl_n.mean()),
            "per_layer": {
                "first_token_mass": _l(first.mean(1)),
                "entropy": _l(ent.mean(1)),
                "entropy_norm": _l(ent_n.mean(1)),
                "entropy_sinkless": _l(sl.mean(1)),
                "entropy_sinkless_norm": _l(sl_n.mean(1)),
            },
            "per_head": {"first_token_mass": _l(first), "entropy": _l(ent), "entropy_norm": _l(ent_n)},
            "n_queries": int(self.n[0]),
        }
        by_type = {}
        for t in sorted(set(layer_types)):
            idx = [i for i, lt in enumerate(layer_types) if lt == t]
            by_type[t] = {"layers": idx, "first_token_mass": _f(first[idx].mean()), "mass": _l(dist[idx].mean((0, 1)))}
        out["distance"] = {"buckets": bucket_labels(self.nb), "by_layer_type": by_type, "per_layer": _l(dist.mean(1))}
        return out


def _f(x: torch.Tensor) -> float:
    v = float(x)
    return v if math.isfinite(v) else float("nan")


def _l(x: torch.Tensor) -> list:
    return (
        [[round(float(v), 6) for v in row] for row in x.tolist()]
        if x.dim() == 2
        else ([round(float(v), 6) for v in x.tolist()] if x.dim() == 1 else [_l(r) for r in x])
    )
