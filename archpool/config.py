"""The base of archpool's config sections: a dataclass built once from a mapping at the YAML/CLI edge.

``Config.from_dict(data, path)`` refuses a non-mapping and unknown keys (one ``ConfigError`` naming
``path.key``, the closest allowed key and the allowed keys), builds nested config fields (and lists
and mappings of them) from their mappings under their own paths, and constructs the dataclass, whose
``__post_init__`` checks every field's type (``archpool.typecheck``, ``Literal`` choices included) and
calls ``validate()``. ``to_dict()`` gives the mapping that content hashes and cache keys are computed
from, and ``from_dict(x.to_dict()) == x``.

A subclass names where it sits in a config file (``PATH``, e.g. ``train``): errors of a config built
directly are named under it, errors of one built by ``from_dict(data, path)`` under ``path``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from archpool.errors import ConfigError
from archpool.typecheck import check_types

C = TypeVar("C", bound="Config")


def join(path: str, key: object) -> object:
    """``key`` named under ``path`` (``train`` + ``lr`` is ``train.lr``); a key alone keeps its type,
    so that an odd YAML key (null, a number) is named as ``ConfigError`` names it."""
    return f"{path}.{key}" if path else key


def check_keys(data: Mapping[Any, Any], allowed: Iterable[str], path: str = "", what: str = "field") -> None:
    """Refuse the first unknown key of ``data`` (in sorted order) with the closest allowed key."""
    allowed = list(allowed)
    unknown = sorted(set(data) - set(allowed), key=str)
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(join(path, key), f"unknown {what}; {hint}allowed: {', '.join(allowed)}")


def check_mapping(data: Any, path: str, what: str = "a mapping") -> Mapping[Any, Any]:
    """``data`` if it is a mapping, else a ``ConfigError`` at ``path`` saying what was expected."""
    if not isinstance(data, Mapping):
        raise ConfigError(path or "config", f"expected {what}, got {type(data).__name__}")
    return data


def rerooted(error: ConfigError, root: str, path: str) -> ConfigError:
    """``error`` named under ``path`` instead of ``root`` (the path a directly built config names)."""
    if root == path:
        return error
    if not root:
        return error.under(path)
    field = error.field
    if field == root or field.startswith((root + ".", root + "[")):
        return ConfigError(path + field[len(root) :], error.message)
    return error


def _config_class(tp: Any) -> type[Config] | None:
    return tp if isinstance(tp, type) and issubclass(tp, Config) else None


def build_value(value: Any, tp: Any, path: str) -> Any:
    """``value`` with every mapping that fills a config field built into that config (under ``path``);
    anything else is left for the type check."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        configs = [a for a in args if _config_class(a)]
        return build_value(value, configs[0], path) if len(configs) == 1 else value
    cls = _config_class(tp)
    if cls is not None:
        return cls.from_dict(value, path) if isinstance(value, Mapping) else value
    if origin is list and args and isinstance(value, list):
        return [build_value(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict and len(args) == 2 and isinstance(value, Mapping):
        return {k: build_value(v, args[1], f"{path}.{k}") for k, v in value.items()}
    return value


class Config:
    """A config section: a dataclass built from a mapping, type-checked and validated on construction."""

    PATH: ClassVar[str] = ""  # where the section sits in a config file (errors of a directly built config)
    KEY: ClassVar[str] = "field"  # what an unknown key is called in errors

    def __post_init__(self) -> None:
        check_types(self, self.PATH)
        self.validate()

    def validate(self) -> None:
        """Rules across fields; raise a ``ConfigError`` naming the field under ``PATH``."""

    @classmethod
    def keys(cls) -> list[str]:
        """The keys a mapping of this section may have: its fields."""
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], data: Any, path: str | None = None) -> C:
        """The config a mapping describes; every error is named under ``path`` (default: ``PATH``)."""
        path = cls.PATH if path is None else path
        check_mapping(data, path)
        check_keys(data, cls.keys(), path, cls.KEY)
        hints = typing.get_type_hints(cls)
        values = {k: build_value(v, hints[k], str(join(path, k))) for k, v in data.items()}
        try:
            return cls(**values)
        except ConfigError as e:
            raise rerooted(e, cls.PATH, path) from None

    def to_dict(self) -> dict[str, Any]:
        """The section as a mapping (what content hashes and cache keys are computed from)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]
