"""A pool file's ``base:``: another pool file laid under it (mappings merged, lists and scalars replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archpool.errors import ConfigError
from archpool.pool.spec import load_pool, merge_pool_mappings, read_pool_file

BASE = dict(
    name="parent",
    backend="toy_backend",
    seeds=[0, 1],
    train=dict(lr=0.006, max_steps=10),
    eval=dict(length_ratios=[1, 2], n_samples=4),
    runs=[dict(name="A", preset="llama3"), dict(name="B", preset="llama3", axes=dict(qk_norm="layerwise"))],
)


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_child_overrides_merge_mappings_and_replace_lists(tmp_path):
    _write(tmp_path / "parent.yaml", BASE)
    child = _write(tmp_path / "child.yaml", dict(base="parent.yaml", name="child", train=dict(lr=0.012), seeds=[3]))
    data = read_pool_file(child)
    assert data["name"] == "child" and "base" not in data
    assert data["train"] == dict(lr=0.012, max_steps=10)  # merged key by key
    assert data["seeds"] == [3]  # a list replaces
    assert data["runs"] == BASE["runs"]  # inherited whole
    pool = load_pool(child)
    assert pool.name == "child" and {r.name for r in pool.runs} == {"A_s3", "B_s3"}
    assert pool.train["lr"] == 0.012


def test_runs_given_by_the_child_replace_the_base_runs(tmp_path):
    _write(tmp_path / "parent.yaml", BASE)
    child = _write(tmp_path / "c.yaml", dict(base="parent.yaml", name="c", runs=[dict(name="Z", preset="llama3")]))
    assert {r.arch for r in load_pool(child).runs} == {"Z"}


def test_a_base_chain_resolves_relative_to_each_file(tmp_path):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "parent.yaml", BASE)
    _write(tmp_path / "sub" / "mid.yaml", dict(base="../parent.yaml", name="mid", eval=dict(n_samples=8)))
    leaf = _write(tmp_path / "sub" / "leaf.yaml", dict(base="mid.yaml", name="leaf", train=dict(max_steps=20)))
    data = read_pool_file(leaf)
    assert data["eval"] == dict(length_ratios=[1, 2], n_samples=8)
    assert data["train"] == dict(lr=0.006, max_steps=20)


def test_a_shipped_pool_is_a_base(tmp_path):
    child = _write(tmp_path / "c.yaml", dict(base="smoke", name="mine", seeds=[5]))
    pool = load_pool(child)
    assert pool.name == "mine" and all(r.seed == 5 for r in pool.runs)


@pytest.mark.parametrize(
    ("files", "start", "message"),
    [
        ({"a.yaml": dict(base="b.yaml", name="a"), "b.yaml": dict(base="a.yaml", name="b")}, "a.yaml", "cycle"),
        ({"a.yaml": dict(base="a.yaml", name="a")}, "a.yaml", "cycle"),
        ({"a.yaml": dict(base="nowhere.yaml", name="a")}, "a.yaml", "no pool file"),
        ({"a.yaml": dict(base=3, name="a")}, "a.yaml", "a pool file or a shipped pool"),
        ({"a.yaml": dict(base="no_such_shipped_pool", name="a")}, "a.yaml", "neither a pool file nor a shipped pool"),
    ],
)
def test_bad_bases_are_named_errors(tmp_path, files, start, message):
    for name, data in files.items():
        _write(tmp_path / name, data)
    with pytest.raises(ConfigError, match=message):
        load_pool(tmp_path / start)


def test_a_mapping_pool_cannot_name_a_base():
    with pytest.raises(ConfigError, match="base"):
        load_pool(dict(BASE, base="smoke"))


def test_merge_is_deep_for_mappings_only():
    merged = merge_pool_mappings({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": {"f": 2}})
    assert merged == {"a": {"b": 1, "c": [3]}, "d": 1, "e": {"f": 2}}
