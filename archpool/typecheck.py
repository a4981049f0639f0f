"""Strict types for config dataclasses: every field's value must be of its annotated type.

No truthy strings for booleans (``tie_embeddings: "no"`` is an error, not ``True``), no floats or
booleans for integers, no numbers for strings. One deliberate acceptance: a float field takes a
numeric string such as ``"3e-4"``, because YAML 1.1 (PyYAML) reads ``3e-4`` without a dot as a string.
Numbers are bounded: a float field refuses NaN and infinity (``1e309`` overflows to infinity), an
integer field refuses values outside the signed 64-bit range. A ``Literal[...]`` field takes exactly one
of its values.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any, cast

from archpool.errors import ConfigError

MAX_INT = 2**63 - 1  # every integer field fits a signed 64-bit integer (seeds, sizes, counts)
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (a JSON or YAML number as read back)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_types(obj: Any, prefix: str = "") -> None:
    """Check (and where deliberate, convert) every field of the dataclass ``obj`` in place."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        name = f"{prefix}.{f.name}" if prefix else f.name
        value = getattr(obj, f.name)
        checked = _check(value, hints[f.name], name)
        if checked is not value:
            object.__setattr__(obj, f.name, checked)


def describe(tp: Any) -> str:
    """A type as a user reads it: ``an integer or null``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    names = {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        type(None): "null",
        list: "a list",
        dict: "a mapping",
        tuple: "a list",
    }
    if tp in names:
        return names[tp]
    if origin in names:
        return names[origin]
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _finite(value: float, name: str) -> float:
    """``value`` unless it is NaN or infinite (``1e309`` reads as infinity): no config number is either."""
    try:
        ok = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        ok = False
    if not ok:
        raise ConfigError(name, f"must be a finite number, got {value!r}")
    return value


def _fail(value: Any, tp: Any, name: str) -> typing.NoReturn:
    raise ConfigError(name, f"expected {describe(tp)}, got {value!r} ({type(value).__name__})")


def _choice(value: Any, choices: tuple[Any, ...], name: str) -> Any:
    """``value`` if it is one of the ``Literal`` choices (``True`` is not ``1``), else an error that
    lists them: ``schedule: unknown schedule 'step'; allowed: cosine, linear, wsd, constant``."""
    if any(type(value) is type(c) and value == c for c in choices):
        return value
    noun = re.sub(r"\[\d+\]$", "", name).rsplit(".", 1)[-1] or "value"
    raise ConfigError(name, f"unknown {noun} {value!r}; allowed: {', '.join(str(c) for c in choices)}")


def _check(value: Any, tp: Any, name: str) -> Any:
    """``value`` checked against ``tp`` by the checker of its kind (``Literal``, union, scalar,
    container); a dataclass value is checked field by field, any other type is taken as it is."""
    if tp is Any:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    checker = _CHECKERS.get(origin if origin is not None else tp)
    if checker is not None:
        return checker(value, tp, args, name)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, cast(type, tp)):
            _fail(value, tp, name)
        check_types(value, name)
    return value


def _check_literal(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    return _choice(value, args, name)


def _check_union(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    """The first member type ``value`` passes; null only where the union has ``None``."""
    if value is None and type(None) in args:
        return None
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _check(value, arg, name)
        except ConfigError:
            continue
    _fail(value, tp, name)


def _check_bool(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    return value if isinstance(value, bool) else _fail(value, tp, name)


def _check_int(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(value, tp, name)
    if abs(value) > MAX_INT:
        raise ConfigError(name, f"{value} is outside the 64-bit integer range (|value| <= {MAX_INT})")
    return value


def _check_float(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _finite(value, name)
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        return _finite(float(value), name)
    _fail(value, tp, name)


def _check_str(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    return value if isinstance(value, str) else _fail(value, tp, name)


def _check_list(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    if not isinstance(value, list):
        _fail(value, tp, name)
    return [_check(v, args[0], f"{name}[{i}]") for i, v in enumerate(value)] if args else value


def _check_tuple(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    """A list or tuple, returned as a tuple: ``tuple[int, ...]`` of any length, ``tuple[int, str]`` of exactly two."""
    if not isinstance(value, (list, tuple)) or (args and args[-1] is not Ellipsis and len(value) != len(args)):
        _fail(value, tp, name)
    if args and args[-1] is Ellipsis:
        return tuple(_check(v, args[0], f"{name}[{i}]") for i, v in enumerate(value))
    if args:
        return tuple(_check(v, a, f"{name}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    return tuple(value)


def _check_dict(value: Any, tp: Any, args: tuple[Any, ...], name: str) -> Any:
    return value if isinstance(value, dict) else _fail(value, tp, name)


# a type's checker, by its origin (``list[int]`` -> list) or, for a plain type, by the type itself
_CHECKERS: dict[Any, typing.Callable[[Any, Any, tuple[Any, ...], str], Any]] = {
    typing.Literal: _check_literal,
    typing.Union: _check_union,
    types.UnionType: _check_union,
    bool: _check_bool,
    int: _check_int,
    float: _check_float,
    str: _check_str,
    list: _check_list,
    tuple: _check_tuple,
    dict: _check_dict,
}
