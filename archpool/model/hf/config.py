"""transformers configs for archpool's ModelConfig and back: the families, the export class, RoPE and size checks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.axes import Norm, QkNorm
from archpool.errors import CheckpointError, ConfigError
from archpool.model.config import MAX_DIM, MAX_ROPE_FACTOR, MAX_ROPE_THETA, MAX_SEQ_LEN, bounded_int
from archpool.model.geometry import type_theta
from archpool.safeload import read_json_file
from archpool.study import SLIDING, swa_pattern_name

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedConfig

    from archpool.model.config import ModelConfig, RopeConfig

ARCHPOOL_CONFIG_NAME = "archpool_config.json"  # our config, written beside an export for provenance


@dataclass(frozen=True)
class HFFamily:
    model_type: str
    config_class: str
    model_class: str
    norm: Norm
    qk_norm: QkNorm
    swa: str  # none: no window; all: one window on every layer; layer_types: per-layer list
    per_type_rope: bool = False  # rope_parameters split by layer type (Olmo 3)
    qkv_bias: bool = False  # q/k/v projections always carry biases (Qwen 2)


FAMILIES: dict[str, HFFamily] = {
    f.model_type: f
    for f in [
        HFFamily("llama", "LlamaConfig", "LlamaForCausalLM", "pre", "none", "none"),
        HFFamily("mistral", "MistralConfig", "MistralForCausalLM", "pre", "none", "all"),
        HFFamily("ministral", "MinistralConfig", "MinistralForCausalLM", "pre", "none", "layer_types"),
        HFFamily("qwen2", "Qwen2Config", "Qwen2ForCausalLM", "pre", "none", "layer_types", qkv_bias=True),
        HFFamily("qwen3", "Qwen3Config", "Qwen3ForCausalLM", "pre", "headwise", "layer_types"),
        HFFamily("olmo2", "Olmo2Config", "Olmo2ForCausalLM", "post", "layerwise", "none"),
        HFFamily("olmo3", "Olmo3Config", "Olmo3ForCausalLM", "post", "layerwise", "layer_types", per_type_rope=True),
    ]
}
IMPORTABLE = tuple(FAMILIES)


# ---------------------------------------------------------------------------------------------- export
def hf_family_for(cfg: ModelConfig) -> HFFamily:
    """The transformers family that computes exactly ``cfg``'s function, or a ConfigError naming why none does."""
    swa = cfg.swa
    if cfg.qkv_bias:
        if cfg.norm != "pre" or cfg.qk_norm != "none":
            raise ConfigError(
                "qkv_bias",
                "q/k/v biases export only as Qwen2ForCausalLM (pre-norm, no QK-norm); "
                f"this model has {cfg.norm}-norm and qk_norm {cfg.qk_norm!r}",
            )
        family = FAMILIES["qwen2"]
    elif cfg.norm == "pre" and cfg.qk_norm == "none":
        if not swa:
            family = FAMILIES["llama"]
        elif all(t == "sliding_attention" for t in cfg.layer_types):
            family = FAMILIES["mistral"]
        else:
            family = FAMILIES["ministral"]
    elif cfg.norm == "pre" and cfg.qk_norm == "headwise":
        family = FAMILIES["qwen3"]
    elif cfg.norm == "post" and cfg.qk_norm == "layerwise":
        family = FAMILIES["olmo3"] if swa else FAMILIES["olmo2"]
    elif cfg.norm == "pre" and cfg.qk_norm == "layerwise":
        raise ConfigError(
            "qk_norm",
            "pre-norm with layerwise QK-norm has no native transformers class; nearest: "
            "Qwen3ForCausalLM (pre-norm, headwise QK-norm) or Olmo2ForCausalLM (layerwise, post-norm)",
        )
    elif cfg.norm == "post" and cfg.qk_norm == "headwise":
        raise ConfigError(
            "qk_norm",
            "post-norm with headwise QK-norm has no native transformers class; nearest: "
            "Olmo2ForCausalLM / Olmo3ForCausalLM (post-norm, layerwise QK-norm) or Qwen3ForCausalLM (pre-norm, headwise)",
        )
    else:
        raise ConfigError(
            "norm",
            "post-norm without QK-norm has no native transformers class; nearest: "
            "Olmo2ForCausalLM (post-norm with layerwise QK-norm) or LlamaForCausalLM (pre-norm)",
        )
    rope = cfg.rope
    local_theta = rope.full_layers_only and type_theta(rope, SLIDING) != rope.theta
    if swa and rope.full_layers_only and (rope.type != "default" or local_theta) and not family.per_type_rope:
        raise ConfigError(
            "rope.full_layers_only",
            f"RoPE scaling on full-attention layers only needs per-layer-type "
            f"rope_parameters, which {family.model_class} lacks; nearest: Olmo3ForCausalLM (post-norm, layerwise QK-norm)",
        )
    return family


