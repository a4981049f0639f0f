"""Report stage: a self-contained HTML page, PNG figures and CSV tables of an analysis."""

from archpool.report.html import write_report

__all__ = ["write_report"]
