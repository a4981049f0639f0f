"""The attention stage's settings (light: no torch), validated where a pool or a command is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archpool.config import Config

SINK_EPS = 0.3  # a head is a sink head when its mean attention to the first token exceeds this


@dataclass
class Settings(Config):
    """The attention stage's settings (``attention:`` of a pool); lists become tuples."""

    PATH = "attention"
    KEY = "setting"

    seq_len: int | None = None  # pretraining context; default: the model's max_seq_len
    multiples: tuple[int, ...] = (1, 2, 4)
    lengths: tuple[int, ...] | None = None  # explicit long lengths (override seq_len × multiples)
    sink_len: int = 64
    sink_samples: int = 32
    sink_eps: float = SINK_EPS
    long_samples: int = 4
    queries: int = 128  # last M queries analysed per long sample
    bos_id: int | None = None  # default: the corpus' document separator
    retrieval: bool = True
    long_ctx: int | None = None  # extended context; default: max(max_seq_len, seq_len)
    retrieval_lengths: tuple[int, ...] | None = None  # default: 4 lengths in [long_ctx / 4, long_ctx]
    key_len: int = 3
    value_len: int = 6
    top_k: int = 10
    mask_k: int | None = None  # default: max(1, 3 % of heads); 0 disables the ablation
    seed: int = 0

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> Settings:
        """The settings of a mapping (empty or null: every default)."""
        return super().from_dict(d or {}, path)
