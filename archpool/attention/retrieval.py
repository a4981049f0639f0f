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

A long search keeps every finished trial in a :class:`TrialJournal` (one line each, appended as the trial
finishes): stopped at any moment, the same search resumes where it stopped without repeating a finished
trial, and gives the result an uninterrupted search gives.

Each finished trial is reported with the time spent and an estimate of the time left. With a time budget
(``budget_s``) the trials run in :func:`search_order` (rounds of depths, first, last, then the middles, each
round over every length), so that the part of the search that fits spreads over depths and lengths; the
search starts no trial it does not expect to finish within its share of the budget (a third with the
masking ablation, which decodes every searched trial twice more; all of it without), the ablation runs on
the trials searched, and the result says so (``complete`` false, ``n_trials`` of ``n_planned``); the
journal keeps them, so the search can be resumed and completed later. Without a budget the trials run in
their own order (lengths, then depths).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from archpool.attention.capture import Probe
from archpool.attention.metrics import copy_paste_scores, token_recall
from archpool.attention.rows import attention_rows
from archpool.errors import ConfigError
from archpool.io import append_text, atomic_write_text, checked_content, sha256_json, with_content_hash
from archpool.safeload import RECORD_MAX_BYTES, load_json, read_text_bounded

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
    haystack: Iterable[int],
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


JOURNAL_SCHEMA = "archpool.attention.trials/1"
SEARCH = "search"  # the journal phase of the retrieval-head search; the ablations' phases name their masked heads


class TrialJournal:
    """The finished trials of one retrieval-head search and its masking ablation, in ``path``: a header line
    naming the trials (their lengths, depths, prompts and answers, hashed), then one line per finished trial
    (``phase``, index, recall, and for a successful search trial its per-head copy-paste scores), appended
    when the trial finishes, each with its content hash.

    Opening it keeps the lines that are intact and belong to these trials: a line cut short by a kill (and
    every line after it) or edited by hand is dropped and the file rewritten without it; a journal of other
    trials is started afresh. So a stopped search resumes without repeating a finished trial."""

    def __init__(self, path: str | Path, trials: Sequence[NeedleTrial]):
        self.path = Path(path)
        self.trials = list(trials)
        self.fingerprint = sha256_json([[t.length, t.depth, t.prompt, list(t.span), t.answer] for t in trials])[:24]
        self.header = json.dumps({"schema": JOURNAL_SCHEMA, "trials": self.fingerprint}, sort_keys=True)
        self.entries: dict[tuple[str, int], dict[str, Any]] = {}
        kept = self._read()
        if kept is None or len(kept) != self._lines:
            atomic_write_text(self.path, "".join(line + "\n" for line in [self.header, *(kept or [])]))

    def _read(self) -> list[str] | None:
        """The intact lines of an existing journal of these trials (their entries loaded); None without one."""
        self._lines = 0
        if self.path.is_symlink() or not self.path.is_file():
            return None
        try:
            lines = read_text_bounded(self.path, RECORD_MAX_BYTES).split("\n")
        except ConfigError:
            return None
        if lines[0] != self.header:
            return None
        body = [line for line in lines[1:] if line]
        self._lines = len(body)
        kept = []
        for line in body:
            entry = self._entry(line)
            if entry is None:
                break
            self.entries[entry["phase"], entry["i"]] = entry
            kept.append(line)
        return kept

    def _entry(self, line: str) -> dict[str, Any] | None:
        """The entry of one line when it is intact and fits its trial; None otherwise."""
        try:
            obj = load_json(line, str(self.path))
        except ConfigError:
            return None
        entry = checked_content(obj, self.path) if isinstance(obj, dict) else None
        if entry is None:
            return None
        i, recall = entry.get("i"), entry.get("recall")
        if not isinstance(entry.get("phase"), str) or type(i) is not int or not 0 <= i < len(self.trials):
            return None
        t = self.trials[i]
        if (entry.get("length"), entry.get("depth")) != (t.length, t.depth):
            return None
        if isinstance(recall, bool) or not isinstance(recall, (int, float)) or not 0 <= recall <= 1:
            return None
        scores = entry.get("scores")
        if scores is not None and not (isinstance(scores, list) and all(isinstance(row, list) for row in scores)):
            return None
        return entry

    def get(self, phase: str, i: int) -> dict[str, Any] | None:
        return self.entries.get((phase, i))

    def add(self, phase: str, i: int, recall: float, scores: torch.Tensor | None = None) -> None:
        """Record trial ``i`` of ``phase`` as finished (one appended line)."""
        t = self.trials[i]
        entry = {"phase": phase, "i": i, "length": t.length, "depth": t.depth, "recall": float(recall),
                 "scores": None if scores is None else scores.tolist()}  # fmt: skip
        line = json.dumps(with_content_hash(entry), sort_keys=True)
        append_text(self.path, line + "\n")
        self.entries[phase, i] = json.loads(line)

    def count(self, phase: str) -> int:
        return sum(p == phase for p, _ in self.entries)

    def remove(self) -> None:
        """Delete the journal (its search is finished and its result kept elsewhere)."""
        self.path.unlink(missing_ok=True)


