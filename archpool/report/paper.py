"""The paper's published single-feature effects, shown beside a pool's measurements.

Adding one feature to the paper's Llama 3 replica (7B, pretrained at 8K, extended to 64K) changes HELMET
(points of 100) at 1×/2×/4×/8× its pretraining context by the amounts below (docs/extensibility.md, derived
from the paper's appendix tables). They are the paper's 7B results under its recipe, not a measurement of a
pool's models, and the report labels them so.
"""

from __future__ import annotations

MULTIPLES = (1, 2, 4, 8)
SINGLE_FEATURE_HELMET = {
    "qk_norm": (1.6, 1.0, -1.0, -6.0),  # layerwise QK-norm
    "swa": (-3.7, -5.4, -7.6, -12.3),  # sliding windows on 3 of 4 layers
    "short_ctx": (0.7, 0.7, -2.2, -6.3),  # 4K instead of 8K pretraining
    "gqa": (-2.3, -0.7, -3.3, -4.9),  # 4 instead of 8 KV heads
}


def single_feature_delta(feature: str, multiple: int | None) -> float | None:
    """The paper's HELMET change for adding ``feature`` at ``multiple``× its pretraining context, if published."""
    row = SINGLE_FEATURE_HELMET.get(feature)
    if row is None or multiple not in MULTIPLES:
        return None
    return row[MULTIPLES.index(multiple)]
