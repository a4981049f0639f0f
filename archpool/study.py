"""The study's definitions, each in one place (docs/paper.md §1–§3): every stage imports them, none copies them.

- the paper's four features and their count: [any QK-norm] + [GQA] + [any sliding-window layer] +
  [pretrained at a short context];
- what "short" context means: half the pool's long context (the paper's 4K of 8K); 4096 for a
  single model or a table that says nothing else;
- Olmo 3's layer pattern (3 of every 4 layers sliding, every 4th full);
- extension recipes, the SwiGLU width rule;
- a run's final loss (the mean of the last 10% of its steps) and the evaluation defaults.

The axes themselves (names, values, spellings, the feature each switches) are :mod:`archpool.axes`.

Pure Python on plain values: no torch, no pandas, nothing from the pipeline's stages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal, get_args

from archpool.axes import NORM, canonical_qk_norm
from archpool.errors import ConfigError

# ---------------------------------------------------------------------------------------------- layers
SWA_PATTERNS = ("none", "olmo3", "all")
FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)


def olmo3_layer_types(n_layers: int) -> list[str]:
    """Olmo 3's pattern (HF ``Olmo3Config``'s default): 3 of every 4 layers sliding, every 4th full."""
    return every_kth_full(n_layers, 4)


def every_kth_full(n_layers: int, k: int) -> list[str]:
    """Sliding layers with every ``k``-th layer full (Olmo 3: k=4, Gemma 2: k=2, Gemma 3: k=6)."""
    return [SLIDING if (i + 1) % k else FULL for i in range(n_layers)]


def layer_types(pattern: str | Sequence[str], n_layers: int) -> list[str]:
    """Per-layer attention types of an ``swa_pattern``: ``none``, ``olmo3``, ``all`` or an explicit list."""
    if not isinstance(pattern, str):
        return list(pattern)
    if pattern == "none":
        return [FULL] * n_layers
    if pattern == "all":
        return [SLIDING] * n_layers
    if pattern == "olmo3":
        return olmo3_layer_types(n_layers)
    raise ConfigError("swa_pattern", f"unknown pattern {pattern!r}; allowed: {', '.join(SWA_PATTERNS)} or a list")


def swa_pattern_name(types: Sequence[str]) -> str | list[str]:
    """The inverse of :func:`layer_types`: a named pattern where one matches, else the list."""
    for name in SWA_PATTERNS:
        if list(types) == layer_types(name, len(types)):
            return name
    return list(types)


# ---------------------------------------------------------------------------------------------- short context
PAPER_SHORT_CTX = 4096  # the paper's short pretraining context (of 8192)


def pool_short_ctx(long_ctx: int, override: int | None = None) -> int:
    """A pool's short context: ``override`` (``report.short_ctx``) if given, else half its long context."""
    return int(override) if override else int(long_ctx) // 2


def table_short_ctx(contexts: Iterable[int]) -> int:
    """A results table without a ``short_ctx`` column: its smallest context when it has several, else 4096."""
    values = sorted(set(int(c) for c in contexts))
    return values[0] if len(values) > 1 else PAPER_SHORT_CTX


# ---------------------------------------------------------------------------------------------- features
def feature_flags(
    *, qk_norm: str, n_kv_heads: int, n_heads: int, swa: bool | int, pretrain_ctx: int, short_ctx: int
) -> dict[str, int]:
    """The four binary features of one model (docs/paper.md §1), keyed as :data:`archpool.axes.FEATURES`."""
    return dict(
        qk_norm=int(canonical_qk_norm(qk_norm) != "none"),
        gqa=int(int(n_kv_heads) < int(n_heads)),
        swa=int(bool(int(swa))),
        short_ctx=int(int(pretrain_ctx) <= int(short_ctx)),
    )


def feature_count(**axes: object) -> int:
    """How many of the four features a model has (keywords as :func:`feature_flags`)."""
    return sum(feature_flags(**axes).values())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- shapes
def d_ff_multiple(d_model: int) -> int:
    """SwiGLU widths are multiples of 256 at scale, 16 for small models."""
    return 256 if d_model >= 1024 else 16


