"""The attention stage's settings (light: no torch), validated where a pool or a command is loaded."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from archpool.config import Config
from archpool.errors import ConfigError
from archpool.model.config import MAX_DIM, MAX_SEQ_LEN

SINK_EPS = 0.3  # a head is a sink head when its mean attention to the first token exceeds this
MAX_ATTENTION_SAMPLES = 100_000  # samples per analysis, as an evaluation's per-task cap
MAX_NEEDLE = 1024  # tokens of a retrieval key or value
MAX_BUDGET_S = 7 * 24 * 3600  # the longest time budget of a retrieval-head search


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
    retrieval_budget_s: float | None = None  # seconds the search and its ablation may take; None: no bound
    seed: int = 0

    def validate(self) -> None:
        """Every count and length within what one analysis can hold in memory: lengths up to
        ``MAX_SEQ_LEN``, samples up to ``MAX_ATTENTION_SAMPLES``, token ids and head counts below ``MAX_DIM``."""
        p = self.PATH
        lengths = {"seq_len": self.seq_len, "sink_len": self.sink_len, "queries": self.queries, "long_ctx": self.long_ctx}
        for name, value in lengths.items():
            _check(value, f"{p}.{name}", 1, MAX_SEQ_LEN)
        for name in ("lengths", "retrieval_lengths"):
            for i, value in enumerate(getattr(self, name) or ()):
                _check(value, f"{p}.{name}[{i}]", 1, MAX_SEQ_LEN)
        for i, value in enumerate(self.multiples):
            _check(value, f"{p}.multiples[{i}]", 1, MAX_SEQ_LEN)
        for name in ("sink_samples", "long_samples"):
            _check(getattr(self, name), f"{p}.{name}", 1, MAX_ATTENTION_SAMPLES)
        for name in ("key_len", "value_len"):
            _check(getattr(self, name), f"{p}.{name}", 1, MAX_NEEDLE)
        _check(self.bos_id, f"{p}.bos_id", 0, MAX_DIM - 1)
        _check(self.top_k, f"{p}.top_k", 1, MAX_DIM)
        _check(self.mask_k, f"{p}.mask_k", 0, MAX_DIM)
        _check(self.seed, f"{p}.seed", 0, 2**63 - 1)
        budget = self.retrieval_budget_s
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET_S
        ):
            raise ConfigError(
                f"{p}.retrieval_budget_s", f"seconds, more than 0 and at most {MAX_BUDGET_S:,} (a week), expected; got {budget!r}"
            )
        if not 0 < self.sink_eps < 1:
            raise ConfigError(f"{p}.sink_eps", f"a share of attention between 0 and 1 expected, got {self.sink_eps}")
        if self.retrieval:
            needle = 2 * self.key_len + self.value_len + 1  # key, value, the key again, and one haystack token
            for i, value in enumerate(self.retrieval_lengths or ()):
                if value < needle:
                    raise ConfigError(
                        f"{p}.retrieval_lengths[{i}]", f"{value} tokens cannot hold a {needle}-token needle and its query"
                    )
            if self.retrieval_lengths is None and self.long_ctx is not None and self.long_ctx < 4 * needle:
                raise ConfigError(
                    f"{p}.long_ctx",
                    f"{self.long_ctx} tokens: the shortest retrieval length (a quarter) cannot hold a {needle}-token needle",
                )

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> Settings:
        """The settings of a mapping (empty or null: every default)."""
        return super().from_dict(d or {}, path)


def analysis_settings(settings: Settings, seq_len: int | None, long_ctx: int | None) -> Settings:
    """The settings one analysis runs with: ``seq_len`` (the pretraining context) and ``long_ctx`` (the
    analysis length) fill those ``settings`` leave unset, and the whole is validated again (a ConfigError
    naming the field, e.g. an analysis length whose shortest retrieval length holds no needle)."""
    return dataclasses.replace(
        settings,
        seq_len=settings.seq_len if settings.seq_len is not None else seq_len,
        long_ctx=settings.long_ctx if settings.long_ctx is not None else long_ctx,
    )


def check_bos_id(bos_id: int, vocab_size: int) -> None:
    """ConfigError naming ``bos_id`` unless the token is in a vocabulary of ``vocab_size`` tokens."""
    if not 0 <= bos_id < vocab_size:
        raise ConfigError("bos_id", f"token {bos_id} is outside the model's vocabulary ({vocab_size} tokens)")


def _check(value: int | None, field: str, low: int, high: int) -> None:
    """ConfigError naming ``field`` unless ``value`` (None: unset) is an integer in ``[low, high]``."""
    if value is not None and not low <= value <= high:
        raise ConfigError(field, f"an integer from {low:,} to {high:,} expected, got {value:,}")
