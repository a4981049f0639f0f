"""The attention statistics of one model on one corpus (the result JSON and its flat columns).

Measured (docs/evaluation.md §4–5), each "without BOS" (the document's own first token at position 0, as in
packed pretraining) and "with BOS" (``bos_id`` prepended; default: the store's EOS, the separator
every document follows in pretraining):

- ``sink``: sink rate at T = 64 (% of heads with α_1 > 0.3, over samples and layers), per layer;
- ``long``: at lengths pretraining context × (1, 2, 4), from the last ``queries`` queries of each
  sample: first-token mass, entropy (raw, / log|support|, sink-excluded), distance profile by layer
  type, per layer and head;
- ``retrieval`` (no BOS): retrieval-head scores, heads above 0.1, top-k, and NIAH accuracy with the
  top-k vs k random heads masked; with ``retrieval_budget_s`` over the trials that fit the budget
  (``complete``, ``n_trials`` of ``n_planned``).

``metrics`` holds the flat scalars the pool puts into results.csv (``attn_*``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from archpool.attention.capture import Probe, probe_for
from archpool.attention.corpus import Corpus
from archpool.attention.metrics import RowStats, sink_rate
from archpool.attention.rows import attention_rows
from archpool.attention.settings import SINK_EPS, Settings, check_bos_id
from archpool.axes import NORM, QK_NORM
from archpool.errors import DataError

SCHEMA = "archpool.attention/1"
VERSION = 1  # bump when results change meaning: invalidates the cache
VARIANTS = ("no_bos", "bos")


def _long_lengths(s: Settings, seq_len: int) -> list[int]:
    return sorted(set(s.lengths or [seq_len * m for m in s.multiples]))


@torch.no_grad()
def sink_stats(probe: Probe, samples: Sequence[np.ndarray], eps: float = SINK_EPS) -> dict[str, Any]:
    """Sink rate from full maps of short samples: α_1 per (sample, layer, head) = mean over all
    queries of the first-token attention (every query sees token 0 at T ≤ window)."""
    device = next(probe.model.parameters()).device
    alphas = []
    for x in samples:
        ids = torch.as_tensor(np.asarray(x, dtype=np.int64))[None].to(device)
        per_layer = []
        for lq in probe.capture(ids):
            first = torch.zeros(lq.q.shape[1], dtype=torch.float64)
            for c in attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, scale=lq.scale):
                if len(c.k_pos) and int(c.k_pos[0]) == 0:
                    first += c.probs[0, :, :, 0].double().sum(-1).cpu()
            per_layer.append(first / ids.shape[1])
        alphas.append(torch.stack(per_layer))
    a = torch.stack(alphas)  # (N, L, H)
    types = probe.layer_types
    by_type = {t: sink_rate(a[:, [i for i, x in enumerate(types) if x == t]], eps) for t in sorted(set(types))}
    return {
        "rate": sink_rate(a, eps),
        "per_layer": [sink_rate(a[:, i], eps) for i in range(a.shape[1])],
        "by_layer_type": by_type,
        "alpha1_mean": float(a.mean()),
        "alpha1_per_head": [[round(float(v), 6) for v in row] for row in a.mean(0).tolist()],
        "n_samples": int(a.shape[0]),
        "T": len(samples[0]),
        "eps": eps,
    }


@torch.no_grad()
def long_stats(probe: Probe, samples: Sequence[np.ndarray], queries: int) -> dict[str, Any]:
    """First-token mass, entropies and distance profile from the last ``queries`` rows of each sample."""
    device = next(probe.model.parameters()).device
    T = len(samples[0])
    stats = RowStats(probe.n_layers, probe.n_heads, T)
    for x in samples:
        ids = torch.as_tensor(np.asarray(x, dtype=np.int64))[None].to(device)
        for layer, lq in enumerate(probe.capture(ids, keep_queries=queries)):
            for c in attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, scale=lq.scale):
                c.probs, c.q_pos, c.k_pos = c.probs.cpu(), c.q_pos.cpu(), c.k_pos.cpu()
                stats.add(layer, c, lq.window)
    out = stats.summary(probe.layer_types)
    out.update(T=T, n_samples=len(samples), queries=min(queries, T))
    return out


def analyze(
    model_or_probe,
    corpus: Corpus,
    settings: Settings | None = None,
    log: Callable[..., None] = lambda *a: None,
    journal: str | Path | None = None,
) -> dict[str, Any]:
    """All attention statistics of a model (archpool ``Decoder`` or transformers causal LM) on ``corpus``.
    ``journal``: where the retrieval-head search keeps its finished trials (``retrieval.TrialJournal``), so a
    stopped analysis resumes its search without repeating them."""
    s = settings or Settings()
    probe = model_or_probe if isinstance(model_or_probe, Probe) else probe_for(model_or_probe)
    cfg = getattr(probe.model, "cfg", None)
    max_seq = int(cfg.max_seq_len) if cfg is not None else int(getattr(probe.model.config, "max_position_embeddings", 0) or 0)
    seq_len = int(s.seq_len or max_seq or 2048)
    bos_id = corpus.bos_id if s.bos_id is None else int(s.bos_id)
    check_bos_id(bos_id, probe.vocab_size)
    corpus = dataclasses.replace(corpus, bos_id=bos_id)
    for d in corpus.docs[:50]:
        if len(d) and int(d.max()) >= probe.vocab_size:
            raise DataError(
                f"held-out text has token id {int(d.max())} >= the model's vocabulary ({probe.vocab_size}): wrong tokenizer?"
            )
    t0 = time.time()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "version": VERSION,
        "settings": {**s.to_dict(), "seq_len": seq_len, "bos_id": bos_id},
        "model": {**probe.describe(), **_model_axes(probe)},
        "text": corpus.info,
    }
    result["sink"], result["long"], packed = {}, {}, {}
    lengths = _long_lengths(s, seq_len)
    for v in VARIANTS:
        bos = v == "bos"
        samples, packed[f"sink_{v}"] = corpus.first_tokens(s.sink_len, s.sink_samples, bos)
        result["sink"][v] = sink_stats(probe, samples, s.sink_eps)
        log(f"sink rate ({v}): {result['sink'][v]['rate']:.1f}%")
        result["long"][v] = {}
        for T in lengths:
            samples, packed[f"{T}_{v}"] = corpus.first_tokens(T, s.long_samples, bos)
            result["long"][v][str(T)] = long_stats(probe, samples, s.queries)
            r = result["long"][v][str(T)]
            log(
                f"T={T} ({v}): first-token mass {r['first_token_mass']:.3f}, entropy {r['entropy']:.3f} (norm {r['entropy_norm']:.3f})"
            )
    result["text"] = {**corpus.info, "packed": packed}
    if s.retrieval:
        from archpool.attention.retrieval import make_trials, retrieval_heads

        long_ctx = int(s.long_ctx or max(max_seq, seq_len))
        r_lengths = s.retrieval_lengths or tuple(sorted({int(round(x)) for x in np.linspace(long_ctx / 4, long_ctx, 4)}))
        hay = corpus.stream()[: 2 * max(r_lengths) + 16]
        trials = make_trials(
            hay, r_lengths, key_len=s.key_len, value_len=s.value_len, exclude=corpus.special_ids + [bos_id], seed=s.seed
        )
        n_heads = probe.n_layers * probe.n_heads
        mask_k = s.mask_k if s.mask_k is not None else max(1, round(0.03 * n_heads))
        result["retrieval"] = retrieval_heads(
            probe, trials, top_k=s.top_k, mask_k=mask_k, seed=s.seed, log=log, journal=journal, budget_s=s.retrieval_budget_s
        )
        log(
            f"retrieval: {result['retrieval']['n_successful']}/{result['retrieval']['n_trials']} successful, "
            f"{result['retrieval']['n_heads_above']} heads > {result['retrieval']['threshold']}"
        )
    result["metrics"] = flat_metrics(result)
    result["per_layer"] = per_layer(result)
    result["seconds"] = round(time.time() - t0, 2)
    return result


def _model_axes(probe: Probe) -> dict[str, Any]:
    cfg = getattr(probe.model, "cfg", None)
    if cfg is not None:
        return {
            QK_NORM: cfg.qk_norm,
            NORM: cfg.norm,
            "window": cfg.window,
            "max_seq_len": cfg.max_seq_len,
            "family": cfg.family,
        }
    c = probe.model.config
    from archpool.model.hf import FAMILIES

    fam = FAMILIES.get(getattr(c, "model_type", ""))
    return {
        QK_NORM: fam.qk_norm if fam else "unknown",
        NORM: fam.norm if fam else "unknown",
        "window": getattr(c, "sliding_window", None),
        "max_seq_len": getattr(c, "max_position_embeddings", None),
        "family": getattr(c, "model_type", None),
    }


def flat_metrics(r: dict[str, Any]) -> dict[str, float]:
    """The scalar ``attn_*`` columns for results.csv."""
    m: dict[str, float] = {}
    m["attn_sink_rate"] = r["sink"]["no_bos"]["rate"]
    m["attn_sink_rate_bos"] = r["sink"]["bos"]["rate"]
    for t, v in r["sink"]["no_bos"]["by_layer_type"].items():
        m[f"attn_sink_rate_{t.split('_')[0]}"] = v
    lengths = sorted(r["long"]["no_bos"], key=int)
    seq = int(r["settings"]["seq_len"])
    for T in lengths:
        sfx = "" if int(T) == seq else (f"_x{int(T) // seq}" if int(T) % seq == 0 else f"_T{T}")
        for v, vs in (("no_bos", ""), ("bos", "_bos")):
            x = r["long"][v][T]
            m[f"attn_first_token_mass{vs}{sfx}"] = x["first_token_mass"]
            if v == "no_bos":
                for key in ("entropy", "entropy_norm", "entropy_sinkless", "entropy_sinkless_norm"):
                    m[f"attn_{key}{sfx}"] = x[key]
                for t, d in x["distance"]["by_layer_type"].items():
                    m[f"attn_first_token_mass_{t.split('_')[0]}{sfx}"] = d["first_token_mass"]
    if "attn_entropy" not in m:  # no length equal to seq_len: the shortest is the headline
        base = r["long"]["no_bos"][lengths[0]]
        m.update(
            attn_first_token_mass=base["first_token_mass"], attn_entropy=base["entropy"], attn_entropy_norm=base["entropy_norm"]
        )
    if "retrieval" in r:
        rt = r["retrieval"]
        m.update(attn_retrieval_heads=rt["n_heads_above"], attn_retrieval_topk=rt["topk_mean"], attn_niah_acc=rt["accuracy"])
        if "ablation" in rt:
            m["attn_niah_acc_top_masked"] = rt["ablation"]["top_masked"]["accuracy"]
            m["attn_niah_acc_random_masked"] = rt["ablation"]["random_masked"]["accuracy"]
    return {k: (round(float(v), 6) if v == v else v) for k, v in m.items()}


def per_layer(r: dict[str, Any]) -> dict[str, list[float]]:
    """Per-layer arrays at the pretraining length (no BOS), for the report's profiles."""
    seq = str(r["settings"]["seq_len"])
    x = r["long"]["no_bos"].get(seq) or r["long"]["no_bos"][sorted(r["long"]["no_bos"], key=int)[0]]
    out = {
        "sink_rate": [round(v, 4) for v in r["sink"]["no_bos"]["per_layer"]],
        "layer_types": r["model"]["layer_types"],
        **x["per_layer"],
    }
    if "retrieval" in r:
        out["retrieval_score_max"] = [max(row) for row in r["retrieval"]["scores"]]
    return out
