"""The paper's 26-run results table (HELMET 8K–64K, RULER 4K–64K, LongPPL), shipped as package data.

Provenance and the known transcription error are in docs/paper-results.md. Rows keep the paper's
run names (``INIT_NORM_QK_KV_CTX_DFF[_SWA][_fp8]``); the released models live under
``ORGANISATION/<name>`` on the Hugging Face Hub.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from archpool.axes import N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SWA
from archpool.study import PAPER_SHORT_CTX, feature_flags

TABLE_PATH = Path(__file__).resolve().parent / "olmpool_results.csv"
ORGANISATION = "allenai"  # the Hub organisation of the released OlmPool models
PAPER_N_HEADS = 32  # every run of the pool has 32 query heads
HELMET_LENGTHS = (8192, 16384, 32768, 65536)
HELMET_COLUMNS = ("helmet_8k", "helmet_16k", "helmet_32k", "helmet_64k")
RULER_COLUMNS = ("ruler_4k", "ruler_8k", "ruler_16k", "ruler_32k", "ruler_64k")
SCORE_COLUMNS = (*HELMET_COLUMNS, *RULER_COLUMNS, "longppl")
DESIGN_COLUMNS = (SWA, QK_NORM, NORM, "fp8", "init", N_KV_HEADS, PRETRAIN_CTX, "d_ff", "params_b", "n_layers")
# (run, columns): cells known to be wrong in the transcription (docs/paper-results.md)
KNOWN_ERRORS: dict[str, tuple[str, ...]] = {"G_pre_8kv_4k_14k": RULER_COLUMNS}
KNOWN_ERROR_NOTE = "its RULER row duplicates B_post_LQK_32kv_4k_11k_SWA's (a transcription error)"


@dataclass(frozen=True)
class PaperRun:
    """One published run: its design and its published scores (``None`` where a cell is unreliable)."""

    name: str
    design: dict[str, Any]
    scores: dict[str, float | None]

    @property
    def flags(self) -> dict[str, int]:
        d = self.design
        return feature_flags(
            qk_norm=d[QK_NORM],
            n_kv_heads=d[N_KV_HEADS],
            n_heads=PAPER_N_HEADS,
            swa=d[SWA],
            pretrain_ctx=d[PRETRAIN_CTX],
            short_ctx=PAPER_SHORT_CTX,
        )

    @property
    def count(self) -> int:
        return sum(self.flags.values())

    @property
    def repo(self) -> str:
        return f"{ORGANISATION}/{self.name}"


def _value(column: str, text: str) -> Any:
    if column in (QK_NORM, NORM, "init"):
        return text
    if column in (SWA, "fp8", N_KV_HEADS, PRETRAIN_CTX, "d_ff", "n_layers"):
        return int(text)
    return float(text)


@cache
def raw_rows() -> tuple[dict[str, str], ...]:
    """The table's rows as text, exactly as shipped."""
    with TABLE_PATH.open(newline="") as f:
        return tuple(csv.DictReader(f))


@cache
def paper_runs(keep_known_errors: bool = False) -> tuple[PaperRun, ...]:
    """Every published run; cells in :data:`KNOWN_ERRORS` are ``None`` unless ``keep_known_errors``."""
    runs = []
    for row in raw_rows():
        bad = () if keep_known_errors else KNOWN_ERRORS.get(row["name"], ())
        design = {c: _value(c, row[c]) for c in DESIGN_COLUMNS}
        scores = {c: (None if c in bad else _value(c, row[c])) for c in SCORE_COLUMNS}
        runs.append(PaperRun(row["name"], design, scores))
    return tuple(runs)


def paper_run(name: str) -> PaperRun:
    for r in paper_runs():
        if r.name == name:
            return r
    raise KeyError(name)


def published_columns(name: str, prefix: str = "paper_") -> dict[str, float]:
    """A run's published scores as results columns (``paper_helmet_32k``, ...), known errors left out."""
    return {f"{prefix}{k}": v for k, v in paper_run(name).scores.items() if v is not None}


PAPER_WINDOW = 4096  # the pool's sliding window: half its 8K long context
_NAME = re.compile(
    r"^(?P<init>[A-Z])_(?P<norm>pre|post)_(?:(?P<qk>[LH])QK_)?(?P<kv>\d+)kv_(?:(?P<ctx>\d+)k_)?(?P<dff>\d+)k(?P<swa>_SWA)?(?P<fp8>_fp8)?$"
)


def parse_released_name(name: str) -> dict[str, Any]:
    """The design a released model's name states (``INIT_NORM_[QK_]KVkv_[CTXk_]DFFk[_SWA][_fp8]``);
    a name without a context is pretrained at 8K. Four SWA configs ship without a window, so the name
    is what says a model slides (over :data:`PAPER_WINDOW` tokens)."""
    m = _NAME.match(name)
    if m is None:
        raise ValueError(f"{name!r} is not an OlmPool run name (INIT_NORM_[QK_]KVkv_[CTXk_]DFFk[_SWA][_fp8])")
    return dict(
        init=m["init"],
        norm=m["norm"],
        qk_norm={"L": "layerwise", "H": "hw", None: "none"}[m["qk"]],
        n_kv_heads=int(m["kv"]),
        pretrain_ctx=int(m["ctx"] or 8) * 1024,
        swa=int(bool(m["swa"])),
        fp8=int(bool(m["fp8"])),
        window=PAPER_WINDOW if m["swa"] else 0,
    )
