"""Synthetic long-context tasks, registered by name (lm-eval style: the runner knows only names).

``generate(name, tokenizer, length, n, seed)`` makes evaluation samples whose prompt plus reserved
answer tokens fill ``length`` exactly in the tokenizer's own tokens; ``training_documents`` makes
documents of the same formats from a disjoint seed space, for the pretraining / extension mixes.
Suites: ``ruler`` (RULER's 13 tasks, QA as one synthetic task), ``helmet`` (four base-model
categories), ``tiny`` (formats tiny models learn; docs/evaluation.md §6, docs/tiny-scale.md), ``mqar`` (dense
multi-query associative recall, single-hop and chained, scored by key–query distance).

*Dense* tasks (metric ``dense``: ``mqar``, ``mqar_chain``) are token documents with many scored
answers each, not prompt + answer samples: ``dense_documents`` makes them for evaluation and
``training_documents`` yields them (ids + per-token target flags) for the training mixes.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.errors import ConfigError
from archpool.tasks import helmet, mqar, recall, ruler
from archpool.tasks.base import DEPTHS, Draw, Sample, TokenizerLike, fit_size, sample_seed

__all__ = [
    "DEPTHS",
    "HELMET_CATEGORIES",
    "SUITES",
    "TASKS",
    "Sample",
    "TaskDef",
    "build_sample",
    "dense_documents",
    "dense_params",
    "generate",
    "get_task",
    "is_dense",
    "register_task",
    "sample_seed",
    "suite_tasks",
    "task_names",
    "task_vocab",
    "training_documents",
]


@dataclass(frozen=True)
class TaskDef:
    name: str
    make: Callable[..., Draw]  # (rng, index, length, tokenizer, params) -> Draw
    metric: str  # match_all | match_part | subem | ndcg | em | first_word
    max_new_tokens: int  # the source benchmark's generation length (capped at short lengths)
    defaults: dict[str, Any] = field(default_factory=dict)
    category: str = ""  # HELMET category, where the task belongs to one
    description: str = ""


TASKS: dict[str, TaskDef] = {}


def register_task(task: TaskDef) -> TaskDef:
    if task.name in TASKS:
        raise ConfigError("task", f"task {task.name!r} is registered twice")
    TASKS[task.name] = task
    return task


def _niah(name, haystack, k, v, q, kt="words", vt="numbers", desc=""):
    register_task(
        TaskDef(
            name,
            ruler.niah,
            "match_all",
            128,
            dict(haystack=haystack, key_type=kt, value_type=vt, num_k=k, num_v=v, num_q=q),
            description=desc,
        )
    )


_niah("niah_single_1", "noise", 1, 1, 1, desc="one word-key/number needle in noise sentences")
_niah("niah_single_2", "corpus", 1, 1, 1, desc="one needle in held-out text")
_niah("niah_single_3", "corpus", 1, 1, 1, vt="uuids", desc="one uuid-valued needle in held-out text")
_niah("niah_multikey_1", "corpus", 4, 1, 1, desc="needle + 3 distractor needles in held-out text")
_niah("niah_multikey_2", "needle", 1, 1, 1, desc="needle in a haystack of distractor needles")
_niah("niah_multikey_3", "needle", 1, 1, 1, kt="uuids", vt="uuids", desc="uuid needle among uuid distractor needles")
_niah("niah_multivalue", "corpus", 1, 4, 1, desc="one key with 4 values")
_niah("niah_multiquery", "corpus", 4, 1, 4, desc="4 keys queried at once")
register_task(
    TaskDef(
        "vt",
        ruler.variable_tracking,
        "match_all",
        30,
        dict(num_hops=4, name_len=5, shots=None),
        description="variable tracking: one chain of 4 hops in noise",
    )
)
register_task(
    TaskDef(
        "cwe",
        ruler.common_words,
        "match_all",
        120,
        dict(num_cw=None, freq_cw=None, freq_ucw=None, shots=None),
        description="common-words extraction from a numbered list",
    )
)
register_task(
    TaskDef("fwe", ruler.freq_words, "match_all", 50, dict(alpha=2.0), description="frequent coded-words extraction (Zipf)")
)
register_task(TaskDef("qa", ruler.doc_qa, "match_part", 32, {}, description="document QA over synthetic fact passages"))
register_task(TaskDef("json_kv", helmet.json_kv, "subem", 64, dict(shots=None), "recall", "JSON uuid key-value retrieval"))
register_task(TaskDef("rag", helmet.rag, "subem", 20, dict(shots=None), "rag", "fact-passage RAG with distractor passages"))
register_task(TaskDef("rerank", helmet.rerank, "ndcg", 100, {}, "rerank", "passage re-ranking, graded relevance, NDCG@10"))
register_task(TaskDef("icl", helmet.icl, "em", 8, dict(n_labels=6), "icl", "many-shot ICL, permuted integer labels"))
register_task(
    TaskDef(
        "kv_recall",
        recall.kv_recall,
        "first_word",
        4,
        dict(n_pairs=4, n_queries=3, value_type="digits", haystack="noise"),
        description="MQAR-style recall with a small task vocabulary (tiny models)",
    )
)

register_task(
    TaskDef(
        "mqar",
        mqar.make_document,
        "dense",
        1,
        dict(mqar.DEFAULT_PARAMS),
        description="MQAR: many key-value bindings, each queried once at a uniform distance; every answer scored",
    )
)
register_task(
    TaskDef(
        "mqar_rebind",
        mqar.make_document,
        "dense",
        1,
        dict(mqar.DEFAULT_PARAMS, rebind=True),
        description="MQAR whose keys are bound again after each query: answers grow with length, earlier bindings are hard distractors",
    )
)
register_task(
    TaskDef(
        "mqar_chain",
        mqar.make_document,
        "dense",
        2,
        dict(mqar.DEFAULT_PARAMS, chains=1.0),
        description="two-hop MQAR chains (> k v w): both hops retrieved, min_distance forces them beyond a window",
    )
)

RULER_TASKS = [
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
    "vt",
    "cwe",
    "fwe",
    "qa",
]
HELMET_CATEGORIES: dict[str, list[str]] = {
    "recall": ["niah_multikey_2", "niah_multikey_3", "niah_multivalue", "json_kv"],
    "rag": ["rag"],
    "rerank": ["rerank"],
    "icl": ["icl"],
}
SUITES: dict[str, list[str]] = {
    "ruler": RULER_TASKS,
    "helmet": sorted({t for ts in HELMET_CATEGORIES.values() for t in ts}),
    "tiny": ["kv_recall", "niah_single_1", "icl"],
    "mqar": ["mqar", "mqar_rebind", "mqar_chain"],
}
COMMON_DEFAULTS = dict(n_choices=10, haystack_texts=None)


def get_task(name: str) -> TaskDef:
    if name not in TASKS:
        raise ConfigError("task", f"unknown task {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def task_names() -> list[str]:
    return list(TASKS)


def suite_tasks(suite: str) -> list[str]:
    if suite in SUITES:
        return list(SUITES[suite])
    if suite in TASKS:
        return [suite]
    raise ConfigError("suite", f"unknown suite or task {suite!r}; allowed: {', '.join([*SUITES, *TASKS])}")


def is_dense(name: str) -> bool:
    """A dense task: token documents with many scored answers (``mqar``), not prompt + answer."""
    return get_task(name).metric == "dense"


# scoring settings a dense task's params may carry next to its generator's
DENSE_SCORING_KEYS = ("buckets",)


def dense_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """A dense task's generator parameters (defaults + overrides, validated; scoring keys dropped)."""
    task = get_task(name)
    overrides = {k: v for k, v in (params or {}).items() if k not in DENSE_SCORING_KEYS}
    try:
        return mqar.resolve({**task.defaults, **overrides})
    except ConfigError as e:
        raise ConfigError(f"tasks.{name}.{e.field.split('.', 1)[-1]}", str(e).split(": ", 1)[-1]) from None


