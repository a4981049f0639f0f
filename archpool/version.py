"""archpool's version: the installed distribution's metadata, plus the git commit of a checkout."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


def package_version() -> str:
    """The installed distribution's version (package metadata); ``unknown`` when archpool is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("archpool")
    except PackageNotFoundError:
        return "unknown"


def _git(*args: str, cwd: Path) -> str:
    """stdout of ``git args`` in ``cwd`` (raises on failure or after 5 s)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=True).stdout


@functools.cache
def git_commit() -> str | None:
    """The short commit of the archpool git checkout holding this package (``+dirty`` with uncommitted
    changes to tracked files), or None outside one (an installed copy, even inside another repository)
    or without git."""
    here = Path(__file__).resolve().parent
    try:
        top, commit = _git("rev-parse", "--show-toplevel", "--short=12", "HEAD", cwd=here).split()
        if Path(top).resolve() / "archpool" != here:
            return None
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", cwd=here).strip()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return f"{commit}+dirty" if commit and dirty else commit or None


def version_string() -> str:
    """``archpool <version>`` plus ``(commit <sha>)`` when running from a git checkout."""
    commit = git_commit()
    return f"archpool {package_version()}" + (f" (commit {commit})" if commit else "")
