"""Attention kernels, kept apart from the model's math (``archpool.model.model``):

- ``local``: what a layer may attend to (``LocalMask``) and the blockwise tiling of sliding windows
  and documents (``KeyTile``: queries over the keys they can reach; ``WindowTiles``, the windows
  stacked into the batch), run through SDPA with autograd through the tiles;
  ``local_attention_probs``, the eager math tile by tile.
- ``fused``: the key tiles through the CPU flash kernel with a hand-written backward (``FusedTiles``).
- ``dispatch``: the functions a layer calls: ``sdpa_attention`` (which tiles through
  ``local_attention`` when it pays), ``flex_attention_fn`` with ``flex_block_mask``, and
  ``eager_attention``.

``ATTENTION_FUNCTIONS`` is the one table of attention implementations: ``Attention`` looks its
kernel up there and config validation takes the allowed names from it. This module imports no
torch, so the names can be checked where torch is not loaded; a function is imported from
``dispatch`` when it is looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AttentionKernel:
    """One entry of the table: the function in ``dispatch`` and whether training may select it."""

    function: str  # its name in archpool.model.kernels.dispatch: (q, k, v, mask) -> output (B, H, T, D)
    trains: bool  # offered to ``train.attn_impl``


class AttentionFunctions(Mapping[str, Callable[..., Any]]):
    """Attention implementation name → kernel function ``(q, k, v, mask) -> output``, as transformers'
    ``ALL_ATTENTION_FUNCTIONS``. Iterating gives the names without importing torch."""

    def __init__(self, kernels: dict[str, AttentionKernel]):
        self.kernels = kernels

    def __getitem__(self, impl: str) -> Callable[..., Any]:
        from archpool.model.kernels import dispatch

        return getattr(dispatch, self.kernels[impl].function)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def __contains__(self, impl: object) -> bool:
        return impl in self.kernels

    def training(self) -> tuple[str, ...]:
        """The names training may select."""
        return tuple(name for name, kernel in self.kernels.items() if kernel.trains)


ATTENTION_FUNCTIONS = AttentionFunctions(
    {
        "sdpa": AttentionKernel("sdpa_attention", trains=True),
        "eager": AttentionKernel("eager_output", trains=False),  # the reference math; the probabilities' path
        "flex": AttentionKernel("flex_attention_fn", trains=True),  # block masks; a forward only on CPU
    }
)
