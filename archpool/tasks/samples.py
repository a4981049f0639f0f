"""Evaluation samples of prompt + answer tasks: prompts that fill a length exactly in the tokenizer's
own tokens, generated from a task's typed config."""

from __future__ import annotations

import random
from typing import Any, cast

from archpool.errors import ConfigError
from archpool.tasks.base import Draw, Sample, TokenizerLike, fit_size, sample_seed
from archpool.tasks.params import SampleConfig
from archpool.tasks.registry import get_task


def build_sample(
    name: str,
    tokenizer: TokenizerLike,
    length: int,
    index: int,
    seed: int = 42,
    config: SampleConfig | None = None,
    space: str = "eval",
) -> Sample:
    """One sample of task ``name`` whose prompt + reserved answer tokens fit ``length`` exactly.

    ``reserved`` = max(generation length, longest likelihood candidate), so both scoring modes see the
    same prompt. The generation length is the source benchmark's, capped at ``length // 8`` (but
    never below the gold answer + 2 tokens) so that short budgets keep room for the haystack.
    ``config``: the task's typed config (default: its defaults; ``archpool.tasks.task_config``).
    """
    task = get_task(name)
    if task.metric == "dense":
        raise ConfigError("task", f"{name} is a dense task: make its documents with dense_documents")
    p = cast(SampleConfig, task.config_or_default(config))  # a task that is not dense has a SampleConfig
    s = sample_seed(space, name, seed, index, length if space == "eval" else 0)
    rng = random.Random(s)
    draw: Draw = task.make(rng, index, length, tokenizer, p)
    enc = tokenizer.encode

    def cand_len(c: str) -> int:
        return len(enc(c)) if c else 0

    if draw.finalize is None:
        longest = max([cand_len(draw.target)] + [cand_len(c) for c in draw.distractors])
        answer_len = max([cand_len(" " + a) for a in draw.answers] + [cand_len(draw.target)])
    else:
        longest = answer_len = 6  # ids of at most 4 digits: " ID" + digits
    max_new = p.max_new_tokens or min(task.max_new_tokens, max(answer_len + 2, length // 8))
    reserved = max(max_new, longest)
    budget = length - reserved
    cache: dict[int, tuple[str, dict[str, Any], int]] = {}

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
    name: str, tokenizer: TokenizerLike, length: int, n: int, seed: int = 42, config: SampleConfig | None = None
) -> list[Sample]:
    """``n`` evaluation samples of ``name`` at ``length`` (sample i is reproducible on its own)."""
    return [build_sample(name, tokenizer, length, i, seed, config) for i in range(n)]
