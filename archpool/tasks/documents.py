"""Token documents of dense tasks (many scored answers each) and the documents of the training mixes."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from archpool.config import check_keys
from archpool.errors import ConfigError
from archpool.tasks.base import TokenizerLike, sample_seed
from archpool.tasks.dense import DenseFamily, Document
from archpool.tasks.params import SampleConfig, TaskConfig
from archpool.tasks.registry import config_family, dense_family, get_task, task_config, task_names
from archpool.tasks.samples import build_sample

_VOCABS: dict[tuple[Any, ...], Any] = {}


def task_vocab(tokenizer: TokenizerLike, config: TaskConfig) -> Any:
    """The tokenizer's vocabulary for dense config ``config`` (its family's ``vocab``), cached by the
    tokenizer's content hash (by the object for tokenizers without one, which the cache then keeps
    alive so its id is never reused) and the family's ``vocab_key``."""
    family = config_family(config)
    ident = getattr(tokenizer, "hash", None) or tokenizer
    key = (ident, family.vocab, *family.vocab_key(config))
    if key not in _VOCABS:
        _VOCABS[key] = family.vocab(tokenizer, config)
    return _VOCABS[key]


def task_configs(
    value: Any, prefix: str, names: Sequence[str] | None = None, base: Mapping[str, TaskConfig] | None = None
) -> dict[str, TaskConfig]:
    """The typed configs of a mapping of task name -> parameters (``eval.task_params``,
    ``data.tasks.params``): names registered tasks (one of ``names`` when given; a did-you-mean
    otherwise), each value a mapping of parameters that task takes, laid over the task's config in
    ``base`` (default: its defaults; :func:`task_config`). Errors name ``<prefix>.<task>.<key>``.
    Null: none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(prefix, f"a mapping of task name -> parameters, got {type(value).__name__}")
    allowed = list(names) if names is not None else task_names()
    check_keys(value, allowed, prefix, "task" if names is None else "task of this mix")
    configs = {}
    for name, params in value.items():
        if not isinstance(params, dict):
            raise ConfigError(f"{prefix}.{name}", f"a mapping of task parameters, got {params!r}")
        under = (base or {}).get(name) or get_task(name).config
        configs[name] = under.with_overrides(params, f"{prefix}.{name}")
    return configs


def dense_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """A dense task's generator parameters as a mapping (its typed config's, scoring settings left
    out: what a dense result records), from the mapping ``params`` (:func:`task_config`)."""
    dense_family(name)
    return task_config(name, params).generator_params()


def reserved_tokens_error(name: str, params: dict[str, Any] | None, task_tokens: int) -> str | None:
    """Why ``task_tokens`` reserved task tokens cannot hold task ``name`` with the mapping ``params``
    (composite MQAR bindings need one token per key-value pair); None when they can, for a task that
    is not dense, or with no tokens reserved."""
    return task_config(name, params).reserved_tokens_error(task_tokens)


def dense_documents(
    name: str,
    tokenizer: TokenizerLike,
    length: int,
    n: int,
    seed: int = 42,
    config: TaskConfig | None = None,
    space: str = "eval",
) -> list[Document]:
    """``n`` documents of dense task ``name`` (``config``: its typed config, default its defaults), each
    exactly ``length`` tokens (document i is reproducible on its own, from the ``space`` seed namespace)."""
    family = dense_family(name)
    p = get_task(name).config_or_default(config)
    vocab = task_vocab(tokenizer, p)
    return [family.make_document(random.Random(sample_seed(space, name, seed, i, length)), length, vocab, p) for i in range(n)]


def training_documents(
    task_names: Sequence[str],
    n: int | None,
    seed: int,
    length_range: tuple[int, int],
    tokenizer: TokenizerLike,
    configs: Mapping[str, TaskConfig] | None = None,
    start: int = 0,
) -> Iterator[str | Document]:
    """Documents in the tasks' formats (prompt + gold answer) for the training mixes; dense tasks
    yield token documents (``ids`` + per-token ``scored`` flags: only their answers are targets).
    ``configs``: typed configs by task name (a task not named: its defaults).

    Seeds come from the ``train`` space (``sample_seed``), disjoint from evaluation's. Each document's
    length is drawn uniformly in ``length_range`` tokens; ``n=None`` yields forever. Lengths too short
    for a prompt task are skipped (not an error) so one range serves a mix of tasks; a dense document is
    made at least its family's ``min_length`` long. ``start`` skips the
    first ``start`` documents (documents ``start`` … ``n - 1`` follow); when every task is dense that
    costs only the length draws (each dense document has its own seed), else they are built and dropped.
    """
    if not task_names:
        raise ConfigError("tasks", "training_documents needs at least one task")
    lo, hi = length_range
    if not 0 < lo <= hi:
        raise ConfigError("length_range", f"need 0 < lo <= hi, got {length_range}")
    resolved = {t: get_task(t).config_or_default((configs or {}).get(t)) for t in task_names}
    dense: dict[str, tuple[DenseFamily[Any, Any], TaskConfig]] = {
        t: (family, p) for t, p in resolved.items() if (family := get_task(t).family) is not None
    }
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
            family, p = dense[name]
            doc_rng = random.Random(sample_seed("train", name, seed, i, 0))
            i += 1
            made += 1
            doc = family.make_document(doc_rng, max(length, family.min_length(p)), task_vocab(tokenizer, p), p)
            if made > start:
                yield doc
            continue
        try:
            s = build_sample(name, tokenizer, length, i, seed, cast(SampleConfig, resolved[name]), space="train")
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
