"""The ``bench`` fixture: the module's ``BENCH_SCRIPT`` (a module of the ``bench`` package, e.g.
``bench_gpu`` or ``studies.bench_olmo3_order_steps``) imported."""

import importlib

import pytest


@pytest.fixture(scope="module")
def bench(request):
    return importlib.import_module(f"bench.{request.module.BENCH_SCRIPT}")
