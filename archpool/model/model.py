"""The decoder: one readable file that can be any point of the paper's design space.

Read top to bottom: ``RMSNorm``, ``Attention`` (projections → QK-norm → RoPE → the attention
kernel), ``MLP`` (SwiGLU), ``Block`` (where pre- vs post-norm is decided), ``KVCache``, ``Decoder``.
The axes are branches on config fields at the one place each matters; each layer's window and RoPE
theta come from ``archpool.model.geometry``. The attention kernels (SDPA, FlexAttention, the eager
math, the CPU tiling of windows and documents) live in ``archpool.model.kernels``. Distributed
training, compilation and data live elsewhere; this module imports neither.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from archpool.model import geometry
from archpool.model.config import ModelConfig
from archpool.model.init import init_weights
from archpool.model.kernels import ATTENTION_FUNCTIONS
from archpool.model.kernels.dispatch import eager_attention, flex_block_mask
from archpool.model.kernels.local import LocalMask
from archpool.model.loss import linear_cross_entropy
from archpool.model.rope import apply_rope, rope_cos_sin, rope_frequencies


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)


class Attention(nn.Module):
    """``impl``: the kernel, a name in ``ATTENTION_FUNCTIONS`` (sdpa | eager | flex); ``local``: windows
    and documents tiled over query blocks (O(T·W)) rather than dense T×T masks (the reference). Both
    are fixed at construction."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, impl: str = "sdpa", local: bool = True):
        super().__init__()
        self.layer_idx = layer_idx
        self.layer_type = geometry.layer_type(cfg, layer_idx)
        self.window = geometry.window_of(cfg, layer_idx)
        kv, hd = cfg.n_kv_heads, cfg.head_dim
        assert kv is not None and hd is not None  # resolved by ModelConfig.__post_init__
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, kv, hd
        self.qk_norm = cfg.qk_norm
        d = cfg.d_model
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, kv * hd, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, kv * hd, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False)
        if cfg.qk_norm == "layerwise":  # over the whole projection, before the head split (Olmo 2/3)
            self.q_norm = RMSNorm(cfg.n_heads * hd, cfg.norm_eps)
            self.k_norm = RMSNorm(kv * hd, cfg.norm_eps)
        elif cfg.qk_norm == "headwise":  # per head over head_dim (Qwen 3, Gemma 3)
            self.q_norm = RMSNorm(hd, cfg.norm_eps)
            self.k_norm = RMSNorm(hd, cfg.norm_eps)
        self.impl, self.local = impl, local
        self.kernel = ATTENTION_FUNCTIONS[impl]
        # with a KV cache the layer builds its own mask from the cached positions; flex block masks
        # are built for the uncached sequence only, so cached steps run SDPA
        self.cached_kernel = ATTENTION_FUNCTIONS["sdpa" if impl == "flex" else impl]
        self.captured: dict[str, torch.Tensor] | None = None  # set by Decoder.capture_qk()

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | LocalMask | None,
        cache: KVCache | None = None,
        return_probs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.qk_norm == "layerwise":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.qk_norm == "headwise":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.captured is not None:
            self.captured["q"], self.captured["k"] = q.detach(), k.detach()
        if cache is not None:
            k, v, _ = cache.update(self.layer_idx, k, v, self.window)
            mask = LocalMask(self.window)  # queries are the last T of the returned keys
            if not self.local:
                mask = mask.dense(T, k.shape[2], x.device)
        if return_probs:  # the probabilities are written out by the eager math only
            y, probs = eager_attention(q, k, v, mask)
        else:
            y, probs = (self.kernel if cache is None else self.cached_kernel)(q, k, v, mask), None
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(y), probs


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        width = cfg.mlp_width
        self.gate_proj = nn.Linear(cfg.d_model, width, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, width, bias=False)
        self.down_proj = nn.Linear(width, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """``pre``: x + attn(norm(x)) (Llama, Qwen). ``post``: x + norm(attn(x)), Olmo 2/3's reordered norm."""

    def __init__(self, cfg: ModelConfig, layer_idx: int, impl: str = "sdpa", local: bool = True):
        super().__init__()
        self.post_norm = cfg.norm == "post"
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer_idx, impl, local)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache=None, return_probs=False):
        if self.post_norm:
            a, probs = self.attn(x, cos, sin, mask, cache, return_probs)
            h = x + self.attn_norm(a)
            return h + self.mlp_norm(self.mlp(h)), probs
        a, probs = self.attn(self.attn_norm(x), cos, sin, mask, cache, return_probs)
        h = x + a
        return h + self.mlp(self.mlp_norm(h)), probs


class KVCache:
    """Per-layer keys/values for incremental decoding. Sliding layers keep only their window."""

    def __init__(self, n_layers: int):
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.start = [0] * n_layers  # absolute position of each layer's first cached key
        self.seen = 0  # positions consumed so far

    def advance(self, n: int) -> None:
        self.seen += n

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, window: int | None):
        """Append this step's K/V; return all keys to attend over and the position of the first."""
        cached_k, cached_v = self.k[layer], self.v[layer]
        if cached_k is not None and cached_v is not None:  # both or neither
            k = torch.cat([cached_k, k], dim=2)
            v = torch.cat([cached_v, v], dim=2)
        start = self.start[layer]
        keep = k.shape[2] if window is None else min(k.shape[2], window - 1)
        self.k[layer], self.v[layer] = k[:, :, k.shape[2] - keep :], v[:, :, v.shape[2] - keep :]
        self.start[layer] = start + k.shape[2] - keep
        return k, v, start


