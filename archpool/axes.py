"""The registry of design axes: each axis a pool varies and each feature of the paper, defined once.

An axis is a model choice that a pool varies by name and results.csv records as a column. Its name is
that column, the key of a pool run's ``axes:`` and of a paper row, and the ModelConfig field
(``pretrain_ctx`` is the pretraining context, the config's ``max_seq_len``). Its :class:`Axis` holds
its display label, its values where it is categorical (in comparison order, the feature-off side
first) with their accepted spellings, the paper's feature it switches (docs/paper.md §1) where it
switches one, and which end of a numeric axis is the feature-off side.

- ``AXES``: the axis names in results.csv's order; ``AXIS``: name -> :class:`Axis`;
- ``FEATURES``: the paper's four binary features in the paper's order (``qk_norm`` and ``swa`` name
  both an axis and its feature); ``FEATURE_NAMES``: their display names, with ``post_norm`` (the norm
  axis as a flag, compared across scales beside the four);
- ``canonical_qk_norm``: one spelling of a QK-norm value.

Pure Python on plain values: no torch, no pandas, nothing from the pipeline's stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# ---------------------------------------------------------------------------------------------- names
SWA = "swa"
QK_NORM = "qk_norm"
NORM = "norm"
N_KV_HEADS = "n_kv_heads"
PRETRAIN_CTX = "pretrain_ctx"
GQA = "gqa"
SHORT_CTX = "short_ctx"
POST_NORM = "post_norm"

# ---------------------------------------------------------------------------------------------- values
Norm = Literal["pre", "post"]
QkNorm = Literal["none", "layerwise", "headwise"]
NORMS: tuple[str, ...] = get_args(Norm)
QK_NORMS: tuple[str, ...] = get_args(QkNorm)
# the paper's and the families' spellings of the QK-norm axis
QK_NORM_ALIASES = {"hw": "headwise", "hqk": "headwise", "lqk": "layerwise", "lw": "layerwise", "off": "none"}


def canonical_qk_norm(value: object) -> str:
    """``none`` / ``layerwise`` / ``headwise`` from any accepted spelling (``False``/``None`` → none)."""
    if value is None or value is False:
        return "none"
    text = str(value).strip().lower()
    return QK_NORM_ALIASES.get(text, text)


# ---------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Axis:
    """One design axis (see the module docstring)."""

    name: str
    label: str
    values: tuple[str, ...] = ()  # a categorical axis's values, the feature-off side first; () for a number
    aliases: Mapping[str, str] = field(default_factory=dict)  # other spellings of ``values``
    feature: str | None = None  # the paper's feature this axis switches
    larger_is_baseline: bool = False  # a numeric axis whose larger value is the feature-off side

    @property
    def categorical(self) -> bool:
        """Values are names (``layerwise``), not numbers."""
        return bool(self.values)

    def rank(self, value: Any) -> Any:
        """``value``'s place in the axis's comparison order: the feature-off side ranks lower (no SWA, no
        QK-norm before layerwise before headwise, pre-norm, more KV heads, a longer pretraining context)."""
        if self.values:
            return self.values.index(value)
        return -value if self.larger_is_baseline else value


AXIS: Mapping[str, Axis] = {
    a.name: a
    for a in (
        Axis(SWA, "SWA", feature=SWA),
        Axis(QK_NORM, "QK-norm", QK_NORMS, QK_NORM_ALIASES, feature=QK_NORM),
        Axis(NORM, "norm placement", NORMS),
        Axis(N_KV_HEADS, "KV heads", feature=GQA, larger_is_baseline=True),
        Axis(PRETRAIN_CTX, "pretraining context", feature=SHORT_CTX, larger_is_baseline=True),
    )
}
AXES: tuple[str, ...] = tuple(AXIS)

FEATURES = (QK_NORM, GQA, SWA, SHORT_CTX)
FEATURE_NAMES = {
    QK_NORM: "QK-norm",
    GQA: "GQA",
    SWA: "SWA",
    SHORT_CTX: "short pretraining context",
    POST_NORM: "post-sublayer norm",
}
FEATURE_AXIS = {a.feature: a.name for a in AXIS.values() if a.feature}
"""The axis that switches a feature alone."""
