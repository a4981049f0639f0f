"""Retrieval heads (Wu et al. 2024, docs/evaluation.md §4) with needles a model cannot know, and head masking.

Needle construction (the small-scale adaptation of §4.1, in tokens so that any tokenizer works):
a *key* of ``key_len`` random tokens followed by a *value* of ``value_len`` random tokens, both drawn
from tokens that occur in the held-out haystack text (so they are in-distribution but their pairing
is unknowable), is inserted into held-out text at 10 depths (0, 11, …, 100 %) for each length; the
prompt ends with the key again, and the model decodes greedily ``value_len`` tokens. A trial
succeeds when the response recalls more than half of the value tokens (ROUGE-1 recall > 0.5, the
reference code's criterion). At each decoding step the newest query's attention row is recomputed
from the captured q/k of every layer; a head makes a copy-paste event when its top-1 key lies in
the value span and holds the token just produced. Head score = mean over successful trials of
events / |value|.

Masking a head zeroes its slice of the attention output before ``o_proj`` (a forward pre-hook), so
the model code is untouched; NIAH accuracy is re-measured with the top-k heads masked and with k
random other heads masked.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from archpool.attention.capture import Probe
from archpool.attention.metrics import copy_paste_scores, token_recall
from archpool.attention.rows import attention_rows

DEPTHS = [round(i * 100 / 9) for i in range(10)]  # round(linspace(0, 100, 10))
THRESHOLD = 0.1


@dataclass
class NeedleTrial:
    prompt: list[int]
    span: tuple[int, int]  # the value's positions [lo, hi) in the prompt
    answer: list[int]
    length: int
    depth: int


def make_trials(
    haystack: Sequence[int],
    lengths: Sequence[int],
    *,
    depths: Sequence[int] = DEPTHS,
    key_len: int = 3,
    value_len: int = 6,
    exclude: Sequence[int] = (),
    seed: int = 0,
) -> list[NeedleTrial]:
    """One trial per (length, depth); prompt length = ``length`` tokens exactly."""
    hay = [int(t) for t in haystack]
    pool = sorted(set(hay) - set(int(e) for e in exclude))
    if len(pool) < key_len + value_len:
        raise ValueError(f"haystack has only {len(pool)} distinct tokens; need {key_len + value_len}")
    trials = []
    for length in lengths:
        n_hay = length - 2 * key_len - value_len
        if n_hay < 1:
            raise ValueError(f"retrieval length {length} is too short for a {key_len}+{value_len}-token needle")
        for d in depths:
            rng = random.Random(f"{seed}:{length}:{d}")
            picked = rng.sample(pool, key_len + value_len)
            key, value = picked[:key_len], picked[key_len:]
            start = rng.randrange(0, max(1, len(hay) - n_hay))
            segment = (hay[start : start + n_hay] * (n_hay // max(1, len(hay)) + 2))[:n_hay]
            pos = round(d / 100 * n_hay)
            prompt = segment[:pos] + key + value + segment[pos:] + key
            lo = pos + key_len
            trials.append(NeedleTrial(prompt, (lo, lo + value_len), value, int(length), int(d)))
    return trials


@torch.no_grad()
def decode_with_top1(probe: Probe, prompt: Sequence[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding; returns the generated tokens and top-1 key positions (steps, L, H)."""
    device = next(probe.model.parameters()).device
    state = probe.start(torch.tensor([list(prompt)], device=device))
    generated, tops = [], []
    for s in range(steps):
        token = int(state.last_logits[0].argmax())
        per_layer = []
        for lq in state.layers():
            (chunk,) = list(attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, scale=lq.scale))
            per_layer.append(chunk.k_pos[chunk.probs[0, :, 0].argmax(-1).cpu()])  # (H,)
        tops.append(torch.stack(per_layer))
        generated.append(token)
        if s + 1 < steps:
            state.step(token)
    return generated, torch.stack(tops)


@torch.no_grad()
def greedy(probe: Probe, prompt: Sequence[int], steps: int) -> list[int]:
    device = next(probe.model.parameters()).device
    state = probe.start(torch.tensor([list(prompt)], device=device))
    out = []
    for s in range(steps):
        token = int(state.last_logits[0].argmax())
        out.append(token)
        if s + 1 < steps:
            state.step(token)
    return out


