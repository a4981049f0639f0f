"""Task parameters, typed and bounded: what each task's generator accepts, checked with the field named.

Every task declares its parameters as :class:`Param` specs (type, range, choices); ``check`` refuses an
unknown key (with a did-you-mean), a value of the wrong type (a bool is not an integer, a string not a
number) or out of its range. The upper bounds keep one document and its generator's memory sane
(``MAX_LENGTH`` is the longest context a model accepts, ``archpool.model.config.MAX_SEQ_LEN``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from archpool.config import check_keys
from archpool.errors import ConfigError

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
                or not all(isinstance(b, int) and not isinstance(b, bool) and self.lo <= b <= self.hi for b in value)
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


def check(prefix: str, specs: Mapping[str, Param], params: Any, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """``params`` (a mapping, ``None`` for none) checked against ``specs``: unknown keys refused (keys in
    ``extra`` pass unchecked, for the caller to check), every value typed and in range. Errors name
    ``<prefix>.<key>``."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ConfigError(prefix, f"a mapping of task parameters, got {params!r}")
    check_keys(params, [*specs, *extra], prefix, "task parameter")
    return {k: (v if k in extra else specs[k].check(v, f"{prefix}.{k}")) for k, v in params.items()}


def count(lo: int, hi: int, optional: bool = False) -> Param:
    return Param("int", lo, hi, optional=optional)
