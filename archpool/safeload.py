"""Bounded parsing of the YAML and JSON documents archpool reads (pools, configs, HF ``config.json``).

A document may come from anyone, so parsing is bounded before anything is built from it:

- YAML aliases and merge keys are counted by the size of what they expand to (``MAX_NODES``), so an
  alias bomb ("billion laughs") is refused while it is composed, in milliseconds;
- nesting deeper than ``MAX_DEPTH`` is refused (no ``RecursionError``);
- a key given twice in one YAML mapping is an error naming the key and its lines (PyYAML keeps the last);
- a file larger than ``MAX_BYTES`` is refused unread.

Every failure is a :class:`~archpool.errors.ConfigError` naming the file (or field). Dependency-light:
config loaders import it before anything heavy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from archpool.errors import ConfigError, StateError

MAX_NODES = 200_000  # scalars + collections after alias expansion; the largest shipped pool has ~2,000
MAX_DEPTH = 64  # nesting of mappings / lists; shipped configs nest 5 deep
MAX_BYTES = 16 << 20  # a config file; HF config.json files are a few KB
RECORD_MAX_BYTES = 256 << 20  # a record that grows with a pool or corpus (plan.json, a store manifest)
RECORD_MAX_NODES = 20_000_000  # the demo pool's plan.json holds ~14,000 values, a 6,000-file store manifest ~41,000


def _loader_class():
    import yaml
    from yaml.events import AliasEvent
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    class BoundedLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` with an expansion budget, a depth limit and duplicate keys refused."""

        def __init__(self, stream: str, max_nodes: int, max_depth: int):
            super().__init__(stream)
            self.max_nodes, self.max_depth = max_nodes, max_depth
            self.nodes = 0
            self.depth = 0
            self.sizes: dict[int, int] = {}

        def node_size(self, node: Any) -> int:
            """Nodes ``node`` expands to, aliases included (memoised: shared nodes are sized once)."""
            key = id(node)
            if key not in self.sizes:
                if isinstance(node, ScalarNode):
                    size = 1
                elif isinstance(node, SequenceNode):
                    size = 1 + sum(self.node_size(v) for v in node.value)
                elif isinstance(node, MappingNode):
                    size = 1 + sum(self.node_size(k) + self.node_size(v) for k, v in node.value)
                else:
                    size = 1
                self.sizes[key] = size
            return self.sizes[key]

        def charge(self, n: int, mark: Any) -> None:
            self.nodes += n
            if self.nodes > self.max_nodes:
                line = f" (line {mark.line + 1})" if mark is not None else ""
                raise _Refused(
                    f"expands to more than {self.max_nodes:,} values{line}: an alias bomb or a document too large for a config"
                )

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(AliasEvent):
                event = self.peek_event()
                if event.anchor in self.anchors:
                    self.charge(self.node_size(self.anchors[event.anchor]), event.start_mark)
                return super().compose_node(parent, index)
            self.charge(1, self.peek_event().start_mark)
            self.depth += 1
            try:
                if self.depth > self.max_depth:
                    raise _Refused(f"nested deeper than {self.max_depth} levels (line {self.peek_event().start_mark.line + 1})")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_mapping_node(self, anchor: Any) -> Any:
            node = super().compose_mapping_node(anchor)
            _refuse_duplicate_keys(node, ScalarNode)
            return node

    return BoundedLoader


def _refuse_duplicate_keys(node: Any, scalar: type[Any]) -> None:
    """Refuse a mapping node that gives one scalar key twice (as written: tag and text). Merge keys
    (``<<``) are exempt: a merged mapping's keys are meant to be overridden."""
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, scalar) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise _Refused(f"duplicate key {key_node.value!r} (lines {seen[key]} and {line}); a mapping names each key once")
        seen[key] = line


class _Refused(Exception):
    """A bound broken while parsing; turned into a ``ConfigError`` naming the source."""


