"""Weights between archpool's Decoder state dict and transformers' names, and the safetensors files of an HF directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from archpool.errors import CheckpointError, ConfigError
from archpool.model.hf.config import ARCHPOOL_CONFIG_NAME, hf_config_to_archpool
from archpool.safeload import read_json_object

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedConfig, PreTrainedModel

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

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


# The files beside the weights that change what a model computes, generates or reads: its generation settings,
# archpool's config of an export, and the tokenizer files (names as transformers writes them).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "chat_template.jinja")  # fmt: skip
MODEL_FILES = ("generation_config.json", ARCHPOOL_CONFIG_NAME, *TOKENIZER_FILES)


def model_file_hashes(directory: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` of everything that makes a model, from the bytes on disk: an archpool
    checkpoint's config.json and model.safetensors, or an HF directory's config.json and weight files (each
    checked against a MANIFEST.json when there is one), and each of :data:`MODEL_FILES` that lies beside
    them. Two directories with equal hashes compute, generate and tokenize alike; one changed byte of the
    weights, the config (RoPE, context, attention settings), the generation settings or the tokenizer
    gives other hashes. CheckpointError naming a corrupt file; custom-code HF configs are refused."""
    from archpool.io import sha256_cached
    from archpool.model.checkpoint import CONFIG_NAME, is_archpool_checkpoint, verify_checkpoint, verify_files
    from archpool.model.hf.config import read_hf_config

    directory = Path(directory)
    if is_archpool_checkpoint(directory):
        hashes = verify_checkpoint(directory)
    else:
        read_hf_config(directory)
        hashes = verify_files(directory, [f.name for f in weight_files(directory)] + [CONFIG_NAME])
    for name in MODEL_FILES:
        if (directory / name).is_file():
            hashes[name] = sha256_cached(directory / name)
    return hashes


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


def save_safetensors(state: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str]) -> None:
    """``safetensors.torch.save_file`` with the header's metadata in sorted key order. The library writes the
    metadata mapping in a random order, so two saves of the same tensors would differ in bytes, and every
    cache keyed by a model's bytes would take them for two models; the header is rewritten in place (same
    length: the same keys and values, reordered)."""
    import json
    import struct

    from safetensors.torch import save_file

    save_file(state, str(path), metadata=metadata)
    with open(path, "r+b") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        if "__metadata__" in header:
            header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(text) > size:  # never: the same keys and values; keep the library's header then
            return
        f.seek(8)
        f.write(text + b" " * (size - len(text)))