def search_order(trials: Sequence[NeedleTrial]) -> list[int]:
    """The indices of ``trials`` in the order a search runs them: rounds of depths, each round every length
    (shortest first), the depths spread out (the first, the last, then each next the farthest from those
    already run; ties to the shallower), so that every prefix covers the depths and lengths evenly."""
    depths = sorted({t.depth for t in trials})
    chosen: list[int] = []
    while len(chosen) < len(depths):
        rest = [d for d in range(len(depths)) if d not in chosen]
        if not chosen:
            pick = rest[0]
        elif len(chosen) == 1:
            pick = rest[-1]
        else:
            pick = max(rest, key=lambda d: (min(abs(d - c) for c in chosen), -d))
        chosen.append(pick)
    rank = {depths[d]: r for r, d in enumerate(chosen)}
    return sorted(range(len(trials)), key=lambda i: (rank[trials[i].depth], trials[i].length, i))


class _Clock:
    """Seconds spent and an estimate of the time left, from the mean time of the trials decoded so far."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.t0, self.decoded, self.decode_s = clock, clock(), 0, 0.0

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def timed(self, fn: Callable[[], Any]) -> Any:
        t = self.clock()
        out = fn()
        self.decoded += 1
        self.decode_s += self.clock() - t
        return out

    def mean(self) -> float:
        return self.decode_s / self.decoded if self.decoded else 0.0

    def left(self, trials: int) -> str:
        return f"about {_duration(self.mean() * trials)} left" if self.decoded else "time left not known yet"


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def niah_accuracy(
    probe: Probe,
    trials: Sequence[NeedleTrial],
    journal: TrialJournal | None = None,
    phase: str = "niah",
    indices: Sequence[int] | None = None,
    log: Callable[[str], None] = lambda *a: None,
    clock: _Clock | None = None,
) -> dict:
    """NIAH accuracy (recall > 0.5) and mean recall of greedy answers to ``trials`` (those at ``indices``:
    default all); with a ``journal``, each trial's recall is kept under ``phase`` as it finishes and read back
    instead of decoded again. ``log`` hears each decoded trial."""
    recalls = []
    order = list(range(len(trials))) if indices is None else list(indices)
    clock = clock or _Clock(time.monotonic)
    for k, i in enumerate(order):
        t = trials[i]
        kept = journal.get(phase, i) if journal is not None else None
        if kept is not None:
            recalls.append(float(kept["recall"]))
            continue
        r = token_recall(t.answer, clock.timed(lambda t=t: greedy(probe, t.prompt, len(t.answer))))
        if journal is not None:
            journal.add(phase, i, r)
        recalls.append(r)
        log(f"retrieval ablation ({phase.split(':')[0]} heads masked): trial {k + 1}/{len(order)} (T={t.length}, depth {t.depth}%): "
            f"recall {r:.2f}; {_duration(clock.elapsed())} spent, {clock.left(len(order) - k - 1)}")  # fmt: skip
    return {"accuracy": sum(r > 0.5 for r in recalls) / max(1, len(recalls)), "mean_recall": sum(recalls) / max(1, len(recalls))}


def retrieval_heads(  # noqa: PLR0913 — keyword-only settings of the search
    probe: Probe,
    trials: Sequence[NeedleTrial],
    *,
    threshold: float = THRESHOLD,
    top_k: int = 10,
    mask_k: int | None = None,
    seed: int = 0,
    log=lambda *a: None,
    journal: str | Path | None = None,
    budget_s: float | None = None,
    clock: Callable[[], float] | None = None,
) -> dict:
    """Per-head retrieval scores over ``trials`` (with a budget, in :func:`search_order`); optional masking ablation with
    ``mask_k`` heads. ``journal``: the file of a :class:`TrialJournal` that keeps every finished trial, so a
    stopped search resumes there. ``budget_s``: the seconds the search and its ablation may take (see the
    module docstring); ``clock`` measures them (default ``time.monotonic``). ``log`` hears every finished trial."""
    L, H = probe.n_layers, probe.n_heads
    book = TrialJournal(journal, trials) if journal is not None else None
    if book is not None and book.entries:
        log(f"retrieval: resuming, {book.count(SEARCH)}/{len(trials)} search trials kept from {book.path}")
    share = None if budget_s is None else float(budget_s) / (3 if mask_k else 1)
    timer = _Clock(clock or time.monotonic)
    total = torch.zeros(L, H, dtype=torch.float64)
    recalls, n_ok, searched = [], 0, []
    order = search_order(trials) if budget_s is not None else list(range(len(trials)))
    for k, i in enumerate(order):
        t = trials[i]
        kept = book.get(SEARCH, i) if book is not None else None
        if kept is not None:
            r = float(kept["recall"])
            scores = None if kept["scores"] is None else torch.tensor(kept["scores"], dtype=torch.float64)
            if scores is not None and tuple(scores.shape) != (L, H):
                raise ConfigError(str(book.path), f"trial {i} has scores of shape {tuple(scores.shape)}, the model {L}x{H} heads")
        else:
            if share is not None and searched and timer.elapsed() + timer.mean() > share:
                log(f"retrieval: the time budget ({_duration(float(budget_s or 0))}) ends the search after {len(searched)} of "
                    f"{len(trials)} trials; run the analysis again to resume it")  # fmt: skip
                break
            gen, top1 = timer.timed(lambda t=t: decode_with_top1(probe, t.prompt, len(t.answer)))
            r = token_recall(t.answer, gen)
            scores = copy_paste_scores(top1, torch.tensor(t.prompt), torch.tensor(gen), t.span).double() if r > 0.5 else None
            if book is not None:
                book.add(SEARCH, i, r, scores)
            ablation = 2 * len(trials) if mask_k else 0
            log(f"retrieval: trial {k + 1}/{len(trials)} (T={t.length}, depth {t.depth}%): recall {r:.2f}; "
                f"{_duration(timer.elapsed())} spent, {timer.left(len(trials) - k - 1 + ablation)}")  # fmt: skip
        searched.append(i)
        recalls.append(r)
        if scores is not None:
            n_ok += 1
            total += scores
    log(f"retrieval: {len(searched)}/{len(trials)} trials searched, {n_ok} successful")
    scores = total / max(1, n_ok)
    flat = sorted(((float(scores[layer, h]), layer, h) for layer in range(L) for h in range(H)), reverse=True)
    k = min(top_k, L * H)
    top = [{"layer": layer, "head": h, "score": round(s, 6)} for s, layer, h in flat[:k]]
    out = {
        "n_trials": len(searched),
        "n_planned": len(trials),
        "complete": len(searched) == len(trials),
        "budget_s": budget_s,
        "n_successful": n_ok,
        "accuracy": sum(r > 0.5 for r in recalls) / max(1, len(recalls)),
        "mean_recall": sum(recalls) / max(1, len(recalls)),
        "lengths": sorted({trials[i].length for i in searched}),
        "depths": sorted({trials[i].depth for i in searched}),
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
            top_res = niah_accuracy(probe, trials, book, f"top:{sha256_json(top_heads)[:12]}", searched, log, timer)
        with masked_heads(probe, rand_heads):
            rand_res = niah_accuracy(probe, trials, book, f"random:{sha256_json(rand_heads)[:12]}", searched, log, timer)
        out["ablation"] = {
            "k": mk,
            "heads_top": [list(x) for x in top_heads],
            "heads_random": [list(x) for x in rand_heads],
            "baseline": {"accuracy": out["accuracy"], "mean_recall": out["mean_recall"]},
            "top_masked": top_res,
            "random_masked": rand_res,
        }
    return out
