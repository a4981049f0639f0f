"""Broken pool directories: damaged markers, plans, statuses and event logs, a second `archpool run`,
backends the environment does not vouch for and cache locations chosen by a pool file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from archpool.data.config import DataConfig
from archpool.errors import ConfigError, LockError, StateError
from archpool.io import directory_lock
from archpool.pool.graph import DONE, Execution, Node, assign_keys, is_done, node_dir, read_events, read_result
from archpool.pool.job import read_status, status_path, write_status
from archpool.pool.plan import read_plan
from archpool.pool.run import run_pool
from archpool.pool.spec import load_pool
from archpool.pool.stages import backend_module
from archpool.rundir import POOL_PLAN
from tests.helpers.pool import PlainConfig, run_cli, toy_pool

GARBAGE = bytes(range(256)) * 4


def _node() -> Node:
    node = Node(id="data", stage="data", config=PlainConfig(x=1))
    assign_keys([node])
    return node


def _execute(out: Path, node: Node, calls: list[int]) -> dict:
    def fn(ctx):
        calls.append(1)
        return {"metrics": {"n": len(calls)}}

    return Execution(out, {node.id: node}, {}, 1, lambda m: None).execute(node, fn, None)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:7]),  # truncated
        lambda p: p.write_bytes(GARBAGE),  # binary garbage
        lambda p: p.write_text('{"key": "someone-else", "result": {}}'),  # another stage's marker
        lambda p: p.write_text("[1, 2]"),  # not a marker
    ],
    ids=["truncated", "garbage", "foreign", "not-a-mapping"],
)
def test_a_damaged_done_marker_is_named_and_the_stage_recomputed(tmp_path, damage):
    node, calls = _node(), []
    assert _execute(tmp_path, node, calls) == {"metrics": {"n": 1}}
    marker = node_dir(tmp_path, node) / DONE
    damage(marker)
    assert not is_done(tmp_path, node)
    with pytest.raises(StateError, match=r"stages/data/.*/DONE: .*re-run the pool"):
        read_result(tmp_path, node)
    assert _execute(tmp_path, node, calls) == {"metrics": {"n": 2}}  # recomputed, marker rewritten
    assert is_done(tmp_path, node) and any(e["kind"] == "damaged_marker" for e in read_events(tmp_path))


def test_a_symlinked_done_marker_is_not_trusted(tmp_path):
    node, calls = _node(), []
    _execute(tmp_path, node, calls)
    marker = node_dir(tmp_path, node) / DONE
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(marker.read_text())
    marker.unlink()
    marker.symlink_to(elsewhere)
    assert not is_done(tmp_path, node)
    _execute(tmp_path, node, calls)
    assert len(calls) == 2 and not marker.is_symlink() and elsewhere.exists()


def test_garbage_in_the_event_log_is_skipped(tmp_path):
    (tmp_path / "events.jsonl").write_bytes(b'{"kind": "start"}\n' + GARBAGE + b'\n[1]\n{"kind": "done"}\n')
    assert [e["kind"] for e in read_events(tmp_path)] == ["start", "done"]


def test_a_symlinked_event_log_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("mine\n")
    (tmp_path / "events.jsonl").symlink_to(secret)
    with pytest.raises(StateError, match="symbolic link"):
        _execute(tmp_path, _node(), [])
    assert secret.read_text() == "mine\n"


@pytest.mark.parametrize("content", [b'{"state": "do', GARBAGE, b"[]", b'{"state": 3}'])
def test_a_damaged_status_reads_as_pending(tmp_path, content):
    write_status(tmp_path, "A_s0", {"state": "done"})
    status_path(tmp_path, "A_s0").write_bytes(content)
    assert read_status(tmp_path, "A_s0") == {"state": "pending"}


@pytest.mark.parametrize("content", [b'{"pool": {"na', GARBAGE, b'{"nodes": []}'])
def test_a_damaged_plan_is_a_named_error(tmp_path, content):
    (tmp_path / POOL_PLAN).write_bytes(content)
    with pytest.raises(StateError, match=r"plan.json: truncated or corrupt.*re-run `archpool run`"):
        read_plan(tmp_path)


def test_archpool_status_on_a_damaged_plan_is_one_line(tmp_path):
    (tmp_path / POOL_PLAN).write_bytes(GARBAGE)
    r = run_cli("status", str(tmp_path))
    assert r.returncode == 2 and "plan.json: truncated or corrupt" in r.stderr and "Traceback" not in r.stderr


def test_a_second_run_on_one_pool_directory_is_refused(tmp_path):
    pool = load_pool(toy_pool(tmp_path, seeds=[0]))
    out = tmp_path / "out"
    with directory_lock(out, "pool directory"), pytest.raises(LockError, match=f"pool directory is in use by pid {os.getpid()}"):
        run_pool(pool, out, progress=False)
    assert not (out / POOL_PLAN).exists()


def test_a_pool_recovers_from_damaged_markers_and_status_on_rerun(tmp_path):
    pool = toy_pool(tmp_path, seeds=[0])
    out = tmp_path / "out"
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", "--only", "noqk_full_s0")
    assert r.returncode == 0, r.stderr
    _, nodes = read_plan(out)
    pretrain = next(n for n in nodes if n.run == "noqk_full_s0" and n.stage == "pretrain")
    (node_dir(out, pretrain) / DONE).write_bytes(b'{"node": "pre')
    status_path(out, "noqk_full_s0").write_bytes(GARBAGE)
    r = run_cli("run", str(pool), "--out", str(out), "--no-progress", "--only", "noqk_full_s0")
    assert r.returncode == 0, r.stderr
    assert is_done(out, pretrain) and read_status(out, "noqk_full_s0")["state"] == "done"
    assert any(e["kind"] == "damaged_marker" and e["node"] == pretrain.id for e in read_events(out))


# ------------------------------------------------------------------------------------ backends
def test_a_module_beside_the_pool_file_is_never_imported(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "evil_backend.py").write_text(f"open({str(marker)!r}, 'w').write('code ran')\nSTAGES = {{}}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ARCHPOOL_BACKENDS", raising=False)
    with pytest.raises(ConfigError, match="not an installed backend"):
        backend_module("evil_backend")
    with pytest.raises(ConfigError, match="not an installed backend"):
        backend_module("json")  # importable, but no installed distribution provides it as a backend
    assert not marker.exists()


def test_the_environment_can_vouch_for_a_backend(monkeypatch):
    monkeypatch.setenv("ARCHPOOL_BACKENDS", "something_else, toy_backend")
    assert backend_module("toy_backend").STAGES


# ------------------------------------------------------------------------------------ cache location
def test_a_pool_file_cannot_choose_the_cache_location(tmp_path):
    spec = toy_pool(tmp_path, data={"cache_dir": str(tmp_path / "anywhere")})
    with pytest.raises(ConfigError, match=r"data.cache_dir: .*ARCHPOOL_CACHE"):
        load_pool(spec)
    r = run_cli("run", str(spec), "--out", str(tmp_path / "out"), "--no-progress")
    assert r.returncode == 2 and "data.cache_dir" in r.stderr
    with pytest.raises(ConfigError, match="data.cache_dir"):  # `archpool data prepare POOL.yaml` reads the same section
        DataConfig.load(spec)
    assert not (tmp_path / "anywhere").exists()


def test_the_damaged_marker_message_names_the_file(tmp_path):
    node = _node()
    d = node_dir(tmp_path, node)
    d.mkdir(parents=True)
    (d / DONE).write_text(json.dumps({"key": node.key})[:5])
    with pytest.raises(StateError) as e:
        read_result(tmp_path, node)
    assert str(d / DONE) in str(e.value)