def default_d_ff(d_model: int) -> int:
    """Llama's SwiGLU width rule: 8/3 · d_model rounded up to the multiple."""
    multiple = d_ff_multiple(d_model)
    return multiple * math.ceil(int(8 * d_model / 3) / multiple)


def scaled_d_ff(d_model: int, ratio: float, base_d_ff: int | None = None) -> int:
    """``ratio`` × the default (or ``base_d_ff``) width, rounded to the multiple (paper rows, presets)."""
    multiple = d_ff_multiple(d_model)
    return multiple * round((base_d_ff or default_d_ff(d_model)) * ratio / multiple)


# ---------------------------------------------------------------------------------------------- recipes
Recipe = Literal["ntk", "abf", "yarn", "pi"]  # context-extension recipes (docs/paper.md §3)
RECIPES: tuple[str, ...] = get_args(Recipe)
THETA_RECIPES = ("ntk", "abf")  # recipes that raise RoPE theta rather than scale positions
DEFAULT_RECIPE: Recipe = "ntk"

# ---------------------------------------------------------------------------------------------- measurements
LOSS_TAIL = 0.1  # a run's final loss: the mean of its last 10% of steps


def final_loss(losses: Sequence[float], tail: float = LOSS_TAIL) -> float:
    """Mean of the last ``tail`` fraction of ``losses`` (at least one); NaN for none."""
    if not losses:
        return float("nan")
    n = max(1, int(len(losses) * tail))
    return float(sum(losses[-n:]) / n)


EVAL_SAMPLES = 20  # samples per task and length
EVAL_SEED = 42  # task generation seed
# the smallest effect of interest: one point on the paper's 0–100 scale for an accuracy; for a gold
# log-probability 0.01 nats, the gold answer's probability changed by 1% (docs/extensibility.md, "Statistics")
MIN_EFFECT = 0.01
MAX_MIN_EFFECT = 10.0  # the largest smallest-effect-of-interest a pool file or --min-effect accepts


def min_effect_problem(value: object) -> str | None:
    """Why ``value`` cannot be the smallest effect of interest (None when it can): a number in (0, 10]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_MIN_EFFECT:
        return f"the smallest effect of interest: a number in (0, {MAX_MIN_EFFECT:g}], got {value!r}"
    return None


# the paper's extension: 10B tokens after 140B of pretraining
PAPER_EXTENSION_SHARE = 10 / 140
# the headroom window: the baseline's mean at the target must lie inside it for a cost (or a gain) of the
# paper's relative size to show (docs/extensibility.md, "Headroom")
HEADROOM = (0.40, 0.90)


class DesignAxes:
    """The four axes, the feature count and the design columns of a run (a trained run's spec and a
    checkpoint run's share them)."""

    model: Any
    pretrain_ctx: int
    name: str
    arch: str
    seed: int
    init: str
    fp8: bool
    params: int
    columns: dict[str, Any]

    @property
    def axes(self) -> dict[str, Any]:
        m = self.model
        return dict(
            swa=int(m.swa),
            qk_norm=m.qk_norm,
            norm=m.norm,
            n_kv_heads=m.n_kv_heads,
            n_heads=m.n_heads,
            pretrain_ctx=self.pretrain_ctx,
        )

    def feature_count(self, short_ctx: int) -> int:
        """How many of the paper's four features this run has (:func:`feature_count`)."""
        features = self.axes
        del features[NORM]  # the one axis that is not a feature
        return feature_count(**features, short_ctx=short_ctx)

    def row(self) -> dict[str, Any]:
        """The run's design columns of ``results.csv`` (docs/paper.md)."""
        m = self.model
        return dict(
            run=self.name,
            arch=self.arch,
            **self.axes,
            seed=self.seed,
            init=self.init,
            fp8=int(self.fp8),
            window=m.window or 0,
            d_ff=m.d_ff,
            n_layers=m.n_layers,
            d_model=m.d_model,
            params_b=round(self.params / 1e9, 6),
            **self.columns,
        )
