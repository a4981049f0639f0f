"""Evaluation samples of prompt + answer tasks: parameters resolved against a task's defaults, and
prompts that fill a length exactly in the tokenizer's own tokens."""

from __future__ import annotations

import random
from typing import Any

from archpool.errors import ConfigError
from archpool.tasks import mqar
from archpool.tasks.base import Sample, TokenizerLike, fit_size, sample_seed
from archpool.tasks.params import MAX_LENGTH, Param, check, count
from archpool.tasks.registry import TaskDef, get_task

COMMON_DEFAULTS = dict(n_choices=10, haystack_texts=None)
# parameters every prompt + answer task takes besides its own
COMMON_PARAMS = dict(
    n_choices=count(2, 100),  # likelihood candidates: the gold and n_choices - 1 distractors
    haystack_texts=Param("texts", optional=True),  # held-out text for corpus haystacks (the eval stage passes the store's)
    max_new_tokens=count(1, 4096, optional=True),  # generation length (default: the task's, capped by the length)
    step=count(1, MAX_LENGTH),  # haystack units per search step
)

_VOCABS: dict[tuple[Any, int, int], mqar.TaskVocab] = {}


def task_vocab(tokenizer: TokenizerLike, p: dict[str, Any]) -> mqar.TaskVocab:
    """The tokenizer's MQAR vocabularies for ``p``, cached by the tokenizer's content hash (by the
    object for tokenizers without one, which the cache then keeps alive so its id is never reused)."""
    ident = getattr(tokenizer, "hash", None) or tokenizer
    key = (ident, int(p["n_keys"]), int(p["n_values"]))
    if key not in _VOCABS:
        _VOCABS[key] = mqar.tokenizer_vocab(tokenizer, key[1], key[2])
    return _VOCABS[key]


def resolve_params(task: TaskDef, params: dict[str, Any] | None) -> dict[str, Any]:
    """A prompt + answer task's parameters: its defaults and ``params``, every one typed and bounded
    (``COMMON_PARAMS`` and the task's own), unknown keys refused with a did-you-mean."""
    if task.metric == "dense":
        raise ConfigError("task", f"{task.name} is a dense task: make its documents with dense_documents")
    prefix = f"tasks.{task.name}"
    p = {**COMMON_DEFAULTS, **task.defaults, **check(prefix, {**COMMON_PARAMS, **task.params}, params)}
    if task.relate is not None:
        task.relate(p, prefix)
    return p


def build_sample(
    name: str,
    tokenizer: TokenizerLike,
    length: int,
    index: int,
    seed: int = 42,
    params: dict[str, Any] | None = None,
    space: str = "eval",
) -> Sample:
    """One sample of task ``name`` whose prompt + reserved answer tokens fit ``length`` exactly.

    ``reserved`` = max(generation length, longest likelihood candidate), so both scoring modes see the
    same prompt. The generation length is the source benchmark's, capped at ``length // 8`` (but
    never below the gold answer + 2 tokens) so that short budgets keep room for the haystack.
    """
    task = get_task(name)
    p = resolve_params(task, params)
    s = sample_seed(space, name, seed, index, length if space == "eval" else 0)
    rng = random.Random(s)
    draw = task.make(rng, index, length, tokenizer, p)
    enc = tokenizer.encode

    def cand_len(c: str) -> int:
        return len(enc(c)) if c else 0

    if draw.finalize is None:
        longest = max([cand_len(draw.target)] + [cand_len(c) for c in draw.distractors])
        answer_len = max([cand_len(" " + a) for a in draw.answers] + [cand_len(draw.target)])
    else:
        longest = answer_len = 6  # ids of at most 4 digits: " ID" + digits
    max_new = p.get("max_new_tokens") or min(task.max_new_tokens, max(answer_len + 2, length // 8))
    reserved = max(max_new, longest)
    budget = length - reserved
    cache: dict[int, tuple[str, dict, int]] = {}

    def count(n: int) -> int:
        if n not in cache:
            text, meta = draw.render(n)
            cache[n] = (text, meta, len(enc(text)))
        return cache[n][2]

    try:
        size = fit_size(count, budget, draw.min_size, draw.step)
    except ConfigError as e:
        raise ConfigError("length", f"task {name} at length {length}: {e}") from None
    prompt, meta, _ = cache[size]
    ids = enc(prompt)
    meta = {**draw.meta, **meta, "next_size_tokens": count(size + 1)}  # > budget: the fill is maximal
    answers, target, distractors = draw.answers, draw.target, draw.distractors
    if draw.finalize is not None:
        answers, target, distractors = draw.finalize(meta)
        if max(cand_len(c) for c in [target, *distractors]) > reserved:
            raise ConfigError("length", f"task {name}: a candidate is longer than the {reserved} reserved tokens")
    if "needle_char" in meta:
        meta["needle_distance"] = len(ids) - len(enc(prompt[: meta["needle_char"]]))
    if "qrels" in meta:
        meta["qrels"] = {str(k): int(v) for k, v in meta["qrels"].items()}
    return Sample(
        task=name,
        index=index,
        seed=s,
        length=length,
        prompt=prompt,
        prompt_ids=ids,
        answers=list(answers),
        target=target,
        distractors=list(distractors),
        metric=task.metric,
        max_new_tokens=max_new,
        reserved=reserved,
        haystack_size=size,
        meta=meta,
    )


def generate(
    name: str, tokenizer: TokenizerLike, length: int, n: int, seed: int = 42, params: dict[str, Any] | None = None
) -> list[Sample]:
    """``n`` evaluation samples of ``name`` at ``length`` (sample i is reproducible on its own)."""
    return [build_sample(name, tokenizer, length, i, seed, params) for i in range(n)]
