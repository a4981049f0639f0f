"""Synthetic long-context tasks, registered by name (lm-eval style: the runner knows only names).

``generate(name, tokenizer, length, n, seed)`` makes evaluation samples whose prompt plus reserved
answer tokens fill ``length`` exactly in the tokenizer's own tokens; ``training_documents`` makes
documents of the same formats from a disjoint seed space, for the pretraining / extension mixes.
Suites: ``ruler`` (RULER's 13 tasks, QA as one synthetic task), ``helmet`` (four base-model
categories), ``tiny`` (formats tiny models learn; docs/evaluation.md §6, docs/tiny-scale.md), ``mqar`` (the
dense tasks: multi-query associative recall, single-hop, rebound and chained, and key–value recall at
distances from a chosen law, scored by key–query distance).

*Dense* tasks (metric ``dense``: ``mqar``, ``mqar_rebind``, ``mqar_chain``, ``dense_kv``) are token
documents with many scored answers each, not prompt + answer samples: ``dense_documents`` makes them
for evaluation and ``training_documents`` yields them (ids + per-token target flags) for the training
mixes. Each belongs to a dense family (``dense.py``: ``DenseFamily``, one entry per family, defined in
the family's module: ``mqar.py``, ``dense_kv.py``).

Every task's parameters are one frozen, typed config (``params.py``: ``TaskConfig``; ``MqarConfig``,
the RULER, HELMET and ``kv_recall`` families next to their generators); ``task_config`` builds one
from a mapping, checked once, and the generators take it.

``registry.py`` holds the registry, ``catalogue.py`` registers the tasks and suites (importing this
package registers them), ``samples.py`` builds evaluation samples, ``documents.py`` dense and
training documents.
"""

from __future__ import annotations

from archpool.tasks.base import DEPTHS, Sample, sample_seed
from archpool.tasks.catalogue import HELMET_CATEGORIES, RULER_TASKS  # importing it registers every task and suite
from archpool.tasks.dense import DENSE_SUFFIXES, DenseFamily
from archpool.tasks.documents import (
    dense_documents,
    dense_params,
    reserved_tokens_error,
    task_configs,
    task_vocab,
    training_documents,
    training_documents_key,
)
from archpool.tasks.mqar import MqarConfig
from archpool.tasks.params import SampleConfig, TaskConfig
from archpool.tasks.registry import (
    SUITES,
    TASKS,
    TaskDef,
    dense_family,
    get_task,
    is_dense,
    register_dense_task,
    register_suite,
    register_task,
    suite_tasks,
    task_config,
    task_names,
)
from archpool.tasks.samples import build_sample, generate

__all__ = [
    "DENSE_SUFFIXES",
    "DEPTHS",
    "HELMET_CATEGORIES",
    "RULER_TASKS",
    "SUITES",
    "TASKS",
    "DenseFamily",
    "MqarConfig",
    "Sample",
    "SampleConfig",
    "TaskConfig",
    "TaskDef",
    "build_sample",
    "dense_documents",
    "dense_family",
    "dense_params",
    "generate",
    "get_task",
    "is_dense",
    "register_dense_task",
    "register_suite",
    "register_task",
    "reserved_tokens_error",
    "sample_seed",
    "suite_tasks",
    "task_config",
    "task_configs",
    "task_names",
    "task_vocab",
    "training_documents",
    "training_documents_key",
]
