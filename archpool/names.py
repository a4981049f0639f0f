"""Names shared across layers: the evaluation's suite names, and names that become one path
component (pool, run, extension, shard names), never a path.

Dependency-free on purpose: config loaders and CLIs import it before anything heavy.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from archpool.errors import ConfigError

MAX_NAME_BYTES = 255  # the longest file name common filesystems accept
# control (Cc), format (Cf: bidi overrides, zero-width joiners), line/paragraph separators, unassigned,
# private-use and surrogate code points: a name must read on screen as it is stored
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cn", "Co", "Cs"})


RESERVED_RECIPE_NAMES = ("base",)  # ``base_`` prefixes the pre-extension columns (archpool.columns)


COLUMN_SYNTAX = "@#[]"  # results.csv's column grammar: <metric>@<length>[<filter>]#<rung> (archpool.columns)


def check_recipe_name(field: str, value: str) -> str:
    """``value`` if it can name an extension recipe: a plain file name (its directory under
    ``RUN/extend/``) that is not reserved for the pre-extension columns and, as it prefixes column names,
    holds none of the column grammar's characters."""
    check_name(field, value, reserved=RESERVED_RECIPE_NAMES)
    return check_column_part(field, value)


def check_column_part(field: str, value: str) -> str:
    """``value`` if it can be part of a results.csv column name: none of ``@ # [ ]``, which the column
    grammar (``<metric>@<length>[<filter>]#<rung>``) reads as its own."""
    odd = next((c for c in value if c in COLUMN_SYNTAX), None)
    if odd is not None:
        raise ConfigError(
            field,
            f"{value!r} contains {odd!r}, which results.csv column names use (<metric>@<length>[<filter>]#<rung>); "
            "use a plain name such as 'ntk_2' (letters, digits, '-', '_', '.')",
        )
    return value


def check_name(field: str, value: object, reserved: Iterable[str] = ()) -> str:
    """``value`` if it is a plain, non-hidden file name (no separators, no ``..``, not absolute, not
    empty, not in ``reserved``); else ``ConfigError`` naming ``field`` and the rule broken."""
    if not isinstance(value, str):
        raise ConfigError(field, f"must be a string name, got {type(value).__name__} {value!r}")
    reason = name_problem(value)
    if reason is None and value in set(reserved):
        reason = f"is reserved (reserved: {', '.join(sorted(set(reserved)))})"
    if reason is not None:
        raise ConfigError(field, f"{value!r} {reason}; use a plain name such as 'run_1' (letters, digits, '-', '_', '.')")
    return value


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a plain file name (None when it is)."""
    if not value.strip():
        return "is empty"
    if value != value.strip():
        return "has leading or trailing whitespace"
    if value.startswith("/") or value.startswith("\\"):
        return "is an absolute path"
    if "/" in value or "\\" in value:
        return "contains a path separator"
    if ".." in value:
        return "contains '..'"
    if value.startswith("."):
        return "starts with '.' (hidden and temporary names are reserved)"
    odd = next((c for c in value if unicodedata.category(c) in INVISIBLE_CATEGORIES), None)
    if odd is not None:
        return f"contains a control character (U+{ord(odd):04X}; control, format and separator characters such as a right-to-left override are refused)"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


# The evaluation suites, in the order ``all`` runs them: the task suites (``archpool.tasks`` registers
# their tasks), then the metrics over held-out text (LongPPL, short-context perplexity).
TASK_SUITES = ("tiny", "mqar", "ruler", "helmet")
TEXT_SUITES = ("longppl", "short")
ALL_SUITES = "all"  # every suite above
SUITE_NAMES = (*TASK_SUITES, *TEXT_SUITES, ALL_SUITES)
# the task suites with one aggregate score each (a results.csv column); mqar's dense tasks have none
MODES = ("gen", "ll")  # task scoring: greedy generation, log-likelihood of the answer
SCORED_SUITES = tuple(s for s in TASK_SUITES if s != "mqar")