def load_yaml(text: str, source: str = "<yaml>", *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The YAML document in ``text``, parsed safely and within bounds; ``ConfigError(source, ...)`` otherwise."""
    import yaml

    loader = None
    try:
        loader = _loader_class()(text, max_nodes, max_depth)  # the reader refuses non-printable text here
        return loader.get_single_data()
    except _Refused as e:
        raise ConfigError(source, str(e)) from None
    except yaml.YAMLError as e:
        raise ConfigError(source, f"not valid YAML ({' '.join(str(e).split())})") from None
    except RecursionError:
        raise ConfigError(source, f"nested deeper than {max_depth} levels") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. a timestamp out of range, an unhashable key
        raise ConfigError(source, f"not a usable YAML document ({type(e).__name__}: {e})") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_json(text: str | bytes, source: str = "<json>", *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``text`` within the same bounds as :func:`load_yaml`; ``ConfigError`` otherwise.
    Duplicate object keys are refused too."""
    try:
        data = json.loads(text, object_pairs_hook=_json_object)
    except _Refused as e:
        raise ConfigError(source, str(e)) from None
    except json.JSONDecodeError as e:
        raise ConfigError(source, f"not valid JSON ({e})") from None
    except UnicodeDecodeError:
        raise ConfigError(source, "not a UTF-8 text file") from None
    except RecursionError:
        raise ConfigError(source, f"nested deeper than {max_depth} levels") from None
    try:
        check_bounds(data, max_nodes=max_nodes, max_depth=max_depth)
    except _Refused as e:
        raise ConfigError(source, str(e)) from None
    return data


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"duplicate key {k!r}; an object names each key once")
        out[k] = v
    return out


def check_bounds(data: Any, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``data`` (already parsed) with more than ``max_nodes`` values or deeper than ``max_depth``.
    Iterative and stops at the first bound broken, so shared references cannot make it slow."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > max_nodes:
            raise _Refused(f"holds more than {max_nodes:,} values: too large for a config")
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple)):
            children = list(value)
        else:
            continue
        if depth >= max_depth and children:
            raise _Refused(f"nested deeper than {max_depth} levels")
        stack.extend((c, depth + 1) for c in children)


def read_text_bounded(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, refused (``ConfigError`` naming it) when it is not a
    regular file (a FIFO or device would block or never end), larger than ``max_bytes`` or not UTF-8."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read ({e.strerror or e})") from None
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(str(path), "not a regular file")
    if st.st_size > max_bytes:
        raise ConfigError(str(path), f"{st.st_size:,} bytes; a config file is at most {max_bytes:,} bytes")
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise ConfigError(str(path), f"cannot read ({e.strerror or e})") from None
    if len(raw) > max_bytes:
        raise ConfigError(str(path), f"larger than {max_bytes:,} bytes; a config file is at most that")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(str(path), "not a UTF-8 text file") from None


def read_json_file(path: str | os.PathLike, max_bytes: int = MAX_BYTES, *, max_nodes: int = MAX_NODES) -> Any:
    """The JSON document in the file ``path``, read and parsed within bounds."""
    return load_json(read_text_bounded(path, max_bytes), str(path), max_nodes=max_nodes)


def read_yaml_file(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> Any:
    """The YAML document in the file ``path``, read and parsed within bounds."""
    return load_yaml(read_text_bounded(path, max_bytes), str(path))


def read_json_object(path: str | os.PathLike, max_bytes: int = MAX_BYTES, *, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """The JSON object (a mapping, as every config file is) in the file ``path``, read and parsed within
    bounds; ``ConfigError`` naming the file for anything else."""
    data = read_json_file(path, max_bytes, max_nodes=max_nodes)
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"a JSON object expected, got {type(data).__name__}")
    return data


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """:func:`read_json_object` within the bounds of a record that grows with a pool or corpus."""
    return read_json_object(path, RECORD_MAX_BYTES, max_nodes=RECORD_MAX_NODES)


RUN_STATES = ("pending", "running", "done", "failed", "interrupted")  # the ``state`` of a run's status.json


def read_run_status(path: str | os.PathLike) -> dict[str, Any] | None:
    """A pool run's ``status.json``, the one reader of these records: None when there is none;
    ``StateError`` naming the file when it is a link, not a regular file, unreadable, not a JSON object,
    or its ``state`` is not one of ``RUN_STATES`` (``error``, ``stage`` and ``node``: text or null)."""
    path = Path(path)
    if not path.is_symlink() and not path.exists():
        return None
    recover = "re-run the pool (`archpool run POOL_DIR`) to rewrite it, or delete it"
    if path.is_symlink():
        raise StateError(f"{path}: a link, not the run status archpool writes; {recover}")
    try:
        status = read_json_object(path)
    except ConfigError as e:
        raise StateError(f"{path}: damaged run status ({e.message}); {recover}") from None
    if status.get("state") not in RUN_STATES:
        raise StateError(
            f"{path}: damaged run status (state {status.get('state')!r}, not one of {', '.join(RUN_STATES)}); {recover}"
        )
    for key in ("error", "stage", "node"):
        if not isinstance(status.get(key), (str, type(None))):
            raise StateError(f"{path}: damaged run status ({key!r} is {type(status[key]).__name__}, not text); {recover}")
    return status
