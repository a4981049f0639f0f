"""The pool's stage adapters: one module per pipeline stage, each ``StageContext -> {"metrics": {...}, ...}``.

A pool's ``backend`` says where its stage functions come from: ``real`` (these adapters, which call
each stage's Python API, imported lazily inside the worker) or another module whose ``STAGES`` maps
every stage name to a function (a test double, another trainer). A pool file names code, it never
brings it: a backend is an entry point of the ``archpool.backends`` group, a module of an installed
distribution, or a module the environment lists in ``$ARCHPOOL_BACKENDS`` (comma-separated; how the
test suite registers its test double). A module that is none of these (e.g. a file beside the YAML
or in the working directory) is refused before anything is imported.

A stage function receives its node's config with the pool's typed sections (docs/contributing.md,
"A pool setting: parsed once, carried typed"), the run's spec as ``ctx.run`` and the pool's as
``ctx.pool``.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from archpool.errors import ConfigError
from archpool.pool.graph import StageFn
from archpool.pool.stages import attention, data, eval, extend, pretrain

STAGE_NAMES = ("data", "pretrain", "extend", "eval", "attention")
STAGES: dict[str, StageFn] = {
    "data": data.run,
    "pretrain": pretrain.run,
    "extend": extend.run,
    "eval": eval.run,
    "attention": attention.run,
}


def backend_module(backend: str) -> ModuleType | None:
    """``None`` for ``real``; else the backend module, checked to provide every stage."""
    if backend == "real":
        return None
    try:
        module = _trusted_module(backend)
    except ImportError as e:
        raise ConfigError("backend", f"'real' or an importable module with STAGES; cannot import {backend!r} ({e})") from None
    stages = getattr(module, "STAGES", None)
    missing = [s for s in STAGE_NAMES if not isinstance(stages, dict) or not callable(stages.get(s))]
    if missing:
        raise ConfigError("backend", f"module {backend!r} has no STAGES function for {', '.join(missing)}")
    return module


BACKEND_GROUP = "archpool.backends"
BACKENDS_ENV = "ARCHPOOL_BACKENDS"


def _trusted_module(backend: str) -> ModuleType:
    """The backend module if this installation vouches for it (see the module docstring), else ConfigError."""
    from importlib.metadata import entry_points, packages_distributions

    for ep in entry_points(group=BACKEND_GROUP):
        if ep.name == backend:
            module: ModuleType = ep.load()  # an entry point of the group names a module
            return module
    listed = {m.strip() for m in os.environ.get(BACKENDS_ENV, "").split(",") if m.strip()}
    if backend in listed:
        return importlib.import_module(backend)
    top = backend.split(".")[0]
    if top not in packages_distributions():
        raise ConfigError(
            "backend",
            f"{backend!r} is not an installed backend: name an entry point of {BACKEND_GROUP!r}, a module of an "
            f"installed package, or list the module in ${BACKENDS_ENV}; a pool file cannot bring its own code",
        )
    return importlib.import_module(backend)


def stage_function(backend: str, stage: str) -> StageFn:
    module = backend_module(backend)
    return STAGES[stage] if module is None else module.STAGES[stage]
