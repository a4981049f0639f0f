"""Capturing post-RoPE q and k from a model, for archpool's ``Decoder`` and for transformers models.

A *probe* runs a model and returns, per layer, a ``LayerQK``: the queries to analyse (only the last
``keep_queries`` of them, sliced as they are captured, so long inputs do not hold every query), all
keys, their positions, the layer's window and softmax scale.

- ``DecoderProbe``: our model's ``Attention.captured`` slot (what ``Decoder.capture_qk`` uses), given
  a dict that slices q on write. The model is not modified.
- ``HFProbe``: a transformers causal LM loaded with ``attn_implementation="archpool_capture"``, an
  attention function registered in transformers' ``AttentionInterface`` that records the query and
  key states it is handed (post-RoPE, post-QK-norm, exactly what eager/SDPA attend with), the
  module's ``scaling`` and the ``sliding_window`` kwarg, then runs SDPA. With a KV cache the key
  states it receives include the cache; only the last ``q_len`` (this step's keys) are recorded.
  Logit soft-capping (Gemma 2) is refused: recomputed rows would not match.

Both support incremental decoding (``start`` / ``step``) for the retrieval-head test, keeping every
key seen so far per layer (sliding layers included; the window is applied when rows are computed). A
forward applies the LM head to its last position alone: decoding reads that position's logits, and the
statistics read none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from archpool.model.features import hf_config_layer_types
from archpool.model.geometry import layer_windows


@dataclass
class LayerQK:
    q: torch.Tensor  # (B, H, Tq, D), the analysed queries
    k: torch.Tensor  # (B, KV, Tk, D), every key
    q_pos: torch.Tensor  # (Tq,)
    k_pos: torch.Tensor  # (Tk,)
    window: int | None
    scale: float
    layer_type: str


class _QSlicingSlot(dict):
    """A ``captured`` slot that keeps only the last ``keep`` queries."""

    def __init__(self, keep: int | None):
        super().__init__()
        self.keep = keep

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if isinstance(value, torch.Tensor):
            if key == "q" and self.keep is not None:
                value = value[:, :, -self.keep :]
            value = value.detach()
        super().__setitem__(key, value)


class Probe:
    """Common interface; subclasses implement ``_forward`` and the layer facts."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    layer_types: list[str]
    windows: list[int | None]
    vocab_size: int
    model: nn.Module

    @torch.no_grad()
    def capture(self, ids: torch.Tensor, keep_queries: int | None = None) -> list[LayerQK]:
        """One forward over ``ids`` (B, T); q/k per layer with the last ``keep_queries`` queries."""
        T = ids.shape[1]
        _, slots = self._forward(ids, keep_queries, cache=None)
        pos = torch.arange(T)
        out = []
        for i, s in enumerate(slots):
            k = s["k"]
            out.append(LayerQK(s["q"], k, pos[T - s["q"].shape[2] :], pos, self.windows[i], s["scale"], self.layer_types[i]))
        return out

    # ---------------------------------------------------------------- incremental decoding
    @torch.no_grad()
    def start(self, ids: torch.Tensor) -> DecodeState:
        """Prefill ``ids`` (1, T) and return the decoding state (logits of the last position)."""
        cache = self._new_cache()
        logits, slots = self._forward(ids, 1, cache=cache)
        keys = [s["k"] for s in slots]
        return DecodeState(self, cache, keys, ids.shape[1], logits[:, -1], [s["q"] for s in slots], [s["scale"] for s in slots])

    def _new_cache(self):
        raise NotImplementedError

    def _forward(self, ids, keep, cache):  # -> (the last position's logits (B, 1, V), [slot dict with q, k, scale])
        raise NotImplementedError

    def o_proj(self, layer: int) -> nn.Module:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "layer_types": list(self.layer_types),
            "windows": list(self.windows),
        }


class DecodeState:
    """Greedy decoding with every layer's keys kept: ``rows()`` gives the newest query's layer q/k."""

    def __init__(self, probe: Probe, cache, keys, seen: int, last_logits, last_q, scales):
        self.probe, self.cache, self.keys, self.seen = probe, cache, keys, seen
        self.last_logits, self.last_q, self.scales = last_logits, last_q, scales

    def layers(self) -> list[LayerQK]:
        """The newest query (position ``seen - 1``) against every key so far, per layer."""
        qp = torch.tensor([self.seen - 1])
        kp = torch.arange(self.seen)
        p = self.probe
        return [
            LayerQK(q, k, qp, kp, p.windows[i], self.scales[i], p.layer_types[i])
            for i, (q, k) in enumerate(zip(self.last_q, self.keys))
        ]

    @torch.no_grad()
    def step(self, token: int) -> None:
        ids = torch.tensor([[int(token)]], device=self.last_logits.device)
        logits, slots = self.probe._forward(ids, 1, cache=self.cache, offset=self.seen)
        self.keys = [torch.cat([k, s["k"]], dim=2) for k, s in zip(self.keys, slots)]
        self.last_q = [s["q"] for s in slots]
        self.seen += 1
        self.last_logits = logits[:, -1]


