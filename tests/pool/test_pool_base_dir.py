"""A pool's relative paths are read from its file's directory, whatever the working directory: ``PoolSpec.base_dir``
of a pool loaded from a file (and of the same pool read back from plan.json's record), and the eval stage's
``eval.harness.helmet_data.path`` resolved through it."""

from __future__ import annotations

import json

from archpool.pool.graph import StageContext
from archpool.pool.plan import build_plan
from archpool.pool.spec import PoolSpec, load_pool
from tests.helpers.pool import toy_pool

HELMET = {"harness": {"helmet_data": {"path": "data", "categories": ["recall"], "limit": 1, "lengths": [1024]}}}


def _pool_elsewhere(tmp_path, monkeypatch):
    """A toy pool whose file is in ``tmp_path/pools`` naming HELMET's data (``pools/data``, read at parse) by a
    relative path, loaded from ``tmp_path/elsewhere`` as the working directory; (the pool, the pool file's
    directory)."""
    from tests.eval.test_helmet_data import make_data

    pool_dir = tmp_path / "pools"
    pool_dir.mkdir()
    make_data(pool_dir, length=1024)
    path = toy_pool(pool_dir, seeds=[0], eval=HELMET)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return load_pool(path), pool_dir


def test_base_dir_is_the_pool_files_directory(tmp_path, monkeypatch):
    pool, pool_dir = _pool_elsewhere(tmp_path, monkeypatch)
    assert pool.base_dir == pool_dir
    again = PoolSpec.from_dict(json.loads(json.dumps(pool.to_dict())))  # as read_plan parses plan.json's record
    assert again.base_dir == pool_dir
    assert load_pool({"name": "m", "backend": "toy_backend", "runs": [{"name": "a"}]}).base_dir == tmp_path / "elsewhere"


def test_eval_stage_reads_helmet_data_from_the_pool_files_directory(tmp_path, monkeypatch):
    from archpool.eval import helmet_data as H
    from archpool.pool.stages import eval as stage

    pool, pool_dir = _pool_elsewhere(tmp_path, monkeypatch)
    node = next(n for n in build_plan(pool) if n.stage == "eval")
    requests = []

    def run_helmet_data(model_dir, request, progress=False, log=None):
        requests.append(request)
        return {"columns": {}, "cells": []}

    monkeypatch.setattr(H, "run_helmet_data", run_helmet_data)
    ctx = StageContext(
        out_dir=tmp_path / "node",
        config=node.config,
        inputs={},
        input_results={},
        input_configs={},
        run=None,
        pool=pool,
        threads=1,
        log=lambda line: None,
    )
    settings = pool.eval.harness.helmet_data
    stage.helmet_data(ctx, settings, tmp_path / "model", [512])
    assert [r.data_dir for r in requests] == [pool_dir / "data"]
