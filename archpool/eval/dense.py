"""Scoring dense tasks (any dense family: ``archpool.tasks.dense``): every answer of every document from
one forward pass.

Each document is fed whole (teacher forcing, as Zoology scores MQAR); at each answer position the
answer is *correct* when the gold token is the model's argmax over the whole vocabulary (what
greedy decoding would emit) and its log-probability is recorded. Answers are then binned by their
key–query distance: ``buckets`` are upper edges, so ``[32, 128]`` gives ``d<=32``,
``32<d<=128`` and ``d>128`` (:func:`bucket_labels` lists a score's buckets and tails without scoring).
Chains (``mqar_chain``) also get chain accuracy (both hops right). Accuracies carry Wilson 95%
intervals over answers (answers of one document are not independent; the interval is a floor on the
uncertainty, seed spread is the other part). Torch is imported only to score.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from archpool.errors import ConfigError
from archpool.tasks import TaskConfig, dense_documents, dense_family, get_task


def default_buckets(length: int) -> list[int]:
    """Powers of two from 16 below ``length``: 16, 32, 64, ... (upper bucket edges)."""
    edges, e = [], 16
    while e < length:
        edges.append(e)
        e *= 2
    return edges


def bucket_label(lo: int | None, hi: int | None) -> str:
    """``d<=32``, ``32<d<=128``, ``d>128`` (the suffix of a ``task_acc@L[...]`` column)."""
    if lo is None:
        return f"d<={hi}"
    if hi is None:
        return f"d>{lo}"
    return f"{lo}<d<={hi}"


def _edges(buckets: Sequence[int], length: int) -> list[int]:
    """The bucket edges a score at ``length`` uses: distinct, ascending, strictly inside (0, length)."""
    return sorted({int(b) for b in buckets if 0 < int(b) < length})


def _bounds(edges: list[int]) -> list[tuple[int | None, int | None]]:
    """``(lo, hi)`` of each bucket between consecutive edges (none without edges)."""
    return list(zip([None, *edges], [*edges, None])) if edges else []


def bucket_labels(buckets: Sequence[int] | None, length: int) -> list[str]:
    """Every distance filter a dense score at ``length`` has (:func:`score_rows`): its buckets, then
    the tails beyond each edge that are not buckets already; ``buckets`` ``None``: :func:`default_buckets`."""
    edges = _edges(buckets or default_buckets(length), length)
    labels = [bucket_label(lo, hi) for lo, hi in _bounds(edges)]
    return labels + [t for t in (bucket_label(e, None) for e in edges) if t not in labels]


def wilson(k: int, n: int) -> list[float] | None:
    """Wilson score 95% interval of k successes in n (statsmodels' ``proportion_confint``)."""
    if n == 0:
        return None
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return [float(lo), float(hi)]


def _summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    k = sum(r["correct"] for r in rows)
    n = len(rows)
    return {"n": n, "acc": k / n if n else None, "acc_ci": wilson(k, n), "lp": sum(r["lp"] for r in rows) / n if n else None}


def answer_rows(lm, docs) -> list[dict[str, Any]]:
    """One row per answer: document, distance, hop, chain, correct (argmax == gold), gold log-prob."""
    import torch

    rows: list[dict[str, Any]] = []
    for g in range(0, len(docs), lm.max_batch):
        group = docs[g : g + lm.max_batch]
        x = torch.tensor([d.ids for d in group], dtype=torch.long)
        state = lm.backend.new_state()
        for s in range(0, x.shape[1], lm.prefill_chunk):
            chunk = x[:, s : s + lm.prefill_chunk]
            logits = lm.backend.step(state, chunk).float()
            lp = torch.log_softmax(logits, -1)
            top = logits.argmax(-1)
            for i, d in enumerate(group):
                for a in d.answers:
                    if s <= a.pos < s + chunk.shape[1]:
                        j = a.pos - s
                        rows.append(
                            {
                                "doc": g + i,
                                "distance": a.distance,
                                "hop": a.hop,
                                "chain": a.chain,
                                "correct": int(top[i, j]) == a.gold,
                                "lp": float(lp[i, j, a.gold]),
                            }
                        )
    return rows


def score_rows(rows: Sequence[dict[str, Any]], length: int, buckets: Sequence[int]) -> dict[str, Any]:
    """Overall, per-bucket, per-hop and chain accuracy / log-prob of answer rows."""
    out = _summary(rows)
    edges = _edges(buckets, length)
    out["buckets"] = {}
    for lo, hi in _bounds(edges):
        sel = [r for r in rows if (lo is None or r["distance"] > lo) and (hi is None or r["distance"] <= hi)]
        out["buckets"][bucket_label(lo, hi)] = _summary(sel)
    out["tails"] = {bucket_label(e, None): _summary([r for r in rows if r["distance"] > e]) for e in edges}
    chains: dict[tuple[int, int], list[bool]] = {}
    for r in rows:
        if r["chain"] >= 0:
            chains.setdefault((r["doc"], r["chain"]), []).append(r["correct"])
    if chains:
        both = [all(v) for v in chains.values()]
        out["chains"] = {"n": len(both), "acc": sum(both) / len(both), "acc_ci": wilson(sum(both), len(both))}
        out["hops"] = {str(h): _summary([r for r in rows if r["hop"] == h]) for h in (1, 2)}
    return out


def run_dense_task(lm, tokenizer, task: str, length: int, n: int, seed: int, config: TaskConfig | None = None) -> dict[str, Any]:
    """Score ``n`` documents of dense task ``task`` at ``length`` (one result, mode ``dense``); ``config``:
    the task's typed config (default: its defaults), its ``buckets`` the distance bins of the scores."""
    t0 = time.perf_counter()
    family = dense_family(task)
    config = get_task(task).config_or_default(config)
    buckets = family.buckets(config) or default_buckets(length)
    try:
        docs = dense_documents(task, tokenizer, length, n, seed, config)
    except ConfigError as e:
        return {"task": task, "length": length, "mode": "dense", "skipped": str(e), "n": 0, "seed": seed}
    rows = answer_rows(lm, docs)
    res = score_rows(rows, length, buckets)
    return {
        "task": task,
        "length": length,
        "mode": "dense",
        "metric": "argmax_accuracy",
        "seed": seed,
        "n_docs": len(docs),
        "n": res["n"],
        "score": 100.0 * res["acc"] if res["acc"] is not None else None,
        "gold_logprob_mean": res["lp"],
        "params": config.generator_params(),
        "bucket_edges": sorted(set(buckets)),
        "result": res,
        "chance": 100.0 / family.choices(config),
        "wall_s": time.perf_counter() - t0,
        "samples": rows,
    }
