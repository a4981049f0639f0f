"""Pools: one command runs a whole controlled study — cached, resumable, failure-isolated."""

from archpool.pool.spec import PoolSpec, RunSpec, load_pool

__all__ = ["PoolSpec", "RunSpec", "load_pool"]
