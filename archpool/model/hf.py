"""Hugging Face interoperability, both ways, driven by one table of families and one table of names.

Export picks the transformers class that natively computes the same function as our model (never a
lookalike that silently drops a feature):

| our axes                               | class                                      |
|----------------------------------------|--------------------------------------------|
| pre-norm, no QK-norm, no SWA           | LlamaForCausalLM                           |
| pre-norm, no QK-norm, SWA on all layers| MistralForCausalLM                         |
| pre-norm, no QK-norm, mixed SWA layers | MinistralForCausalLM (``layer_types``)     |
| pre-norm, headwise QK-norm             | Qwen3ForCausalLM (``layer_types`` for SWA) |
| post-norm, layerwise QK-norm, no SWA   | Olmo2ForCausalLM                           |
| post-norm, layerwise QK-norm, SWA      | Olmo3ForCausalLM (per-layer-type RoPE)     |

Anything else (pre-norm + layerwise, post-norm + headwise, post-norm without QK-norm, scaled RoPE on
full layers only outside Olmo 3) raises ``ConfigError`` naming the feature and the nearest class.
Import reads the llama, mistral, ministral, qwen2, qwen3, olmo2 and olmo3 families. transformers
is imported lazily: it is the optional dependency ``archpool[hf]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.errors import CheckpointError, ConfigError
from archpool.model.geometry import type_theta
from archpool.safeload import read_json_file, read_json_object, read_text_bounded
from archpool.study import SLIDING, swa_pattern_name

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedConfig, PreTrainedModel

    from archpool.model.config import ModelConfig, RopeConfig
    from archpool.model.model import Decoder

ARCHPOOL_CONFIG_NAME = "archpool_config.json"  # our config, written beside an export for provenance


@dataclass(frozen=True)
class HFFamily:
    model_type: str
    config_class: str
    model_class: str
    norm: str  # pre | post
    qk_norm: str  # none | layerwise | headwise
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

# Our parameter names -> transformers'. ``{i}`` is the layer index.
GLOBAL_NAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}
LAYER_NAMES = {
    "attn.q_proj.weight": "self_attn.q_proj.weight",
    "attn.k_proj.weight": "self_attn.k_proj.weight",
    "attn.v_proj.weight": "self_attn.v_proj.weight",
    "attn.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
}
QK_NORM_NAMES = {"attn.q_norm.weight": "self_attn.q_norm.weight", "attn.k_norm.weight": "self_attn.k_norm.weight"}
QKV_BIAS_NAMES = {f"attn.{p}_proj.bias": f"self_attn.{p}_proj.bias" for p in "qkv"}
# The trap: in Llama/Qwen/Mistral ``post_attention_layernorm`` is the *pre-MLP* norm; in Olmo 2/3 it
# normalises the attention output.
NORM_NAMES = {
    "pre": {"attn_norm.weight": "input_layernorm.weight", "mlp_norm.weight": "post_attention_layernorm.weight"},
    "post": {"attn_norm.weight": "post_attention_layernorm.weight", "mlp_norm.weight": "post_feedforward_layernorm.weight"},
}


def name_map(cfg: ModelConfig) -> dict[str, str]:
    """Every parameter of our model for ``cfg`` -> its name in the matching transformers model."""
    per_layer = dict(LAYER_NAMES, **NORM_NAMES[cfg.norm])
    if cfg.qk_norm != "none":
        per_layer.update(QK_NORM_NAMES)
    if cfg.qkv_bias:
        per_layer.update(QKV_BIAS_NAMES)
    names = dict(GLOBAL_NAMES)
    for i in range(cfg.n_layers):
        names.update({f"layers.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in per_layer.items()})
    return names


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


def to_hf_config(cfg: ModelConfig, special_ids: dict[str, int] | None = None) -> PreTrainedConfig:
    """The transformers config of the native class for ``cfg`` (see ``hf_family_for``); ``special_ids`` maps
    bos / eos / pad to the tokenizer's ids. ``max_position_embeddings`` is the model's (extended) length."""
    import transformers

    family = hf_family_for(cfg)
    rope = hf_rope_parameters(cfg.rope, cfg.head_dim)
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
    if family.per_type_rope:
        plain = {"rope_type": "default", "rope_theta": float(type_theta(cfg.rope, SLIDING))}
        sliding = plain if cfg.rope.full_layers_only else dict(rope)
        kwargs["rope_parameters"] = {"full_attention": rope, "sliding_attention": sliding}
    else:
        kwargs["rope_parameters"] = rope
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


class TokenizerNotFoundError(CheckpointError):
    """An export whose tokenizer cannot be found: an HF directory without one is unusable, so we refuse."""


def export_hf(
    model_or_checkpoint: Decoder | str | Path,
    out_dir: str | Path,
    tokenizer: Any = None,
    require_tokenizer: bool | None = None,
    provenance: dict[str, str] | None = None,
) -> Path:
    """Write a directory ``AutoModelForCausalLM.from_pretrained`` + ``AutoTokenizer`` load with the native
    class: config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json, with BOS/EOS/PAD declared in all of them.

    ``tokenizer``: a tokenizer.json (or a directory holding one) or an archpool ``Tokenizer``; by default the
    one in or next to a checkpoint directory. ``require_tokenizer`` (default: true for a checkpoint path,
    false for an in-memory model) raises :class:`TokenizerNotFoundError` when there is none, instead of
    writing weights no client can use. A run's tokenizer lives in its data store, which the model layer
    does not read: ``archpool export-hf RUN OUT`` (:func:`archpool.cli.model.resolve_export_source`) finds it
    and passes it here.

    Provenance: model.safetensors' metadata holds the archpool version and commit, the sha256 of the model
    config, the source checkpoint and its training stage/step/tokens, plus ``provenance`` (e.g. the source
    run); README.md is a model card saying the same in words. A chat template and the special tokens of
    the tokenizer's HF files (tokenizer_config.json, chat_template.jinja: an imported model's) are kept."""
    from safetensors.torch import save_file

    from archpool.io import atomic_path, atomic_write_json, atomic_write_text, require_distinct
    from archpool.model.checkpoint import load_checkpoint

    source_dir = None
    if isinstance(model_or_checkpoint, (str, Path)):
        source_dir = Path(model_or_checkpoint)
        require_distinct(source_dir, out_dir, "export directory")
        model = load_checkpoint(source_dir)
    else:
        model = model_or_checkpoint
    hf_family_for(model.cfg)  # an architecture no transformers class computes fails first, naming the feature
    if require_tokenizer is None:
        require_tokenizer = source_dir is not None
    if tokenizer is None:
        tokenizer = _find_tokenizer(source_dir)
    if tokenizer is None and require_tokenizer:
        looked = f" (looked in {source_dir} and {source_dir.parent})" if source_dir is not None else ""
        raise TokenizerNotFoundError(
            f"export: no tokenizer.json for the model{looked}; an export without its "
            "tokenizer is unusable by HF clients: pass --tokenizer / tokenizer=, or export "
            "the run directory (archpool export-hf RUN_DIR OUT finds the run's data store)"
        )
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    special = special_tokens(tok) if tok is not None else {}
    cfg = model.cfg
    hf_config = to_hf_config(cfg, {k: v[1] for k, v in special.items()})
    names = name_map(cfg)
    state = {}
    for ours, tensor in model.state_dict().items():
        if ours.startswith("inv_freq_"):
            continue
        if ours == "lm_head.weight" and cfg.tie_embeddings:
            continue
        if ours not in names:
            raise CheckpointError(f"export: parameter {ours!r} has no transformers name")
        state[names[ours]] = tensor.detach().to("cpu").contiguous()
    dtype = next(iter(state.values())).dtype
    hf_config.dtype = str(dtype).removeprefix("torch.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = export_metadata(cfg, source_dir, provenance)
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(state, str(tmp), metadata=meta)
    hf_config.save_pretrained(out_dir)
    atomic_write_json(out_dir / "generation_config.json", generation_config(special))
    atomic_write_json(out_dir / ARCHPOOL_CONFIG_NAME, cfg.to_dict())
    template = None
    if tok is not None:
        tok_dir = _tokenizer_dir(tokenizer)
        export_tokenizer(tok, out_dir, cfg.max_seq_len, hf_files=tok_dir)
        template = chat_template(tok_dir) if tok_dir is not None else None
    atomic_write_text(out_dir / "README.md", model_card(cfg, hf_config.architectures[0], meta, special, template))
    return out_dir


# ---------------------------------------------------------------------------------------------- provenance
def export_metadata(cfg: ModelConfig, source_dir: Path | None, provenance: dict[str, str] | None) -> dict[str, str]:
    """model.safetensors metadata (strings only): format, archpool version/commit, config hash, source."""
    from archpool.io import sha256_json
    from archpool.version import git_commit, package_version

    meta = {
        "format": "pt",
        "archpool_version": package_version(),
        "archpool_commit": git_commit() or "unknown",
        "archpool_config_sha256": sha256_json(cfg.to_dict()),
    }
    if source_dir is not None:
        meta["source_checkpoint"] = str(source_dir.resolve())
        try:
            recorded = read_json_object(source_dir / "config.json").get("metadata")
        except ConfigError:
            recorded = None
        recorded = recorded if isinstance(recorded, dict) else {}
        for key in ("run", "stage", "step", "tokens", "imported_from", "hf_model_type"):
            if recorded.get(key) is not None:
                meta[f"source_{key}"] = str(recorded[key])
    meta.update({k: str(v) for k, v in (provenance or {}).items() if v is not None})
    return meta


def model_card(
    cfg: ModelConfig, model_class: str, meta: dict[str, str], special: dict[str, tuple[str, int]], template: str | None
) -> str:
    """README.md of an export: what the model is (architecture and the paper's four features), how it was
    trained as far as the checkpoint records, where it came from, and how to load it."""
    from archpool.model.features import features_from_config

    f = features_from_config(cfg, source="export")
    swa = f"window {cfg.window} on {f['n_sliding_layers']}/{cfg.n_layers} layers" if cfg.swa else "none"
    rows = [
        ("class", model_class),
        ("parameters", f"{cfg.num_params():,}"),
        ("layers / d_model / heads", f"{cfg.n_layers} / {cfg.d_model} / {cfg.n_heads} (KV heads {cfg.n_kv_heads})"),
        ("norm placement", cfg.norm),
        ("QK-norm", cfg.qk_norm),
        ("GQA", "yes" if f["gqa"] else "no"),
        ("sliding window", swa),
        ("q/k/v biases", "yes" if cfg.qkv_bias else "no"),
        (
            "RoPE",
            f"{cfg.rope.type}, theta {cfg.rope.theta:g}"
            + (f", factor {cfg.rope.factor:g}" if cfg.rope.type != "default" else ""),
        ),
        ("max_position_embeddings", str(cfg.max_seq_len)),
    ]
    if (cfg.extension or {}).get("pretrain_seq_len"):
        rows.append(("pretraining context", str(cfg.extension["pretrain_seq_len"])))
    for key, label in (("source_stage", "training stage"), ("source_step", "steps"), ("source_tokens", "tokens")):
        if key in meta:
            rows.append((label, meta[key]))
    lines = [
        "---",
        "library_name: transformers",
        "tags: [archpool]",
        "---",
        "",
        f"# {meta.get('source_run') or meta.get('run') or 'archpool export'}",
        "",
        f"A {model_class} exported by archpool {meta['archpool_version']} (commit {meta['archpool_commit']}).",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
        "",
        "## Provenance",
        "",
        *(f"- {k}: `{v}`" for k, v in sorted(meta.items()) if k != "format"),
        "",
        "The same fields are in model.safetensors' metadata; archpool_config.json is archpool's own config.",
        "",
        "## Tokenizer",
        "",
        ", ".join(f"{k} `{v[0]}` (id {v[1]})" for k, v in special.items()) or "No tokenizer was exported.",
        "",
        "Chat template: " + ("kept from the source tokenizer (chat_template.jinja)." if template else "none (a base model)."),
        "",
    ]
    return "\n".join(lines)


def _find_tokenizer(directory: Path | None) -> Path | None:
    if directory is None:
        return None
    for candidate in (directory / "tokenizer.json", directory.parent / "tokenizer.json"):
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def load_tokenizer(tokenizer: Any):
    """An archpool ``Tokenizer`` from a tokenizer.json path, a directory holding one, or a ``Tokenizer``."""
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from archpool.tokenizer import Tokenizer  # a leaf module (tokenizers only): no data pipeline

    return Tokenizer.load(tokenizer)


def special_tokens(tok) -> dict[str, tuple[str, int]]:
    """``{"bos" | "eos" | "pad": (token, id)}`` of an archpool ``Tokenizer`` (its pool's BOS/EOS/PAD)."""
    hf = tok._tok
    out = {}
    for key in ("bos", "eos", "pad"):
        i = getattr(tok, f"{key}_id", None)
        if i is not None:
            out[key] = (hf.id_to_token(int(i)), int(i))
    return out


def generation_config(special: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """generation_config.json: the special ids, greedy by default (``generate`` stops at EOS, pads with PAD)."""
    ids = {f"{k}_token_id": v[1] for k, v in special.items()}
    return {"_from_model_config": False, **ids, "do_sample": False}


HF_TOKENIZER_CONFIG, CHAT_TEMPLATE_NAME = "tokenizer_config.json", "chat_template.jinja"


def _tokenizer_dir(tokenizer: Any) -> Path | None:
    """The directory of a tokenizer given as a path (its HF files may lie beside tokenizer.json)."""
    if not isinstance(tokenizer, (str, Path)):
        return None
    p = Path(tokenizer)
    return p if p.is_dir() else p.parent


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, ``{}`` when there is no such file; ConfigError naming it when damaged."""
    return read_json_object(path) if path.is_file() else {}


def chat_template(directory: Path) -> str | None:
    """The chat template of a HF tokenizer directory: chat_template.jinja, else tokenizer_config.json's."""
    f = Path(directory) / CHAT_TEMPLATE_NAME
    if f.is_file():
        return read_text_bounded(f)
    template = _read_json(Path(directory) / HF_TOKENIZER_CONFIG).get("chat_template")
    return template if isinstance(template, str) and template else None


def export_tokenizer(
    tokenizer: Any, out_dir: str | Path, model_max_length: int | None = None, hf_files: Path | None = None
) -> None:
    """Write tokenizer.json with the tokenizer_config.json / special_tokens_map.json AutoTokenizer needs;
    ``tokenizer`` is a tokenizer.json path (or its directory) or an archpool ``Tokenizer``. ``hf_files``: a
    directory whose tokenizer_config.json (special tokens, chat template, added tokens) is kept, with the
    BOS/EOS/PAD names of ``tokenizer`` written over it, and whose chat_template.jinja is copied."""
    from archpool.io import atomic_write_json, atomic_write_text

    tok = load_tokenizer(tokenizer)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "tokenizer.json", tok._json)
    special = special_tokens(tok)
    names = {f"{k}_token": v[0] for k, v in special.items()}
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **names,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    source = _read_json(hf_files / HF_TOKENIZER_CONFIG) if hf_files is not None else {}
    if source:
        config = {**source, **names}
    if model_max_length:
        config["model_max_length"] = int(model_max_length)
    atomic_write_json(out_dir / HF_TOKENIZER_CONFIG, config)
    special_map = _read_json(hf_files / "special_tokens_map.json") if hf_files is not None else {}
    atomic_write_json(out_dir / "special_tokens_map.json", {**special_map, **names})
    if hf_files is not None and (hf_files / CHAT_TEMPLATE_NAME).is_file():
        atomic_write_text(out_dir / CHAT_TEMPLATE_NAME, read_text_bounded(hf_files / CHAT_TEMPLATE_NAME))


# ---------------------------------------------------------------------------------------------- import
def _rope_from_hf(params: dict[str, Any], where: str) -> RopeConfig:
    from archpool.model.config import RopeConfig

    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = float(params.get("rope_theta") or 10_000.0)
    if float(params.get("partial_rotary_factor", 1.0) or 1.0) != 1.0:
        raise ConfigError(f"{where}.partial_rotary_factor", "partial rotary embeddings are not supported by archpool's RoPE")
    if rope_type == "default":
        return RopeConfig(theta=theta)
    if rope_type == "linear":
        return RopeConfig(theta=theta, type="linear", factor=float(params["factor"]))
    if rope_type == "yarn":
        if params.get("truncate", True) is False:
            raise ConfigError(f"{where}.truncate", "YaRN without truncation is not supported by archpool's RoPE")
        factor = float(params["factor"])
        attention_factor = params.get("attention_factor")
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        if attention_factor is None and mscale and mscale_all:  # transformers' DeepSeek-style rule
            get = lambda s, m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            attention_factor = get(factor, mscale) / get(factor, mscale_all)
        return RopeConfig(
            theta=theta,
            type="yarn",
            factor=factor,
            original_max_seq_len=int(params["original_max_position_embeddings"]),
            beta_fast=float(params.get("beta_fast") or 32.0),
            beta_slow=float(params.get("beta_slow") or 1.0),
            attention_factor=None if attention_factor is None else float(attention_factor),
        )
    raise ConfigError(
        f"{where}.rope_type", f"RoPE type {rope_type!r} is not supported by archpool (supported: default, linear, yarn)"
    )


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
        return full or sliding
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
    window = getattr(hf_config, "sliding_window", None)
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


def hf_state_to_archpool(hf_config: PreTrainedConfig, state: dict[str, torch.Tensor], where: str = "import") -> Decoder:
    """Our Decoder holding a transformers state dict. Biases must be zero (our projections have none).
    ``where`` (the weights file) starts the error when tensors are missing or shaped unlike the config."""
    from archpool.model.checkpoint import check_state
    from archpool.model.model import Decoder

    cfg = hf_config_to_archpool(hf_config)
    theirs_to_ours = {v: k for k, v in name_map(cfg).items()}
    mapped, unexpected = {}, []
    for name, tensor in state.items():
        if name in theirs_to_ours:
            mapped[theirs_to_ours[name]] = tensor
        elif name.endswith(".bias"):
            if bool(tensor.detach().abs().max() > 0):
                raise ConfigError(
                    name,
                    f"non-zero bias: archpool's projections have no biases, so importing "
                    f"{hf_config.model_type} would change the model; refusing",
                )
        elif "rotary_emb" in name:
            continue
        else:
            unexpected.append(name)
    if unexpected:
        raise CheckpointError(
            f"{where}: {len(unexpected)} weights have no archpool name (e.g. {unexpected[:4]}); "
            f"the {hf_config.model_type} checkpoint is not the architecture its config describes"
        )
    if cfg.tie_embeddings:
        mapped.pop("lm_head.weight", None)
    import torch

    with torch.device("meta"):  # shapes first, on a model that allocates nothing: a config naming a
        shell = Decoder(cfg)  # far larger model than its weights is refused without allocating it
    check_state(shell, mapped, where, tied=cfg.tie_embeddings, names=name_map(cfg))
    model = Decoder(cfg)
    model.load_state_dict(mapped, strict=False)
    return model


def hf_model_to_archpool(hf_model: PreTrainedModel) -> Decoder:
    """Our Decoder computing the same logits as an in-memory transformers causal LM."""
    return hf_state_to_archpool(hf_model.config, hf_model.state_dict())


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
INDEX_NAME = "model.safetensors.index.json"


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


def weight_files(hf_dir: str | Path) -> list[Path]:
    """The safetensors files of an HF directory: ``model.safetensors``, or the shards its index names (each
    a plain file name inside the directory). Pickle-only weights are refused, never unpickled."""
    hf_dir = Path(hf_dir)
    single = hf_dir / "model.safetensors"
    if single.is_file():
        return [single]
    index = hf_dir / INDEX_NAME
    if index.is_file():
        return _index_shards(index)
    pickles = sorted(p for p in hf_dir.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
    if pickles:
        raise CheckpointError(
            f"{pickles[0]}: pickle-format weights are refused (unpickling can run arbitrary code); "
            "convert them to model.safetensors"
        )
    raise CheckpointError(f"{hf_dir}: no weights (model.safetensors or {INDEX_NAME})")


def _index_shards(index: Path) -> list[Path]:
    from archpool.names import name_problem

    try:
        weight_map = read_json_object(index).get("weight_map")
    except ConfigError as e:
        raise CheckpointError(f"{index}: unreadable shard index ({e.message})") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: weight_map must map tensor names to shard files")
    shards = []
    for shard in sorted({str(v) for v in weight_map.values()}):
        problem = name_problem(shard)
        if problem is not None:
            raise CheckpointError(f"{index}: weight_map shard {shard!r} {problem} (shards are file names inside {index.parent})")
        if not shard.endswith(".safetensors"):
            raise CheckpointError(f"{index}: weight_map shard {shard!r} is not a .safetensors file")
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index.parent / shard}: shard named in {index.name} is missing")
        shards.append(index.parent / shard)
    return shards


def weights_sha256(hf_dir: str | Path, files: list[Path]) -> str:
    """Content hash of an HF directory's weights, from their bytes (checked against a MANIFEST.json if
    there is one): the file's sha256 for one file, a hash of the per-shard sha256s for several."""
    from archpool.io import sha256_json
    from archpool.model.checkpoint import verify_files

    hashes = verify_files(hf_dir, [f.name for f in files])
    return hashes[files[0].name] if len(files) == 1 else sha256_json(hashes)


def _read_safetensors(files: list[Path]) -> dict[str, torch.Tensor]:
    from archpool.model.checkpoint import load_safetensors

    state: dict[str, Any] = {}
    for f in files:
        state.update(load_safetensors(f))
    return state


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
    from archpool.model.config import MAX_DIM, MAX_PARAMS, MAX_SEQ_LEN

    for key in HF_SIZE_FIELDS:
        value = raw.get(key)
        if value is None:
            continue
        limit = MAX_SEQ_LEN if key == "max_position_embeddings" else MAX_DIM
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= limit or value != int(value):
            raise ConfigError(f"{where}: {key}", f"a positive integer of at most {limit:,}, got {value!r}")
    types = raw.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != raw.get("num_hidden_layers", len(types))):
        n = len(types) if isinstance(types, list) else types
        raise ConfigError(f"{where}: layer_types", f"{n} entries for num_hidden_layers={raw.get('num_hidden_layers')}")
    d, layers = int(raw.get("hidden_size", 1)), int(raw.get("num_hidden_layers", 1))
    rough = layers * (4 * d * d + 3 * d * int(raw.get("intermediate_size", 1))) + 2 * d * int(raw.get("vocab_size", 1))
    if rough > 2 * MAX_PARAMS:  # the exact count is checked again by ModelConfig
        raise ConfigError(f"{where}: num_hidden_layers", f"about {rough:,} parameters exceed the budget of {MAX_PARAMS:,}")


def check_weight_values(state: dict[str, torch.Tensor], where: str) -> None:
    """Refuse weights no trained model has: a weight or bias of an integer or boolean dtype (it would be
    cast to float silently) and any NaN or infinite value (every output would be NaN)."""
    import torch

    for name, t in state.items():
        if not (name.endswith(".weight") or name.endswith(".bias")):
            continue  # buffers such as position ids may be integers
        if not t.is_floating_point():
            raise CheckpointError(f"{where}: tensor {name!r} has dtype {t.dtype}; weights are floating point")
        if t.numel() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise CheckpointError(f"{where}: tensor {name!r} holds {bad:,} NaN/infinite values of {t.numel():,}")


def import_hf(hf_dir: str | Path) -> Decoder:
    """Our Decoder from a transformers model directory (config.json + safetensors), no network. Every
    refusal is a CheckpointError / ConfigError naming the file or field: bad JSON, custom code, an
    unimportable family, head counts, missing / pickle / truncated weights, shapes that do not match."""
    from transformers import AutoConfig

    hf_dir = Path(hf_dir)
    config_path = hf_dir / "config.json"
    raw = read_hf_config(hf_dir)
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:  # before AutoConfig, whose error for unknown types is less direct
        raise ConfigError("model_type", f"cannot import model type {model_type!r}; importable: {', '.join(IMPORTABLE)}")
    check_hf_sizes(raw, str(config_path))
    files = weight_files(hf_dir)
    if (hf_dir / "MANIFEST.json").is_file():
        weights_sha256(hf_dir, files)
    try:
        hf_config = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as e:
        raise ConfigError(str(config_path), f"transformers cannot read this config ({type(e).__name__}: {e})") from None
    try:
        from archpool.model.features import check_head_counts

        check_head_counts(
            int(hf_config.num_attention_heads),
            int(getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads),
        )
        hf_config_to_archpool(hf_config)
    except ConfigError as e:
        raise ConfigError(str(config_path), str(e)) from None
    except (TypeError, ValueError) as e:
        raise ConfigError(str(config_path), f"invalid config value ({e})") from None
    where = files[0] if len(files) == 1 else hf_dir / INDEX_NAME
    state = _read_safetensors(files)
    check_weight_values(state, str(where))
    model = hf_state_to_archpool(hf_config, state, where=str(where))
    provenance = hf_dir / ARCHPOOL_CONFIG_NAME
    if provenance.is_file():  # our own export: keep bookkeeping the HF config cannot carry
        try:
            ours = read_json_file(provenance)
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
        for key in ("family", "extension"):
            if isinstance(ours, dict) and ours.get(key) is not None:
                setattr(model.cfg, key, ours[key])
    return model
