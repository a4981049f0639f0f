"""The report only lays out and renders: from the analysis it imports the typed results and the one entry
point, never a statistics module (read from the source, so the rule cannot silently break)."""

from __future__ import annotations

import ast
from pathlib import Path

import archpool.report

ALLOWED = {
    "archpool.analysis.results",  # the typed results, the words of their tests, their precision
    "archpool.analysis.report_data",  # the one entry point
    "archpool.analysis.archs",  # which runs share an architecture, and their means for the figures
}


def _analysis_imports(path: Path) -> set[str]:
    """Every module of archpool.analysis that ``path`` imports (``from archpool.analysis import x`` names x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("archpool.analysis")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("archpool.analysis"):
            if node.module == "archpool.analysis":
                found |= {f"archpool.analysis.{a.name}" for a in node.names}
            else:
                found.add(node.module)
    return found


def test_the_report_imports_only_the_analysis_results_and_its_entry_point():
    files = sorted(Path(archpool.report.__file__).parent.glob("*.py"))
    assert len(files) >= 8
    used = {str(f.name): _analysis_imports(f) - ALLOWED for f in files}
    assert {k: v for k, v in used.items() if v} == {}


def test_the_check_sees_every_form_of_import(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import archpool.analysis.stats\nfrom archpool.analysis import crossed, results\n"
        "from archpool.analysis.effects import cells\nfrom archpool.analysis.results import fmt\n"
        "def f():\n    from archpool.analysis.inference import holm\n"
    )
    assert _analysis_imports(src) - ALLOWED == {
        "archpool.analysis.stats",
        "archpool.analysis.crossed",
        "archpool.analysis.effects",
        "archpool.analysis.inference",
    }