class Decoder(nn.Module):
    """Decoder-only LM: ``model(input_ids)`` maps (B, T) token ids to (B, T, vocab) logits.

    ``attn_impl`` (sdpa | eager | flex) and ``local_attention`` (tiled windows and documents, or the
    dense-mask reference) choose how attention is computed, never what: they are fixed when the
    model is built (the trainer builds it for its device) and are not part of the checkpoint."""

    def __init__(self, cfg: ModelConfig, seed: int = 0, *, attn_impl: str = "sdpa", local_attention: bool = True):
        super().__init__()
        if attn_impl not in ATTENTION_FUNCTIONS:
            raise ValueError(f"attn_impl: unknown {attn_impl!r}; allowed: {', '.join(ATTENTION_FUNCTIONS)}")
        self.cfg = cfg
        self.attn_impl, self.local_attention = attn_impl, local_attention
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i, attn_impl, local_attention) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        self._set_rope()
        init_weights(self, seed, cfg.init_std, cfg.n_layers)
        if cfg.qkv_bias:  # biases start at zero: the projections start as the bias-free model's
            with torch.no_grad():
                for name, param in self.named_parameters():
                    if name.endswith("_proj.bias"):
                        param.zero_()

    # -------------------------------------------------------------- RoPE
    def _set_rope(self) -> None:
        self.rope_scale: dict[str, float] = {}
        assert self.cfg.head_dim is not None  # resolved by ModelConfig.__post_init__
        for layer_type in sorted(set(self.cfg.layer_types)):
            inv_freq, scale = rope_frequencies(self.cfg.rope, self.cfg.head_dim, layer_type)
            self.register_buffer(f"inv_freq_{layer_type}", inv_freq, persistent=False)
            self.rope_scale[layer_type] = scale

    def set_rope(self, rope) -> None:
        """Change the RoPE settings in place (context extension)."""
        self.cfg = self.cfg.replace(rope=rope)
        device = self.embed.weight.device
        assert self.cfg.head_dim is not None  # resolved by ModelConfig.__post_init__
        for layer_type in sorted(set(self.cfg.layer_types)):
            inv_freq, scale = rope_frequencies(self.cfg.rope, self.cfg.head_dim, layer_type)
            setattr(self, f"inv_freq_{layer_type}", inv_freq.to(device))
            self.rope_scale[layer_type] = scale

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    # -------------------------------------------------------------- forward
    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        doc_ids: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        targets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, T, V). ``doc_ids`` (B, T) restricts attention to each token's own document
        (intra-document masking). With ``kv_cache`` the tokens continue the cached sequence.
        With ``targets`` (B, T; -100 = ignore): the summed cross-entropy instead, through the fused,
        chunked head (``archpool.model.loss``), logits never built. This is the training path, and it
        goes through ``forward`` because DDP, FSDP and ``torch.compile`` wrap ``forward``."""
        h, _ = self._trunk(input_ids, doc_ids, kv_cache, with_probs=False)
        if targets is not None:
            return linear_cross_entropy(h, self.lm_head.weight, targets)
        return self.lm_head(h)

    def forward_with_attentions(
        self, input_ids: torch.Tensor, *, doc_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(logits, [attention probabilities (B, H, T, T) per layer])`` through the eager path
        (computed per block of query rows on windowed layers)."""
        h, probs = self._trunk(input_ids, doc_ids, None, with_probs=True)
        return self.lm_head(h), probs

    def _trunk(
        self, input_ids: torch.Tensor, doc_ids: torch.Tensor | None, kv_cache: KVCache | None, with_probs: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The final hidden states (B, T, D), after the last norm, and each layer's probabilities if asked."""
        _, T = input_ids.shape
        offset = kv_cache.seen if kv_cache is not None else 0
        if kv_cache is not None and doc_ids is not None:
            raise ValueError("doc_ids: intra-document masking is not supported with a KV cache")
        positions = torch.arange(offset, offset + T, device=input_ids.device)
        x = self.embed(input_ids)
        rope = {t: rope_cos_sin(getattr(self, f"inv_freq_{t}"), self.rope_scale[t], positions, x.dtype) for t in self.rope_scale}
        masks = {}
        if kv_cache is None:  # with a cache each layer builds its own mask from cached positions
            flex = self.attn_impl == "flex" and not with_probs
            masks = {t: self._mask(t, positions, doc_ids, flex) for t in self.rope_scale}
        else:
            kv_cache.advance(T)
        all_probs = []
        for block in cast("Iterable[Block]", self.layers):
            t = block.attn.layer_type
            x, probs = block(x, *rope[t], masks.get(t), kv_cache, with_probs)
            if with_probs:
                all_probs.append(probs)
        return self.norm(x), all_probs

    def _mask(self, layer_type: str, positions: torch.Tensor, doc_ids: torch.Tensor | None, flex: bool = False):
        """Flex block mask, dense boolean mask, or ``None`` for plain causal (SDPA's is_causal path)."""
        T = positions.shape[0]
        mask = LocalMask(geometry.type_window(self.cfg, layer_type), doc_ids)
        if flex:
            return flex_block_mask(T, mask.window, doc_ids, positions.device)
        if mask.window is None and doc_ids is None:
            return None  # plain causal: SDPA's is_causal fast path
        if self.local_attention:
            return mask
        return mask.dense(T, T, positions.device)

    @contextlib.contextmanager
    def capture_qk(self) -> Iterator[list[dict[str, torch.Tensor]]]:
        """Within the block, each forward stores post-RoPE q (B, H, T, D) and k (B, KV, T, D) per layer."""
        store: list[dict[str, torch.Tensor]] = [{} for _ in self.layers]
        blocks = cast("list[Block]", list(self.layers))
        for block, slot in zip(blocks, store):
            block.attn.captured = slot
        try:
            yield store
        finally:
            for block in blocks:
                block.attn.captured = None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
