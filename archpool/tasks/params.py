"""Task parameters, typed and bounded: each task family's frozen config, checked with the field named.

A task family's parameters are the fields of one :class:`TaskConfig` dataclass; each field is declared
with :func:`param`, which holds its default and its bounds (a :class:`Param`: type, range, choices) in
one place. Building a config checks every field (a bool is not an integer, a string not a number, a
value out of its range is refused) and the rules across fields (``TaskConfig.validate``);
``with_overrides`` lays a mapping over a config (an unknown key is refused with a did-you-mean), with
errors named under the caller's prefix. The upper bounds keep one document and its generator's memory
sane (``MAX_LENGTH`` is the longest context a model accepts, ``archpool.model.config.MAX_SEQ_LEN``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from archpool.config import check_keys, rerooted
from archpool.errors import ConfigError

T = TypeVar("T", bound="TaskConfig")

MAX_LENGTH = 1 << 22  # tokens: archpool.model.config.MAX_SEQ_LEN (tasks import no model)


@dataclass(frozen=True)
class Param:
    """One task parameter: ``kind`` ``int`` / ``float`` / ``bool`` / ``choice`` / ``texts`` (a list of
    strings) / ``edges`` (a non-empty list of integers); ``lo`` .. ``hi`` inclusive for numbers and
    edges; ``choices`` for a choice; ``null`` allowed with ``optional``."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False

    def check(self, value: Any, field: str) -> Any:
        """``value`` if it is this parameter's type and within its range, else a ``ConfigError`` at ``field``."""
        if value is None and self.optional:
            return None
        tail = " or null" if self.optional else ""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(field, f"must be true or false{tail}, got {value!r}")
            return value
        if self.kind == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise ConfigError(field, f"unknown value {value!r}; allowed: {', '.join(self.choices)}{tail}")
            return value
        if self.kind == "edges":
            if (
                not isinstance(value, list)
                or not value
                or not all(
                    isinstance(b, int)
                    and not isinstance(b, bool)
                    and (self.lo is None or self.lo <= b)
                    and (self.hi is None or b <= self.hi)
                    for b in value
                )
            ):
                raise ConfigError(
                    field,
                    f"a non-empty list of positive integers up to {_plain(self.hi)} (distance bucket edges){tail}, got {value!r}",
                )
            return value
        if self.kind == "texts":
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise ConfigError(field, f"a list of texts{tail}, got {type(value).__name__}")
            return value
        number = (int,) if self.kind == "int" else (int, float)
        ok = isinstance(value, number) and not isinstance(value, bool)
        if ok and self.kind == "float":
            ok = math.isfinite(value)
        if not ok or (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            what = "an integer" if self.kind == "int" else "a number"
            raise ConfigError(field, f"must be {what} >= {_plain(self.lo)} and <= {_plain(self.hi)}{tail}, got {value!r}")
        return value


def _plain(x: float | None) -> str:
    return "-" if x is None else str(int(x)) if float(x).is_integer() else repr(x)


def count(lo: int, hi: int, optional: bool = False) -> Param:
    return Param("int", lo, hi, optional=optional)


def param(default: Any, spec: Param, scoring: bool = False) -> Any:
    """A task config field: its ``default`` and its bounds ``spec`` (the one home of both); ``scoring``
    for a setting the scorer reads, not the generator (a dense task's distance buckets)."""
    return field(default=default, metadata={"param": spec, "scoring": scoring})


@dataclass(frozen=True)
class TaskConfig:
    """A task family's parameters: every field declared with :func:`param`, checked when the config is
    built (errors named ``<PATH>.<field>``; ``from_dict`` and ``with_overrides`` name them under the
    caller's prefix)."""

    PATH: ClassVar[str] = "task"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            f.metadata["param"].check(getattr(self, f.name), f"{self.PATH}.{f.name}")
        self.validate()

    def validate(self) -> None:
        """Rules across fields; a ``ConfigError`` naming the field under ``PATH``."""

    @classmethod
    def specs(cls) -> dict[str, Param]:
        """Every field's bounds, in field order."""
        return {f.name: f.metadata["param"] for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls: type[T], mapping: Any, prefix: str | None = None) -> T:
        """The family's defaults with ``mapping`` laid over them (see :meth:`with_overrides`)."""
        return cls().with_overrides(mapping, cls.PATH if prefix is None else prefix)

    def with_overrides(self: T, mapping: Any, prefix: str) -> T:
        """This config with ``mapping``'s values (``None``: none) laid over it: unknown keys refused with
        a did-you-mean, every value typed and bounded, the rules across fields checked; errors name
        ``<prefix>.<key>``."""
        if mapping is None:
            return self
        if not isinstance(mapping, Mapping):
            raise ConfigError(prefix, f"a mapping of task parameters, got {mapping!r}")
        check_keys(mapping, self.specs(), prefix, "task parameter")
        try:
            return dataclasses.replace(self, **mapping)
        except ConfigError as e:
            raise rerooted(e, self.PATH, prefix) from None

    def replace(self: T, **changes: Any) -> T:
        """This config with ``changes`` (checked as :meth:`with_overrides` checks, named under ``PATH``)."""
        return self.with_overrides(changes, self.PATH)

    def to_dict(self) -> dict[str, Any]:
        """Every field, in field order: ``from_dict(c.to_dict()) == c``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def generator_params(self) -> dict[str, Any]:
        """The fields the generator reads (scoring settings left out), in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.metadata["scoring"]}

    def reserved_tokens_error(self, task_tokens: int) -> str | None:
        """Why ``task_tokens`` reserved task tokens cannot hold this task's vocabulary; None when they can."""
        return None


@dataclass(frozen=True)
class SampleConfig(TaskConfig):
    """What every prompt + answer task takes (a task without parameters of its own uses it as is)."""

    n_choices: int = param(10, count(2, 100))  # likelihood candidates: the gold and n_choices - 1 distractors
    # held-out text for corpus haystacks (the eval stage passes the store's)
    haystack_texts: list[str] | None = param(None, Param("texts", optional=True))  # noqa: RUF009
    # generation length (default: the task's, capped by the length)
    max_new_tokens: int | None = param(None, count(1, 4096, optional=True))
    step: int = param(1, count(1, MAX_LENGTH))  # haystack units per search step


SHOTS = count(0, 16, optional=True)  # demonstrations before the question (null: the length decides)
