"""Token documents of dense tasks (many scored answers each) and the documents of the training mixes."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from archpool.config import check_keys, rerooted
from archpool.errors import ConfigError
from archpool.tasks import mqar
from archpool.tasks.base import TokenizerLike, sample_seed
from archpool.tasks.params import MAX_LENGTH, Param, check
from archpool.tasks.registry import get_task, is_dense, task_names
from archpool.tasks.samples import build_sample, resolve_params, task_vocab

# scoring settings a dense task's params may carry next to its generator's
DENSE_SCORING = dict(buckets=Param("edges", 1, MAX_LENGTH, optional=True))  # distance bucket edges (tokens)
DENSE_SCORING_KEYS = tuple(DENSE_SCORING)
# the metrics of a dense task's score columns: ``<task>_<suffix>@<length>`` (archpool.columns.dense_columns)
DENSE_SUFFIXES = ("acc", "lp", "chain", "hop2_acc")


def dense_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """A dense task's generator parameters (defaults + overrides, every one typed and bounded, unknown
    keys refused; scoring keys checked, then dropped)."""
    task = get_task(name)
    if not is_dense(name):
        raise ConfigError("task", f"{name} is not a dense task: its samples come from build_sample")
    check(f"tasks.{name}", {**mqar.PARAMS, **DENSE_SCORING}, params)
    overrides = {k: v for k, v in (params or {}).items() if k not in DENSE_SCORING}
    try:
        return mqar.resolve({**task.defaults, **overrides})
    except ConfigError as e:
        raise ConfigError(f"tasks.{name}.{e.field.split('.', 1)[-1]}", e.message) from None


def task_params(name: str, params: Any) -> dict[str, Any]:
    """Task ``name``'s parameters: its defaults and ``params``, each typed and within its bounds, unknown
    keys refused with a did-you-mean (the one check of a task's parameters: pool sections, the
    training mixes and the eval stage call it). Errors name ``tasks.<name>.<key>``."""
    if params is not None and not isinstance(params, dict):
        raise ConfigError(f"tasks.{name}", f"a mapping of task parameters, got {params!r}")
    return dense_params(name, params) if is_dense(name) else resolve_params(get_task(name), params)


def reserved_tokens_error(name: str, params: dict[str, Any], task_tokens: int) -> str | None:
    """Why ``task_tokens`` reserved task tokens cannot hold dense task ``name`` with resolved ``params``
    (composite MQAR bindings need one token per key-value pair); None when they can, for a task that is
    not dense, or with no tokens reserved."""
    return mqar.vocab_error(params, task_tokens) if is_dense(name) else None


def check_task_params(value: Any, prefix: str, names: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """A mapping of task name -> parameters (``eval.task_params``, ``data.tasks.params``), every entry
    checked by :func:`task_params`: names registered tasks (one of ``names`` when given; a did-you-mean
    otherwise), each value a mapping of parameters that task takes. Errors name ``<prefix>.<task>.<key>``.
    Returns the mapping (null: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(prefix, f"a mapping of task name -> parameters, got {type(value).__name__}")
    allowed = list(names) if names is not None else task_names()
    check_keys(value, allowed, prefix, "task" if names is None else "task of this mix")
    for name, params in value.items():
        if not isinstance(params, dict):
            raise ConfigError(f"{prefix}.{name}", f"a mapping of task parameters, got {params!r}")
        try:
            task_params(name, params)
        except ConfigError as e:
            raise rerooted(e, f"tasks.{name}", f"{prefix}.{name}") from None
    return value


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
    resolved = {t: task_params(t, (params or {}).get(t)) for t in task_names}  # a bad parameter fails here, not as a miss
    dense = {t: p for t, p in resolved.items() if is_dense(t)}
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