def hf_rope_parameters(rope: RopeConfig, head_dim: int) -> dict[str, Any]:
    """transformers' ``rope_parameters`` that reproduce our frequencies (NTK becomes a raised theta)."""
    if rope.type == "default":
        return {"rope_type": "default", "rope_theta": float(rope.theta)}
    if rope.type == "ntk":
        return {"rope_type": "default", "rope_theta": float(rope.theta * rope.factor ** (head_dim / (head_dim - 2)))}
    if rope.type == "linear":
        return {"rope_type": "linear", "rope_theta": float(rope.theta), "factor": float(rope.factor)}
    if rope.type == "yarn":
        assert rope.original_max_seq_len is not None  # RopeConfig.validate: YaRN needs it
        return {
            "rope_type": "yarn",
            "rope_theta": float(rope.theta),
            "factor": float(rope.factor),
            "original_max_position_embeddings": int(rope.original_max_seq_len),
            "beta_fast": float(rope.beta_fast),
            "beta_slow": float(rope.beta_slow),
            "attention_factor": float(rope.yarn_attention_factor()),
        }
    raise ConfigError("rope.type", f"cannot export RoPE type {rope.type!r}")


def hf_config_rope(cfg: ModelConfig, per_type: bool) -> dict[str, Any]:
    """The ``rope_parameters`` of a transformers config computing ``cfg``'s RoPE: one mapping, or with
    ``per_type`` (a family with per-layer-type RoPE, Olmo 3) one per layer type, the sliding layers keeping
    plain RoPE at their own theta under ``full_layers_only``."""
    assert cfg.head_dim is not None  # resolved by ModelConfig.__post_init__
    rope = hf_rope_parameters(cfg.rope, cfg.head_dim)
    if not per_type:
        return rope
    plain = {"rope_type": "default", "rope_theta": float(type_theta(cfg.rope, SLIDING))}
    sliding = plain if cfg.rope.full_layers_only else dict(rope)
    return {"full_attention": rope, "sliding_attention": sliding}


LEGACY_ROPE_KEYS = ("rope_scaling", "rope_theta", "original_max_position_embeddings")  # read before rope_parameters


def rescaled_hf_config(raw: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """A copy of the ``config.json`` mapping ``raw`` whose RoPE and context are ``cfg``'s (an extension of the
    model ``raw`` describes): ``rope_parameters`` as :func:`hf_config_rope` writes them and
    ``max_position_embeddings``; the legacy spellings transformers would read first (``rope_scaling``, a
    top-level ``rope_theta`` or ``original_max_position_embeddings``) are dropped. Every other field is kept."""
    family = FAMILIES.get(raw.get("model_type", ""))
    if family is None:
        raise ConfigError(
            "model_type", f"cannot rescale model type {raw.get('model_type')!r}; importable: {', '.join(IMPORTABLE)}"
        )
    hf_family_for(cfg)  # a RoPE the exported class cannot compute (scaled on full layers only outside Olmo 3) fails here
    out = {k: v for k, v in raw.items() if k not in LEGACY_ROPE_KEYS}
    out["rope_parameters"] = hf_config_rope(cfg, family.per_type_rope)
    out["max_position_embeddings"] = int(cfg.max_seq_len)
    return out


def to_hf_config(cfg: ModelConfig, special_ids: dict[str, int] | None = None) -> PreTrainedConfig:
    """The transformers config of the native class for ``cfg`` (see ``hf_family_for``); ``special_ids`` maps
    bos / eos / pad to the tokenizer's ids. ``max_position_embeddings`` is the model's (extended) length."""
    import transformers

    family = hf_family_for(cfg)
    layer_types = cfg.layer_types
    kwargs: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.mlp_width,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        initializer_range=cfg.init_std,
        hidden_act="silu",
        architectures=[family.model_class],
        **{f"{k}_token_id": (special_ids or {}).get(k) for k in ("bos", "eos", "pad")},
    )
    kwargs["rope_parameters"] = hf_config_rope(cfg, family.per_type_rope)
    if family.model_type == "mistral":
        kwargs["sliding_window"] = cfg.window if cfg.swa else None
    elif family.swa == "layer_types":
        kwargs["layer_types"] = layer_types
        kwargs["sliding_window"] = cfg.window if cfg.swa else None
        if family.model_type in ("qwen2", "qwen3"):
            kwargs["use_sliding_window"] = cfg.swa
            kwargs["max_window_layers"] = cfg.n_layers
    if family.model_type == "olmo3" and kwargs["sliding_window"] is None:
        kwargs["sliding_window"] = 4096  # unused: no sliding layers
    return getattr(transformers, family.config_class)(**kwargs)


