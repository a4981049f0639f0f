"""The architecture as a test: no import cycles anywhere in the package (function-local imports
included), and the layering contracts of .importlinter (`lint-imports`, also run by `make test`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]


def import_cycles(package: str) -> list[list[str]]:
    """Strongly connected components of more than one module in the package's import graph."""
    graph = grimp.build_graph(package, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_the_package_has_no_import_cycles():
    assert import_cycles("archpool") == []


def test_every_package_is_a_regular_package():
    """A directory without __init__.py is a namespace package, invisible to the import contracts."""
    missing = [
        str(d.relative_to(REPO))
        for d in (REPO / "archpool").rglob("*")
        if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").is_file()
    ]
    assert missing == []


def test_the_layering_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    r = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:]
    assert "0 broken" in r.stdout
