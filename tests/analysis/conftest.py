"""Fixtures of the analysis tests (defined in tests.helpers.results)."""

from tests.helpers.results import pool_dir, table  # noqa: F401
