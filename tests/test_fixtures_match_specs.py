"""The test copy of the paper's 26-run table equals the spec it came from (when shared/ is beside the repo)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "specs" / "olmpool-architectures.csv"


@pytest.mark.skipif(not SPEC.exists(), reason="shared/specs is not beside this checkout")
def test_olmpool_fixture_is_the_published_table():
    assert (ROOT / "tests" / "fixtures" / "olmpool-architectures.csv").read_bytes() == SPEC.read_bytes()
