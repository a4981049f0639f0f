"""Analysis stage: the study's statistics (and its critics') from a results table or a pool directory.

Imports nothing from training or model code: it reads tables only. Names resolve lazily so that
building the CLI parser does not import statsmodels.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "analyze": "archpool.analysis.summary",
    "format_text": "archpool.analysis.summary",
    "to_json": "archpool.analysis.summary",
    "TableError": "archpool.analysis.table",
    "load_results": "archpool.analysis.table",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'archpool.analysis' has no attribute {name!r}")
