"""Analysis stage: the study's statistics (and its critics') from a results table or a pool directory.

Imports nothing from training or model code: it reads tables only.
"""
from archpool.analysis.summary import analyze, format_text, to_json
from archpool.analysis.table import TableError, load_results

__all__ = ["analyze", "format_text", "load_results", "to_json", "TableError"]
