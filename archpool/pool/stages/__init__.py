"""The pool's stage adapters: one module per pipeline stage, each ``StageContext -> {"metrics": {...}, ...}``.

A pool's ``backend`` says where its stage functions come from: ``real`` (these adapters, which call
each stage's Python API, imported lazily inside the worker) or the dotted name of an importable
module whose ``STAGES`` maps every stage name to a function (a test double, another trainer).
"""

from __future__ import annotations

import importlib
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
        module = importlib.import_module(backend)
    except ImportError as e:
        raise ConfigError("backend", f"'real' or an importable module with STAGES; cannot import {backend!r} ({e})") from None
    stages = getattr(module, "STAGES", None)
    missing = [s for s in STAGE_NAMES if not isinstance(stages, dict) or not callable(stages.get(s))]
    if missing:
        raise ConfigError("backend", f"module {backend!r} has no STAGES function for {', '.join(missing)}")
    return module


def stage_function(backend: str, stage: str) -> StageFn:
    module = backend_module(backend)
    return STAGES[stage] if module is None else module.STAGES[stage]
