"""Fixtures of the pool tests (the helpers are in poolhelpers.py, importable by name)."""

from __future__ import annotations

import pytest
from poolhelpers import toy_pool


@pytest.fixture
def toy_pool_file(tmp_path):
    return toy_pool(tmp_path)
