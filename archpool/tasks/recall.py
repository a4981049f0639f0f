"""``kv_recall``: Zoology-style multi-query associative recall in text, sized for tiny models.

docs/tiny-scale.md: a 1.4M-parameter model did not learn RULER-style key→value retrieval with 7-digit values
in 2.5M tokens. This format is what small attention models learn fast (an induction-head job): a
small task vocabulary (short keys, one-digit values, each one token where the tokenizer allows),
several pairs per document and several queries, every query after the first answered in-line so
that training documents give a dense signal. The pair block sits at a RULER depth inside a noise
haystack; only the last query is scored::

    kv: cat 3 dog 7 sun 1 hat 4 .
    The grass is green. The sky is blue. ...
    q: dog 7 hat 4 sun        -> target " 1"
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from archpool.tasks import words as W
from archpool.tasks.base import Draw, TokenizerLike, pick_depths, single_token_strings
from archpool.tasks.haystack import TextHaystack, noise_units
from archpool.tasks.params import Param, SampleConfig, count, param


@dataclass(frozen=True)
class KvRecallConfig(SampleConfig):
    """``kv_recall``: pairs of a document, queries, the value kind and the haystack."""

    # distinct keys of a document: at least 20 of the 40 short keys are usable with any tokenizer
    n_pairs: int = param(4, count(1, 20))
    n_queries: int = param(3, count(1, 20))
    value_type: str = param("digits", Param("choice", choices=("digits", "letters")))
    haystack: str = param("noise", Param("choice", choices=("noise", "corpus")))


def kv_recall(rng: random.Random, index: int, length: int, tok: TokenizerLike, p: KvRecallConfig) -> Draw:
    n_pairs, n_queries = p.n_pairs, min(p.n_queries, p.n_pairs)
    keys_pool = single_token_strings(tok, W.SHORT_KEYS)
    values_pool = single_token_strings(tok, W.DIGITS if p.value_type == "digits" else W.LETTERS)
    keys = rng.sample(keys_pool, n_pairs)
    values = [rng.choice(values_pool) for _ in keys]  # values may repeat (as in MQAR with a small value set)
    block = "kv: " + " ".join(f"{k} {v}" for k, v in zip(keys, values)) + " ."
    asked = rng.sample(range(n_pairs), n_queries)
    *shown, last = asked
    query = "q: " + " ".join(f"{keys[i]} {values[i]}" for i in shown) + (" " if shown else "") + keys[last]
    depth = pick_depths(rng, 1, index)[0]
    text = TextHaystack(p.haystack_texts) if p.haystack == "corpus" else None
    start = rng.randrange(len(text.sentences)) if text else 0

    def render(n: int) -> tuple[str, dict[str, Any]]:
        units = text.units(start, n) if text else noise_units(n)
        at = round(depth * n)
        body = units[:at] + [block] + units[at:]
        prompt = "\n".join([" ".join(body[:at]), block, " ".join(body[at + 1 :]), query]).replace("\n\n", "\n").lstrip("\n")
        return prompt, {"needle_char": prompt.index(block), "depth": depth}

    gold = values[last]
    target = " " + gold
    others = [" " + v for v in values_pool if v != gold]
    rng.shuffle(others)
    return Draw(render, [gold], target, others[: p.n_choices - 1], {"key": keys[last]})