# ---------------------------------------------------------------------------------------------- import
def _rope_from_hf(params: dict[str, Any], where: str) -> RopeConfig:
    from archpool.model.config import RopeConfig

    if not isinstance(params, dict):
        raise ConfigError(where, f"a mapping of RoPE settings expected, got {type(params).__name__}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = _rope_number(params, "rope_theta", 10_000.0, MAX_ROPE_THETA, where)
    if _rope_number(params, "partial_rotary_factor", 1.0, 1.0, where) != 1.0:
        raise ConfigError(f"{where}.partial_rotary_factor", "partial rotary embeddings are not supported by archpool's RoPE")
    if rope_type == "default":
        return RopeConfig(theta=theta)
    if rope_type == "linear":
        return RopeConfig(theta=theta, type="linear", factor=_rope_number(params, "factor", None, MAX_ROPE_FACTOR, where))
    if rope_type == "yarn":
        if params.get("truncate", True) is False:
            raise ConfigError(f"{where}.truncate", "YaRN without truncation is not supported by archpool's RoPE")
        factor = _rope_number(params, "factor", None, MAX_ROPE_FACTOR, where)
        attention_factor = params.get("attention_factor")
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        if attention_factor is None and mscale and mscale_all:  # transformers' DeepSeek-style rule
            mscale = _rope_number(params, "mscale", None, MAX_ROPE_FACTOR, where)
            mscale_all = _rope_number(params, "mscale_all_dim", None, MAX_ROPE_FACTOR, where)
            get = lambda s, m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            attention_factor = get(factor, mscale) / get(factor, mscale_all)
        return RopeConfig(
            theta=theta,
            type="yarn",
            factor=factor,
            original_max_seq_len=bounded_int(
                params.get("original_max_position_embeddings"), f"{where}.original_max_position_embeddings", MAX_SEQ_LEN
            ),
            beta_fast=_rope_number(params, "beta_fast", 32.0, MAX_ROPE_FACTOR, where),
            beta_slow=_rope_number(params, "beta_slow", 1.0, MAX_ROPE_FACTOR, where),
            attention_factor=None if attention_factor is None else float(attention_factor),
        )
    raise ConfigError(
        f"{where}.rope_type", f"RoPE type {rope_type!r} is not supported by archpool (supported: default, linear, yarn)"
    )


def _rope_number(params: dict[str, Any], key: str, default: float | None, limit: float, where: str) -> float:
    """``params[key]`` as a positive finite float of at most ``limit`` (``default`` when absent, null or 0)."""
    value = params.get(key) or default
    if value is None:
        raise ConfigError(f"{where}.{key}", "missing from the RoPE settings")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= limit:
        raise ConfigError(f"{where}.{key}", f"a positive number of at most {limit:g} expected, got {value!r}")
    return float(value)


def _rope_from_hf_config(hf_config: PreTrainedConfig, layer_types: list[str]) -> RopeConfig:
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if not params:
        return _rope_from_hf({"rope_theta": getattr(hf_config, "rope_theta", 10_000.0)}, "rope_parameters")
    if not (set(params) & {"full_attention", "sliding_attention"}):
        return _rope_from_hf(params, "rope_parameters")
    used = sorted(set(layer_types))
    ropes = {t: _rope_from_hf(params[t], f"rope_parameters.{t}") for t in used if params.get(t)}
    full, sliding = ropes.get("full_attention"), ropes.get("sliding_attention")
    if full is None or sliding is None or full == sliding:
        rope = full or sliding
        if rope is None:
            raise ConfigError("rope_parameters", f"no RoPE settings for the layer types {', '.join(used)}")
        return rope
    if sliding.type == "default" and sliding.theta == full.theta:
        full.full_layers_only = True
        return full
    if sliding.type == "default" and full.type == "default":  # theta raised on full layers only (Olmo 3 ABF)
        full.full_layers_only, full.sliding_theta = True, sliding.theta
        return full
    raise ConfigError(
        "rope_parameters",
        f"per-layer-type RoPE {params} is not expressible in archpool "
        "(only: the same for every layer, scaled on full-attention layers with plain RoPE at the same theta "
        "on sliding ones, or plain RoPE with a different theta per layer type)",
    )


def hf_config_to_archpool(hf_config: PreTrainedConfig) -> ModelConfig:
    """Our ModelConfig for a transformers config of an importable family (or a ConfigError saying why not).
    The layer types follow the family's rule (:func:`archpool.model.features.hf_config_layer_types`)."""
    from archpool.model.config import ModelConfig
    from archpool.model.features import hf_config_layer_types

    model_type = getattr(hf_config, "model_type", None)
    if model_type not in FAMILIES:
        raise ConfigError("model_type", f"cannot import model type {model_type!r}; importable: {', '.join(IMPORTABLE)}")
    family = FAMILIES[model_type]
    act = getattr(hf_config, "hidden_act", "silu")
    if act != "silu":
        raise ConfigError("hidden_act", f"{act!r}: archpool's MLP is SwiGLU (silu)")
    for flag in ("mlp_bias",):
        if getattr(hf_config, flag, False):
            raise ConfigError(flag, "MLP biases are not supported by archpool's model")
    n_layers = int(hf_config.num_hidden_layers)
    window: Any = getattr(hf_config, "sliding_window", None)  # an integer where layers slide
    layer_types = hf_config_layer_types(hf_config)
    if len(layer_types) != n_layers:
        raise ConfigError("layer_types", f"{len(layer_types)} entries for num_hidden_layers={n_layers}")
    has_swa = "sliding_attention" in layer_types
    d_model, n_heads = int(hf_config.hidden_size), int(hf_config.num_attention_heads)
    return ModelConfig(
        vocab_size=int(hf_config.vocab_size),
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=int(getattr(hf_config, "num_key_value_heads", None) or n_heads),
        head_dim=int(getattr(hf_config, "head_dim", None) or d_model // n_heads),
        d_ff=int(hf_config.intermediate_size),
        norm_eps=float(hf_config.rms_norm_eps),
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        max_seq_len=int(hf_config.max_position_embeddings),
        norm=family.norm,
        qk_norm=family.qk_norm,
        window=int(window) if has_swa else None,
        swa_pattern=swa_pattern_name(layer_types),
        rope=_rope_from_hf_config(hf_config, layer_types),
        init_std=float(getattr(hf_config, "initializer_range", 0.02) or 0.02),
        qkv_bias=family.qkv_bias,
    )


def read_hf_config(hf_dir: str | Path) -> dict[str, Any]:
    """``config.json`` of a Hugging Face model directory, refusing custom-code models (``auto_map``)."""
    config_path = Path(hf_dir) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{hf_dir}: no config.json (not a Hugging Face model directory)")
    try:
        raw = read_json_file(config_path)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{config_path}: not a config (a JSON object expected, got {type(raw).__name__})")
    if raw.get("auto_map") or raw.get("trust_remote_code"):
        raise ConfigError(
            "auto_map",
            f"{config_path}: a custom-code model (needs trust_remote_code); archpool never runs a model repository's own code",
        )
    return raw


HF_SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
)


def check_hf_sizes(raw: dict[str, Any], where: str) -> None:
    """The size fields of a raw ``config.json`` within archpool's bounds, checked before transformers builds
    its config (which allocates per-layer lists) and before any weight is allocated."""
    from archpool.model.config import MAX_PARAMS, MAX_SEQ_LEN
    from archpool.model.features import hf_int

    sizes: dict[str, int] = {}
    try:
        for key in HF_SIZE_FIELDS:
            sizes[key] = hf_int(raw, key, 1, limit=MAX_SEQ_LEN if key == "max_position_embeddings" else MAX_DIM)
        for key in ("sliding_window", "max_window_layers", "sliding_window_pattern"):
            hf_int(raw, key, limit=MAX_SEQ_LEN, minimum=0 if key == "max_window_layers" else 1)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e.field}", e.message) from None
    types = raw.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != raw.get("num_hidden_layers", len(types))):
        n = len(types) if isinstance(types, list) else types
        raise ConfigError(f"{where}: layer_types", f"{n} entries for num_hidden_layers={raw.get('num_hidden_layers')}")
    d, layers = sizes["hidden_size"], sizes["num_hidden_layers"]
    rough = layers * (4 * d * d + 3 * d * sizes["intermediate_size"]) + 2 * d * sizes["vocab_size"]
    if rough > 2 * MAX_PARAMS:  # the exact count is checked again by ModelConfig
        raise ConfigError(f"{where}: num_hidden_layers", f"about {rough:,} parameters exceed the budget of {MAX_PARAMS:,}")
