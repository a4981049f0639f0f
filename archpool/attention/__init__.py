"""The attention stage: sinks, entropy, distance profiles and retrieval heads of a trained model.

Attention probabilities are never taken from a fused kernel: post-RoPE q/k are captured during an
ordinary forward pass (our ``Decoder`` via its ``captured`` slots, a transformers model via a
registered attention function), and softmax(qkᵀ·scale + mask) is recomputed for selected query rows
in chunks (``rows.py``), so memory stays O(rows × T) at any length. ``metrics.py`` holds the pure
definitions (docs/evaluation.md §5), ``retrieval.py`` the needle test and head masking (§4), ``corpus.py``
the held-out text, ``stats.py`` every statistic of a model on it, ``runner.py`` what a target path
names, ``stage.py`` the cached analysis of a target and the pool's node, ``table.py`` the text table,
``figures.py`` the pool figures.

Names resolve lazily (PEP 562) so that ``import archpool.cli.attention`` does not import torch.
"""

from __future__ import annotations

from archpool.lazy import lazy_exports

_EXPORTS = {
    "attention_rows": "archpool.attention.rows",
    "full_attention": "archpool.attention.rows",
    "importance_scores": "archpool.attention.metrics",
    "sink_rate": "archpool.attention.metrics",
    "row_entropy": "archpool.attention.metrics",
    "analyze": "archpool.attention.stats",
    "analyze_target": "archpool.attention.stage",
    "summaries_table": "archpool.attention.table",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
