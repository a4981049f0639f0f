"""What a report says about how its numbers were made: software, hardware, the pool file, training budgets,
wall time per stage, loss curves and chance levels. Plain values; the pool gathers them from its directory.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from archpool.study import HEADROOM
from archpool.version import git_commit, package_version

Curve = Sequence[tuple[int, float]]


@dataclass
class ReportContext:
    """Everything beside results.csv that the report shows (every field optional)."""

    pool_yaml: str = ""
    pool_source: str = ""
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    budgets: Sequence[tuple[str, str]] = ()  # (what, value), e.g. ("pretraining", "340 steps × 4,096 tokens")
    curves: Mapping[str, Mapping[str, Curve]] = field(default_factory=dict)  # run → phase → [(step, loss)]
    chance: Mapping[str, float] = field(default_factory=dict)  # task → chance accuracy (fraction)
    hardware: str = ""
    calibration: Mapping[str, Any] | None = None  # the pool's calibration record (archpool.pool.calibrate)
    headroom: tuple[float, float] = HEADROOM  # the pool's headroom window (report.headroom)


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> list[tuple[str, str]]:
    """Software and machine facts of this process, without importing torch."""
    facts = [
        ("archpool", package_version()),
        ("commit", git_commit() or "not a git checkout"),
        ("torch", _installed("torch") or "not installed"),
        ("python", platform.python_version()),
        ("machine", f"{cpu_name()}, {os.cpu_count()} CPU threads, {platform.system()} {platform.release()}"),
        ("written", _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    return facts


def duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
