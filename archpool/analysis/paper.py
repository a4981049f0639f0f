"""The paper's published single-feature effects, shown beside a pool's measurements.

Adding one feature to the paper's Llama 3 replica (7B, pretrained at 8K, extended to 64K) changes HELMET
(points of 100) at 1×/2×/4×/8× its pretraining context; the differences are read from the paper's table
shipped with archpool (:mod:`archpool.paper`, docs/extensibility.md). They are the paper's 7B results under
its recipe, not a measurement of a pool's models, and the report labels them so.
"""

from __future__ import annotations

from functools import cache

from archpool.axes import GQA, QK_NORM, SHORT_CTX, SWA
from archpool.paper.table import paper_run

BASELINE = "G_pre_8kv_8k_14k"  # the Llama 3 replica
WITH_FEATURE = {  # the replica with one feature added
    QK_NORM: "G_pre_LQK_8kv_8k_14k",  # layerwise QK-norm
    SWA: "G_pre_8kv_8k_14k_SWA",  # sliding windows on 3 of 4 layers
    SHORT_CTX: "G_pre_8kv_4k_14k",  # 4K instead of 8K pretraining
    GQA: "G_pre_4kv_8k_14k",  # 4 instead of 8 KV heads
}
BY_MULTIPLE = {1: "helmet_8k", 2: "helmet_16k", 4: "helmet_32k", 8: "helmet_64k"}


@cache
def single_feature_delta(feature: str, multiple: int | None) -> float | None:
    """The paper's HELMET change for adding ``feature`` at ``multiple``× its pretraining context, if published."""
    run, column = WITH_FEATURE.get(feature), BY_MULTIPLE.get(multiple)  # type: ignore[arg-type]
    if run is None or column is None:
        return None
    with_, without = paper_run(run).scores.get(column), paper_run(BASELINE).scores.get(column)
    return None if with_ is None or without is None else round(with_ - without, 6)


@cache
def baseline_score(multiple: int | None) -> float | None:
    """The paper's Llama 3 replica's HELMET at ``multiple``× its pretraining context, if published."""
    column = BY_MULTIPLE.get(multiple)  # type: ignore[arg-type]
    return None if column is None else paper_run(BASELINE).scores.get(column)
