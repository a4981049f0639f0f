"""Scoring rules (docs/evaluation.md §1–2): RULER's substring match-all / match-part, HELMET's SubEM and
exact match after normalisation, re-ranking NDCG@10, and likelihood-mode ranking accuracy.
Every function scores one sample in [0, 1]; reports multiply by 100."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping, Sequence

_CTRL = re.compile(r"[\x00-\x1f]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def postprocess_pred(pred: str) -> str:
    """RULER: strip, control characters to newlines, strip."""
    return _CTRL.sub("\n", pred.strip()).strip()


def string_match_all(pred: str, refs: Sequence[str]) -> float:
    """RULER: fraction of gold strings found in the prediction (case-insensitive substring)."""
    p = pred.lower()
    return sum(r.lower() in p for r in refs) / len(refs) if refs else 0.0


def string_match_part(pred: str, refs: Sequence[str]) -> float:
    """RULER (upstream, not lm-eval's variant): 1 if any gold string is in the prediction."""
    p = pred.lower()
    return float(any(r.lower() in p for r in refs))


def normalize_answer(s: str) -> str:
    """HELMET / SQuAD: lowercase, drop punctuation and articles, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def parse_output(pred: str, prefix: str = "answer:") -> str | None:
    """HELMET's ``parse_output``: the text after ``prefix`` (case-insensitive) up to the newline."""
    m = re.search(re.escape(prefix) + r"\s*(.*)", pred, flags=re.IGNORECASE)
    return m.group(1).split("\n")[0].strip() if m else None


def _with_parsed(pred: str, prefix: str) -> list[str]:
    parsed = parse_output(pred, prefix)
    first_line = pred.strip().split("\n")[0]
    return [pred, first_line] + ([parsed] if parsed is not None else [])


def substring_exact_match(pred: str, refs: Sequence[str], prefix: str = "answer:") -> float:
    """HELMET SubEM: normalised gold ⊂ normalised prediction, max over golds and over raw / parsed output."""
    outs = [normalize_answer(o) for o in _with_parsed(pred, prefix)]
    return float(any(normalize_answer(r) in o for r in refs for o in outs if normalize_answer(r)))


def exact_match(pred: str, refs: Sequence[str], prefix: str = "label:") -> float:
    """HELMET EM (ICL): normalised prediction == normalised gold; the first line counts as the output."""
    outs = [normalize_answer(o) for o in _with_parsed(pred, prefix)]
    return float(any(normalize_answer(r) == o for r in refs for o in outs))


def first_word_match(pred: str, refs: Sequence[str]) -> float:
    """The first whitespace-separated word of the prediction equals a gold answer (case-insensitive)."""
    words = pred.split()
    return float(bool(words) and any(words[0].strip(string.punctuation).lower() == r.lower() for r in refs))


_RANKING = re.compile(r"\d+(?:\s*>\s*\d+)*")


def parse_rankings(pred: str) -> dict[str, int]:
    """HELMET ``parse_rankings``: drop ``[]:`` and "id", take the longest ``a > b > c`` run of ids,
    score rank i as ``len - i``."""
    text = re.sub(r"[\[\]:]", " ", pred)
    text = re.sub(r"id", " ", text, flags=re.IGNORECASE)
    runs = _RANKING.findall(text)
    if not runs:
        return {}
    best = max(runs, key=lambda r: len(r.split(">")))
    ids: list[str] = []
    for x in best.split(">"):
        x = x.strip()
        if x not in ids:
            ids.append(x)
    return {d: len(ids) - i for i, d in enumerate(ids)}


def ndcg_at_k(scores: Mapping[str, float], qrels: Mapping[str, int], k: int = 10) -> float:
    """NDCG@k with linear gain (pytrec_eval / BEIR ``ndcg_cut``): ranked by score, ties broken by id
    descending as trec_eval does; the ideal DCG uses every judged relevant document."""
    ranked = sorted(scores, key=lambda d: (-scores[d], _neg_key(d)))[:k]
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def _neg_key(d: str):
    return tuple(-ord(c) for c in d)


def score_generation(metric: str, pred: str, refs: Sequence[str], meta: Mapping | None = None) -> float:
    """Score one generated prediction by the task's metric name."""
    pred = postprocess_pred(pred)
    if metric == "match_all":
        return string_match_all(pred, refs)
    if metric == "match_part":
        return string_match_part(pred, refs)
    if metric == "subem":
        return substring_exact_match(pred, refs)
    if metric == "em":
        return exact_match(pred, refs)
    if metric == "first_word":
        return first_word_match(pred, refs)
    if metric == "ndcg":
        return ndcg_at_k(parse_rankings(pred), (meta or {})["qrels"], 10)
    raise ValueError(f"unknown metric {metric!r}")


def rank_of_gold(logprobs: Sequence[float]) -> int:
    """0-based rank of candidate 0 (the gold) by log-probability; ties count against the gold."""
    gold = logprobs[0]
    return sum(1 for lp in logprobs[1:] if lp >= gold)
