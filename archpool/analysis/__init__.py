"""Analysis stage: the study's statistics (and its critics') from a results table or a pool directory.

Imports nothing from training or model code: it reads tables only. Names resolve lazily so that
building the CLI parser does not import statsmodels.
"""

from __future__ import annotations

from archpool.lazy import lazy_exports

_EXPORTS = {
    "analyze": "archpool.analysis.summary",
    "format_text": "archpool.analysis.summary_text",
    "to_json": "archpool.analysis.summary",
    "TableError": "archpool.analysis.table",
    "load_results": "archpool.analysis.table",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
