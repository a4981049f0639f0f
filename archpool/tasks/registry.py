"""The task registry: every task by name (lm-eval style: the runner knows only names), and the
task suites that group them (``archpool.names.TASK_SUITES``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archpool.errors import ConfigError
from archpool.names import TASK_SUITES
from archpool.tasks.params import TaskConfig


@dataclass(frozen=True)
class TaskDef:
    name: str
    make: Callable[..., Any]  # (rng, index, length, tokenizer, config) -> Draw; a dense task's mqar.make_document
    metric: str  # match_all | match_part | subem | ndcg | em | first_word
    max_new_tokens: int  # the source benchmark's generation length (capped at short lengths)
    config: TaskConfig  # the task's defaults, an instance of its family's config class
    category: str = ""  # HELMET category, where the task belongs to one
    description: str = ""

    def config_or_default(self, config: TaskConfig | None) -> TaskConfig:
        """``config`` (``None``: the task's defaults), which must be of the task's config class."""
        if config is None:
            return self.config
        if not isinstance(config, type(self.config)):
            raise TypeError(f"task {self.name} takes a {type(self.config).__name__}, got {type(config).__name__}")
        return config


TASKS: dict[str, TaskDef] = {}
# the tasks of each suite, in the order the catalogue registers the suites
SUITES: dict[str, list[str]] = {}


def register_task(task: TaskDef) -> TaskDef:
    if task.name in TASKS:
        raise ConfigError("task", f"task {task.name!r} is registered twice")
    TASKS[task.name] = task
    return task


def register_suite(name: str, tasks: list[str]) -> list[str]:
    """Name the tasks of suite ``name`` (one of ``TASK_SUITES``); every task must be registered."""
    if name not in TASK_SUITES:
        raise ConfigError("suite", f"unknown task suite {name!r}; allowed: {', '.join(TASK_SUITES)}")
    if name in SUITES:
        raise ConfigError("suite", f"suite {name!r} is registered twice")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError("suite", f"suite {name!r} names unregistered tasks: {', '.join(unknown)}")
    SUITES[name] = tasks
    return tasks


def get_task(name: str) -> TaskDef:
    if name not in TASKS:
        raise ConfigError("task", f"unknown task {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def task_config(name: str, params: Any = None, prefix: str | None = None) -> TaskConfig:
    """Task ``name``'s typed config: its defaults with the mapping ``params`` laid over them (``None``:
    the defaults), every value typed and within its bounds, unknown keys refused with a did-you-mean.
    Errors name ``<prefix>.<key>`` (default prefix ``tasks.<name>``)."""
    return get_task(name).config.with_overrides(params, f"tasks.{name}" if prefix is None else prefix)


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
