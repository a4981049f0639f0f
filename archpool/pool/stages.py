"""Stage functions by backend, and the pool's report step.

``backend: real`` calls each pipeline stage's Python API (imported lazily, inside the worker);
``backend: toy`` uses :mod:`archpool.pool.toy`. A stage function takes a ``StageContext`` and
returns ``{"metrics": {...}, ...}``; what it writes lives in ``ctx.out_dir``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.pool.graph import StageFn


def stage_function(backend: str, stage: str) -> StageFn:
    if backend == "toy":
        from archpool.pool import toy

        return toy.STAGES[stage]
    from archpool.pool import real

    return real.STAGES[stage]


def write_report(out: Path, pool, rows: list[dict[str, Any]]) -> Path | None:
    """The analysis report of the pool directory; a plain table when the analysis stage is absent."""
    from archpool.pool import real

    return real.report(Path(out), pool, rows)