_VOCABS: dict[tuple[Any, int, int], mqar.TaskVocab] = {}


def task_vocab(tokenizer: TokenizerLike, p: dict[str, Any]) -> mqar.TaskVocab:
    """The tokenizer's MQAR vocabularies for ``p``, cached by the tokenizer's content hash (by the
    object for tokenizers without one, which the cache then keeps alive so its id is never reused)."""
    ident = getattr(tokenizer, "hash", None) or tokenizer
    key = (ident, int(p["n_keys"]), int(p["n_values"]))
    if key not in _VOCABS:
        _VOCABS[key] = mqar.tokenizer_vocab(tokenizer, key[1], key[2])
    return _VOCABS[key]


def dense_documents(
    name: str,
    tokenizer: TokenizerLike,
    length: int,
    n: int,
    seed: int = 42,
    params: dict[str, Any] | None = None,
    space: str = "eval",
) -> list[mqar.Document]:
    """``n`` documents of dense task ``name``, each exactly ``length`` tokens (document i is
    reproducible on its own, from the ``space`` seed namespace)."""
    p = dense_params(name, params)
    vocab = task_vocab(tokenizer, p)
    return [mqar.make_document(random.Random(sample_seed(space, name, seed, i, length)), length, vocab, p) for i in range(n)]


