"""LongPPL (Fang et al.; docs/evaluation.md §3) and plain perplexity at each length.

Key tokens are chosen once by an evaluator model E: token i is key iff
LSD = loss_short - loss_full > alpha and LCL = -loss_full > beta, where loss_short uses only the
K preceding tokens (approximated by sliding windows of step d: each target sees K .. K+d-1 tokens).
The choice is cached (positions, by evaluator hash × tokenizer hash × documents × K, d, alpha, beta),
so every pool member is scored on the same tokens. Corpus LongPPL = exp(key-token-weighted mean NLL).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from archpool.errors import ConfigError
from archpool.io import read_cache_entry, sha256_json, write_cache_entry

ALPHA, BETA = 2.0, -2.0


def short_context_nll(lm, ids: torch.Tensor, K: int, d: int) -> torch.Tensor:
    """NLL of every target position t >= K of ``ids`` (N,) given only a window of K..K+d-1 preceding
    tokens (LongPPL's sliding-window procedure). Entry t-1 is the NLL of ids[t]; t < K are NaN."""
    N = ids.shape[0]
    out = torch.full((N - 1,), float("nan"))
    starts = list(range(0, max(N - K, 0), d))
    full_windows = [s for s in starts if s + K + d <= N]
    tail = [s for s in starts if s + K + d > N]
    for g in range(0, len(full_windows), lm.max_batch):
        group = full_windows[g : g + lm.max_batch]
        x = torch.stack([ids[s : s + K + d] for s in group])
        nll = lm.token_nll(x)  # (B, K+d-1): entry j is the NLL of ids[s+j+1]
        for b, s in enumerate(group):
            out[s + K - 1 : s + K + d - 1] = nll[b, K - 1 :]
    for s in tail:  # the last window is clipped at the document end
        nll = lm.token_nll(ids[s:N][None])[0]
        out[s + K - 1 : N - 1] = nll[K - 1 :]
    return out


def document_nll(lm, docs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each document's full-context per-token NLL, one document at a time."""
    return [lm.token_nll(ids[None])[0] for ids in docs]


def select_key_tokens(
    evaluator,
    docs: Sequence[torch.Tensor],
    K: int,
    d: int,
    alpha: float = ALPHA,
    beta: float = BETA,
    full_nll: Sequence[torch.Tensor] | None = None,
) -> list[list[int]]:
    """Indices j into each document's NLL vector (target token j+1) that are LongPPL key tokens.
    ``full_nll``: the evaluator's ``document_nll`` of ``docs`` when already computed."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not math.isfinite(value):  # a NaN threshold selects no key token: an empty LongPPL
            raise ConfigError(f"longppl.{name}", f"must be a finite number, got {value!r}")
    keys = []
    for i, ids in enumerate(docs):
        full = full_nll[i] if full_nll is not None else evaluator.token_nll(ids[None])[0]
        short = short_context_nll(evaluator, ids, K, d)
        lsd = short - full
        mask = (lsd > alpha) & (-full > beta)
        mask &= ~torch.isnan(short)
        keys.append(torch.nonzero(mask).flatten().tolist())
    return keys


def cached_key_tokens(
    evaluator,
    evaluator_hash: str,
    tokenizer_hash: str,
    docs: Sequence[torch.Tensor],
    K: int,
    d: int,
    alpha: float = ALPHA,
    beta: float = BETA,
    cache_dir: Path | None = None,
    full_nll: Sequence[torch.Tensor] | None = None,
) -> tuple[list[list[int]], str]:
    doc_hash = sha256_json([ids.tolist() for ids in docs])[:16]
    key = sha256_json(
        {
            "v": 2,
            "evaluator": evaluator_hash,  # v2: verified model hashes (see runner.TASK_FORMAT_VERSION)
            "tokenizer": tokenizer_hash,
            "docs": doc_hash,
            "K": K,
            "d": d,
            "alpha": alpha,
            "beta": beta,
        }
    )[:24]
    path = Path(cache_dir) / f"longppl_keys_{key}.json" if cache_dir else None
    cached = _cached_keys(path, docs) if path is not None else None
    if cached is not None:
        if cached["tokenizer"] != tokenizer_hash:
            raise ConfigError("longppl.evaluator", "cached key tokens were chosen with another tokenizer")
        return cached["keys"], key
    keys = select_key_tokens(evaluator, docs, K, d, alpha, beta, full_nll)
    if path is not None:
        write_cache_entry(
            path,
            {
                "keys": keys,
                "tokenizer": tokenizer_hash,
                "evaluator": evaluator_hash,
                "K": K,
                "d": d,
                "alpha": alpha,
                "beta": beta,
                "docs": doc_hash,
            },
        )
    return keys, key


def _cached_keys(path: Path, docs: Sequence[torch.Tensor]) -> dict[str, Any] | None:
    """The cache entry in ``path`` when it holds a tokenizer hash and, per document, key-token indices
    inside its NLL vector; None when there is none or it is damaged (the keys are then recomputed)."""
    data = read_cache_entry(path)  # its content hash checked: an edited entry is recomputed
    if data is None:
        return None
    keys = data.get("keys")
    if not isinstance(data.get("tokenizer"), str) or not isinstance(keys, list) or len(keys) != len(docs):
        return None
    for k, ids in zip(keys, docs):
        if not isinstance(k, list) or not all(type(j) is int and 0 <= j < len(ids) - 1 for j in k):
            return None
    return data


def longppl(
    lm, docs: Sequence[torch.Tensor], keys: Sequence[Sequence[int]], nll_per_doc: Sequence[torch.Tensor] | None = None
) -> dict[str, Any]:
    """The evaluated model's LongPPL over the key tokens and PPL over all tokens, corpus-weighted.
    ``nll_per_doc``: the model's ``document_nll`` of ``docs`` when already computed."""
    key_nll, n_key, all_nll, n_all, per_doc = 0.0, 0, 0.0, 0, []
    nlls = nll_per_doc if nll_per_doc is not None else (lm.token_nll(ids[None])[0] for ids in docs)
    for nll, k in zip(nlls, keys):
        kn = float(nll[list(k)].sum()) if k else 0.0
        key_nll += kn
        n_key += len(k)
        all_nll += float(nll.sum())
        n_all += nll.numel()
        per_doc.append(
            {
                "longppl": math.exp(kn / len(k)) if k else None,
                "n_key_token": len(k),
                "ppl": math.exp(float(nll.mean())),
                "n_token": nll.numel(),
            }
        )
    return {
        "longppl": math.exp(key_nll / n_key) if n_key else None,
        "n_key_token": n_key,
        "ppl": math.exp(all_nll / n_all) if n_all else None,
        "n_token": n_all,
        "docs": per_doc,
    }


def perplexity(lm, rows: torch.Tensor) -> dict[str, Any]:
    """Plain perplexity of equal-length rows (N, T)."""
    nll = lm.token_nll(rows)
    return {"ppl": math.exp(float(nll.mean())), "n_token": nll.numel(), "n_docs": rows.shape[0]}


def run_longppl(
    lm,
    evaluator,
    docs: Sequence[torch.Tensor],
    lengths: Sequence[int],
    K: int,
    *,
    d: int | None = None,
    alpha: float = ALPHA,
    beta: float = BETA,
    evaluator_hash: str,
    tokenizer_hash: str,
    cache_dir: Path | None = None,
    max_docs: int = 8,
) -> list[dict[str, Any]]:
    """LongPPL and PPL at every length: documents at least that long, truncated to it. Lengths at
    most K have no key tokens by definition (only PPL is reported there). When the evaluator is the
    model itself, each document's full NLL is computed once and serves both the key choice and the
    LongPPL (the same per-document forwards as a separate evaluator pass, so the same numbers)."""
    d = d or max(1, K // 4)
    out = []
    for L in lengths:
        use = [ids[:L] for ids in docs if ids.shape[0] >= L][:max_docs]
        row: dict[str, Any] = {
            "suite": "longppl",
            "length": L,
            "K": K,
            "d": d,
            "alpha": alpha,
            "beta": beta,
            "n_docs": len(use),
            "evaluator": evaluator_hash[:16],
        }
        if not use:
            row["skipped"] = f"no held-out document of at least {L} tokens"
            out.append(row)
            continue
        row.update(perplexity(lm, torch.stack(use)))
        if L > K:
            own = document_nll(lm, use) if evaluator is lm else None
            keys, key = cached_key_tokens(evaluator, evaluator_hash, tokenizer_hash, use, K, d, alpha, beta, cache_dir, own)
            res = longppl(lm, use, keys, own)
            row.update(longppl=res["longppl"], n_key_token=res["n_key_token"], key_cache=key)
        out.append(row)
    return out
