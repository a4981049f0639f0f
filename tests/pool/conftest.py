"""Fixtures of the pool tests (the builders are in tests.helpers.pool)."""

from __future__ import annotations

import pytest

from tests.helpers.pool import toy_pool


@pytest.fixture
def toy_pool_file(tmp_path):
    return toy_pool(tmp_path)
