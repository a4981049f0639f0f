"""The task registry: every task by name (lm-eval style: the runner knows only names), and the
task suites that group them (``archpool.names.TASK_SUITES``). A dense task carries its family
(``archpool.tasks.dense.DenseFamily``): :func:`dense_family` by task name, :func:`config_family` by config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from archpool.errors import ConfigError
from archpool.names import TASK_SUITES
from archpool.tasks.dense import DenseFamily
from archpool.tasks.params import TaskConfig

C = TypeVar("C", bound=TaskConfig)


@dataclass(frozen=True)
class TaskDef:
    name: str
    make: Callable[..., Any]  # (rng, index, length, tokenizer, config) -> Draw; a dense task's family.make_document
    metric: str  # match_all | match_part | subem | ndcg | em | first_word | dense
    max_new_tokens: int  # the source benchmark's generation length (capped at short lengths)
    config: TaskConfig  # the task's defaults, an instance of its family's config class
    category: str = ""  # HELMET category, where the task belongs to one
    description: str = ""
    family: DenseFamily[Any, Any] | None = None  # a dense task's family (archpool.tasks.dense), None otherwise

    def __post_init__(self) -> None:
        if (self.metric == "dense") != (self.family is not None):
            raise ConfigError("task", f"task {self.name!r}: a dense task (metric dense) and only one has a dense family")
        if self.family is not None and not isinstance(self.config, self.family.config):
            raise ConfigError("task", f"task {self.name!r}: family {self.family.name} takes a {self.family.config.__name__}")

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


def register_dense_task(family: DenseFamily[C, Any], name: str, config: C, description: str, max_new_tokens: int = 1) -> TaskDef:
    """Register dense task ``name`` of ``family`` with the defaults ``config`` (metric ``dense``)."""
    return register_task(
        TaskDef(name, family.make_document, "dense", max_new_tokens, config, description=description, family=family)
    )


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


def dense_family(name: str) -> DenseFamily[Any, Any]:
    """The family of dense task ``name`` (``archpool.tasks.dense``); a ``ConfigError`` for a task that is not dense."""
    family = get_task(name).family
    if family is None:
        raise ConfigError("task", f"{name} is not a dense task: its samples come from build_sample")
    return family


def config_family(config: TaskConfig) -> DenseFamily[Any, Any]:
    """The dense family whose config class ``config`` is (a ``ConfigError`` for any other config)."""
    for t in TASKS.values():
        if t.family is not None and isinstance(config, t.family.config):
            return t.family
    raise ConfigError("task", f"{type(config).__name__} is the config of no dense task family")
