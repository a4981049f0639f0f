"""Every relative link of the docs resolves: the file exists and, with a ``#fragment``, the page has a
heading of that GitHub anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "bench" / "studies" / "README.md"]
    + list((ROOT / "docs").glob("*.md"))
    + list((ROOT / "docs" / "results").glob("*.md"))
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_anchor_follows_github():
    assert anchor("What the demo answers") == "what-the-demo-answers"
    assert anchor("Pools: a whole study in one command") == "pools-a-whole-study-in-one-command"
    assert anchor("The `study` pool: 5 seeds") == "the-study-pool-5-seeds"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[a](missing.md) [b](#top) [c](#nowhere)\n```\n[d](in-code.md)\n```\n")
    assert relative_links(page) == ["missing.md", "#top", "#nowhere"]
    assert anchors(page) == {"top"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        missing_anchor = fragment and dest.suffix == ".md" and fragment not in anchors(dest) if dest.exists() else False
        if not dest.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"