# -------------------------------------------------------------------------------------- archpool
class DecoderProbe(Probe):
    def __init__(self, model: nn.Module):
        cfg = model.cfg
        self.model = model.eval()
        self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.layer_types = list(cfg.layer_types)
        self.windows = layer_windows(cfg)
        self.vocab_size = cfg.vocab_size

    def _new_cache(self):
        return self.model.new_cache()

    def _forward(self, ids, keep, cache, offset: int = 0):
        slots = [_QSlicingSlot(keep) for _ in self.model.layers]
        for block, slot in zip(self.model.layers, slots):
            block.attn.captured = slot
        try:  # the LM head on the last position alone: a decoding step reads its logits, an analysis none
            h, _ = self.model._trunk(ids.to(self.model.embed.weight.device), None, cache, with_probs=False)
            logits = self.model.lm_head(h[:, -1:])
        finally:
            for block in self.model.layers:
                block.attn.captured = None
        scale = 1.0 / math.sqrt(self.head_dim)
        for s in slots:
            s["scale"] = scale
        return logits, slots

    def o_proj(self, layer: int) -> nn.Module:
        return self.model.layers[layer].attn.o_proj


# -------------------------------------------------------------------------------------- transformers
CAPTURE_IMPL = "archpool_capture"
_ACTIVE: list[list[dict]] = []  # stack of per-forward slot lists; the attention function fills the top one
_REGISTERED = False


def register_capture_attention() -> str:
    """Register ``archpool_capture`` with transformers (idempotent) and return its name."""
    global _REGISTERED
    if _REGISTERED:
        return CAPTURE_IMPL
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def capture_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if kwargs.get("softcap") is not None:
            raise ValueError("archpool attention analysis: logit soft-capping is not supported (rows would not match)")
        if _ACTIVE:
            slots = _ACTIVE[-1]
            slot = slots[module.layer_idx]
            T = query.shape[2]
            slot["q"] = query.detach()
            slot["k"] = key[:, :, -T:].detach()
            slot["scale"] = float(scaling) if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
            slot["window"] = kwargs.get("sliding_window")
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)

    AttentionInterface.register(CAPTURE_IMPL, capture_attention)
    AttentionMaskInterface.register(CAPTURE_IMPL, sdpa_mask)
    _REGISTERED = True
    return CAPTURE_IMPL


def load_hf_for_capture(hf_dir, device: str = "cpu", dtype: torch.dtype | None = None):
    """A transformers causal LM from a local directory, attending through ``archpool_capture``."""
    from transformers import AutoModelForCausalLM

    impl = register_capture_attention()
    kwargs: dict[str, Any] = {"attn_implementation": impl, "local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    return AutoModelForCausalLM.from_pretrained(str(hf_dir), **kwargs).to(device).eval()


class HFProbe(Probe):
    def __init__(self, model: nn.Module):
        register_capture_attention()
        if model.config._attn_implementation != CAPTURE_IMPL:
            model.set_attn_implementation(CAPTURE_IMPL)
        c = model.config
        self.model = model.eval()
        self.n_layers, self.n_heads = int(c.num_hidden_layers), int(c.num_attention_heads)
        self.n_kv_heads = int(getattr(c, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // self.n_heads)
        self.vocab_size = int(c.vocab_size)
        # layer types and windows are confirmed from the first forward (the kwargs the model passes)
        window = getattr(c, "sliding_window", None)
        self.layer_types = hf_config_layer_types(c)
        self.windows = [window if t == "sliding_attention" else None for t in self.layer_types]
        self._layers = self._decoder_layers()
        import inspect

        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
        self._last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}  # the LM head on one row

    def _decoder_layers(self):
        base = getattr(self.model, "model", self.model)
        return base.layers

    def _new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _forward(self, ids, keep, cache, offset: int = 0):
        slots = [_QSlicingSlot(keep) for _ in range(self.n_layers)]
        _ACTIVE.append(slots)
        try:
            device = next(self.model.parameters()).device
            kw = {self._cache_arg: cache} if cache is not None else {}
            out = self.model(input_ids=ids.to(device), use_cache=cache is not None, **kw, **self._last_only)
        finally:
            _ACTIVE.pop()
        for i, s in enumerate(slots):  # what the model actually passed wins over the config
            w = s.pop("window", None)
            self.windows[i] = int(w) if w else None
            self.layer_types[i] = "sliding_attention" if w else "full_attention"
        return out.logits, slots

    def o_proj(self, layer: int) -> nn.Module:
        return self._layers[layer].self_attn.o_proj


def probe_for(model: nn.Module) -> Probe:
    """The probe for an archpool ``Decoder`` or a transformers causal LM."""
    from archpool.model.model import Decoder

    if isinstance(model, Decoder):
        return DecoderProbe(model)
    if hasattr(model, "config") and hasattr(model.config, "num_hidden_layers"):
        return HFProbe(model)
    raise TypeError(f"cannot analyse attention of {type(model).__name__}: not an archpool Decoder or transformers causal LM")
