"""A pool run writes only its own directory: a run name the pool lacks, or a directory another pool owns, is
refused before anything is written."""

from __future__ import annotations

import json

import pytest

from archpool.errors import ConfigError
from archpool.pool.run import run_pool
from archpool.pool.spec import load_pool
from tests.helpers.pool import toy_pool


def test_only_with_a_typo_writes_nothing(tmp_path):
    pool = load_pool(toy_pool(tmp_path, seeds=[0]))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"--only: no run 'A_s9'"):
        run_pool(pool, out, only=["A_s9"], progress=False)
    assert not out.exists()


def test_a_directory_that_holds_another_pools_plan_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"schema": 3, "pool": {"name": "someone_else"}, "nodes": []}))
    before = (out / "plan.json").read_text()
    pool = load_pool(toy_pool(tmp_path, seeds=[0]))
    with pytest.raises(ConfigError, match=r"--out: .* holds the runs of pool 'someone_else'"):
        run_pool(pool, out, progress=False)
    assert (out / "plan.json").read_text() == before