def resolve_params(task: TaskDef, params: dict[str, Any] | None) -> dict[str, Any]:
    if task.metric == "dense":
        raise ConfigError("task", f"{task.name} is a dense task: make its documents with dense_documents")
    p = {**COMMON_DEFAULTS, **task.defaults}
    for k, v in (params or {}).items():
        if k not in p and k not in ("max_new_tokens", "step"):
            raise ConfigError(
                f"tasks.{task.name}.{k}", f"unknown task parameter; allowed: {', '.join(sorted(p))}, max_new_tokens"
            )
        p[k] = v
    if p["n_choices"] < 2:
        raise ConfigError(f"tasks.{task.name}.n_choices", f"need at least 2 candidates, got {p['n_choices']}")
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


def training_documents(
    task_names: Sequence[str],
    n: int | None,
    seed: int,
    length_range: tuple[int, int],
    tokenizer: TokenizerLike,
    params: dict[str, dict[str, Any]] | None = None,
    start: int = 0,
) -> Iterator[str | mqar.Document]:
    """Documents in the tasks' formats (prompt + gold answer) for the training mixes; dense tasks
    yield token documents (``ids`` + per-token ``scored`` flags: only their answers are targets).

    Seeds come from the ``train`` space (``sample_seed``), disjoint from evaluation's. Each document's
    length is drawn uniformly in ``length_range`` tokens; ``n=None`` yields forever. Lengths too short
    for a task are skipped (not an error) so one range serves a mix of tasks. ``start`` skips the
    first ``start`` documents (documents ``start`` … ``n - 1`` follow); when every task is dense that
    costs only the length draws (each dense document has its own seed), else they are built and dropped.
    """
    if not task_names:
        raise ConfigError("tasks", "training_documents needs at least one task")
    lo, hi = length_range
    if not 0 < lo <= hi:
        raise ConfigError("length_range", f"need 0 < lo <= hi, got {length_range}")
    for t in task_names:
        get_task(t)
    dense = {t: dense_params(t, (params or {}).get(t)) for t in task_names if is_dense(t)}
    rng = random.Random(sample_seed("train", "|".join(task_names), seed, -1))
    made, i, misses = 0, 0, 0
    all_dense = len(dense) == len(task_names)
    while n is None or made < n:
        name = task_names[i % len(task_names)] if len(task_names) > 1 else task_names[0]
        length = rng.randint(lo, hi)
        if made < start and all_dense:
            i += 1
            made += 1
            continue
        if name in dense:
            p = dense[name]
            doc_rng = random.Random(sample_seed("train", name, seed, i, 0))
            i += 1
            made += 1
            doc = mqar.make_document(doc_rng, max(length, 8), task_vocab(tokenizer, p), p)
            if made > start:
                yield doc
            continue
        try:
            s = build_sample(name, tokenizer, length, i, seed, (params or {}).get(name), space="train")
        except ConfigError:
            misses += 1
            if misses > 1000 and made == 0:
                raise ConfigError("length_range", f"{length_range} is too short for tasks {list(task_names)}") from None
            i += 1
            continue
        i += 1
        made += 1
        if made > start:
            yield s.prompt + s.target


def training_documents_key(
    task_names: Sequence[str], length_range: tuple[int, int], params: dict[str, dict[str, Any]] | None = None
) -> str:
    """What ``training_documents`` output depends on besides seed and tokenizer: the tasks, their
    parameters and lengths, and the task code itself (every ``archpool/tasks`` source file), so
    that editing a generator invalidates documents cached from it."""
    code = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        code.update(path.name.encode() + b"\0" + path.read_bytes())
    spec = {"tasks": list(task_names), "length_range": list(length_range), "params": params or {}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=repr).encode() + code.digest()).hexdigest()
