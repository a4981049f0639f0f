"""RoPE layouts of a Hugging Face checkpoint's q/k projections, checked before archpool measures it.

transformers' Llama / Olmo / Qwen code rotates *half-split* pairs (dimension ``i`` of a head with
``i + head_dim/2``, ``rotate_half``). Checkpoints written by code that rotates *interleaved* pairs
(``2i`` with ``2i+1``) load without an error and give wrong logits. The two layouts differ only by a
fixed permutation of each head's q/k rows (and of a QK-norm gain over them), so

- a config that declares its layout (``rope_interleaved`` / ``rotary_interleaved`` / ``rope_layout``)
  is taken at its word;
- otherwise the layout is measured: the model's next-token loss on probe text as loaded and with the
  q/k rows permuted from interleaved to half-split; the layout that predicts the text clearly better
  (by :data:`MARGIN` nats) is the checkpoint's.

:func:`check_rope_layout` then accepts a half-split checkpoint, and converts (rewrites the weights in
place) or refuses an interleaved one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError
from archpool.io import atomic_path, atomic_write_json
from archpool.safeload import read_json_object

MARGIN = 0.02  # nats per token: smaller differences leave the layout undetermined (kept as loaded)
PROBE_TEXT = (
    "The river runs past the old mill and under the stone bridge before it reaches the town. "
    "In the morning the market fills with people buying bread, fruit and fish, and by noon the "
    "square is quiet again. The library on the corner keeps its doors open until late in the evening."
)
MAX_ROWS = 8  # probe sequences of the model's context (at most 512 tokens each)
DECLARED_KEYS = ("rope_interleaved", "rotary_interleaved")


def interleaved_to_half(w, n_heads: int, head_dim: int):
    """Rows of a q/k projection (or its bias / QK-norm gain) from interleaved to half-split pairs."""
    rest = w.shape[1:]
    return w.reshape(n_heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(n_heads * head_dim, *rest)


def half_to_interleaved(w, n_heads: int, head_dim: int):
    """The inverse of :func:`interleaved_to_half`."""
    rest = w.shape[1:]
    return w.reshape(n_heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(n_heads * head_dim, *rest)


def _geometry(config: dict[str, Any]) -> tuple[int, int, int]:
    n_heads = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads") or n_heads)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // n_heads)
    return n_heads, n_kv, head_dim


def rope_tensors(name: str, shape: tuple[int, ...], config: dict[str, Any]) -> tuple[int, int] | None:
    """(heads, head_dim) by which tensor ``name`` is permuted between layouts, ``None`` if it is not."""
    n_heads, n_kv, head_dim = _geometry(config)
    parts = name.split(".")
    if len(parts) < 2 or parts[-1] not in ("weight", "bias"):
        return None
    module = parts[-2]
    heads = {"q_proj": n_heads, "k_proj": n_kv, "q_norm": n_heads, "k_norm": n_kv}.get(module)
    if heads is None:
        return None
    if module.endswith("_norm") and shape[0] == head_dim:  # headwise gain (Qwen 3): one head's dims
        return 1, head_dim
    if shape[0] != heads * head_dim:
        return None
    return heads, head_dim


def convert_state(state: dict[str, Any], config: dict[str, Any], to_half: bool = True) -> dict[str, Any]:
    """A state dict with every RoPE-paired tensor permuted (interleaved → half-split, or back)."""
    fn = interleaved_to_half if to_half else half_to_interleaved
    out = {}
    for k, v in state.items():
        g = rope_tensors(k, tuple(v.shape), config)
        out[k] = fn(v, *g).contiguous() if g is not None else v
    return out


def declared_layout(config: dict[str, Any]) -> str | None:
    """``interleaved`` / ``half`` when the config states its layout, else ``None``."""
    for key in DECLARED_KEYS:
        if isinstance(config.get(key), bool):
            return "interleaved" if config[key] else "half"
    layout = config.get("rope_layout")
    if layout in ("interleaved", "half"):
        return layout
    return None


def _nll(model, ids) -> float:
    import torch

    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


def measure_layout(model_dir: str | Path, texts: list[str] | None = None) -> dict[str, Any]:
    """Loss on probe text as loaded (half-split) and after an interleaved → half-split permutation."""
    import torch
    from transformers import AutoModelForCausalLM

    from archpool.tokenizer import Tokenizer

    model_dir = Path(model_dir)
    config = read_json_object(model_dir / "config.json")
    tok = Tokenizer.load(model_dir)
    ids = [i for t in (texts or [PROBE_TEXT]) for i in tok.encode(t)]
    width = min(int(config.get("max_position_embeddings") or len(ids)), 512, len(ids))
    rows = max(1, min(MAX_ROWS, len(ids) // width))
    x = torch.tensor([ids[r * width : (r + 1) * width] for r in range(rows)])
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True).eval()
    as_loaded = _nll(model, x)
    state = model.state_dict()
    model.load_state_dict(convert_state(state, config, to_half=True))
    permuted = _nll(model, x)
    if permuted < as_loaded - MARGIN:
        layout = "interleaved"
    elif as_loaded < permuted - MARGIN:
        layout = "half"
    else:
        layout = "undetermined"
    return dict(layout=layout, nll_as_half=as_loaded, nll_as_interleaved=permuted, tokens=int(x.numel()))


def convert_in_place(model_dir: str | Path) -> list[str]:
    """Rewrite the safetensors files of ``model_dir`` from interleaved to half-split (links replaced by files)."""
    from safetensors.torch import save_file

    from archpool.model.checkpoint import load_safetensors
    from archpool.model.hf import weight_files

    model_dir = Path(model_dir)
    config = read_json_object(model_dir / "config.json")
    written = []
    for f in weight_files(model_dir):
        state = load_safetensors(f)
        converted = convert_state(state, config, to_half=True)
        f.unlink()  # a link into the download cache is replaced, never written through
        with atomic_path(f) as tmp:
            save_file(converted, str(tmp), metadata={"format": "pt"})
        written.append(f.name)
    config["rope_layout"] = "half"
    config["archpool_rope_layout_converted_from"] = "interleaved"
    atomic_write_json(model_dir / "config.json", config)
    return written


def check_rope_layout(model_dir: str | Path, mode: str = "refuse", texts: list[str] | None = None) -> dict[str, Any]:
    """The checkpoint's RoPE layout; an interleaved one is converted (``mode="convert"``) or refused."""
    if mode not in ("refuse", "convert"):
        raise ValueError(f"mode must be 'refuse' or 'convert', got {mode!r}")
    model_dir = Path(model_dir)
    config = read_json_object(model_dir / "config.json")
    declared = declared_layout(config)
    info = {"layout": declared, "declared": True} if declared else {**measure_layout(model_dir, texts), "declared": False}
    if info["layout"] != "interleaved":
        return info
    if mode == "refuse":
        how = (
            "its config declares"
            if declared
            else f"measured: loss {info['nll_as_half']:.3f} as loaded vs {info['nll_as_interleaved']:.3f} permuted"
        )
        raise CheckpointError(
            f"{model_dir}: q/k weights are in the interleaved RoPE layout ({how}); transformers rotates half-split "
            "pairs, so its logits would be wrong; convert it (check_rope_layout(..., mode='convert'))"
        )
    info["converted"] = convert_in_place(model_dir)
    return info