@contextlib.contextmanager
def masked_heads(probe: Probe, heads: Sequence[tuple[int, int]]) -> Iterator[None]:
    """Zero the outputs of ``heads`` [(layer, head)] before each layer's output projection."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(int(layer), []).append(int(head))
    hd = probe.head_dim
    handles = []
    for layer, hs in by_layer.items():

        def hook(_module, args, hs=tuple(hs)):
            x = args[0].clone()
            for h in hs:
                x[..., h * hd : (h + 1) * hd] = 0
            return (x, *args[1:])

        handles.append(probe.o_proj(layer).register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def niah_accuracy(probe: Probe, trials: Sequence[NeedleTrial]) -> dict:
    recalls = [token_recall(t.answer, greedy(probe, t.prompt, len(t.answer))) for t in trials]
    return {"accuracy": sum(r > 0.5 for r in recalls) / max(1, len(recalls)), "mean_recall": sum(recalls) / max(1, len(recalls))}


def retrieval_heads(
    probe: Probe,
    trials: Sequence[NeedleTrial],
    *,
    threshold: float = THRESHOLD,
    top_k: int = 10,
    mask_k: int | None = None,
    seed: int = 0,
    log=lambda *a: None,
) -> dict:
    """Per-head retrieval scores over ``trials``; optional masking ablation with ``mask_k`` heads."""
    L, H = probe.n_layers, probe.n_heads
    total = torch.zeros(L, H, dtype=torch.float64)
    recalls, n_ok = [], 0
    for i, t in enumerate(trials):
        gen, top1 = decode_with_top1(probe, t.prompt, len(t.answer))
        r = token_recall(t.answer, gen)
        recalls.append(r)
        if r > 0.5:
            n_ok += 1
            total += copy_paste_scores(top1, torch.tensor(t.prompt), torch.tensor(gen), t.span).double()
        if (i + 1) % 10 == 0:
            log(f"retrieval: {i + 1}/{len(trials)} trials, {n_ok} successful")
    scores = total / max(1, n_ok)
    flat = sorted(((float(scores[layer, h]), layer, h) for layer in range(L) for h in range(H)), reverse=True)
    k = min(top_k, L * H)
    top = [{"layer": layer, "head": h, "score": round(s, 6)} for s, layer, h in flat[:k]]
    out = {
        "n_trials": len(trials),
        "n_successful": n_ok,
        "accuracy": sum(r > 0.5 for r in recalls) / max(1, len(recalls)),
        "mean_recall": sum(recalls) / max(1, len(recalls)),
        "lengths": sorted({t.length for t in trials}),
        "depths": sorted({t.depth for t in trials}),
        "threshold": threshold,
        "scores": [[round(float(v), 6) for v in row] for row in scores.tolist()],
        "n_heads_above": int((scores > threshold).sum()),
        "frac_heads_above": float((scores > threshold).float().mean()),
        "top_k": k,
        "top": top,
        "topk_mean": sum(x["score"] for x in top) / max(1, k),
        "topk_sum": sum(x["score"] for x in top),
    }
    if n_ok == 0:
        out["note"] = "no successful trial: scores are zero by definition (the model never recalled the needle)"
    if mask_k:
        mk = min(mask_k, L * H // 2) or 1
        top_heads = [(layer, h) for _, layer, h in flat[:mk]]
        others = [(layer, h) for layer in range(L) for h in range(H) if (layer, h) not in set(top_heads)]
        rand_heads = random.Random(f"mask:{seed}").sample(others, min(mk, len(others)))
        with masked_heads(probe, top_heads):
            top_res = niah_accuracy(probe, trials)
        with masked_heads(probe, rand_heads):
            rand_res = niah_accuracy(probe, trials)
        out["ablation"] = {
            "k": mk,
            "heads_top": [list(x) for x in top_heads],
            "heads_random": [list(x) for x in rand_heads],
            "baseline": {"accuracy": out["accuracy"], "mean_recall": out["mean_recall"]},
            "top_masked": top_res,
            "random_masked": rand_res,
        }
    return out
