"""The eval stage: RULER- / HELMET-style task suites (``archpool.tasks``), LongPPL, short-context
metrics, over archpool checkpoints or transformers models, in generation and likelihood modes."""

from __future__ import annotations

from archpool.lazy import lazy_exports

_EXPORTS = {
    "LM": "archpool.eval.lm",
    "lm_from_decoder": "archpool.eval.lm",
    "lm_from_hf": "archpool.eval.lm",
    "load_target": "archpool.eval.target",
    "evaluate": "archpool.eval.api",
    "EvalRequest": "archpool.eval.api",
    "run_tasks": "archpool.eval.runner",
    "run_task": "archpool.eval.runner",
    "aggregate": "archpool.eval.runner",
    "run_longppl": "archpool.eval.longppl",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
