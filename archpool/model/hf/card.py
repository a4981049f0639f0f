"""The model card (README.md) of a Hugging Face export."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from archpool.model.config import ModelConfig


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
    extension = cfg.extension or {}
    if extension.get("pretrain_seq_len"):
        rows.append(("pretraining context", str(extension["pretrain_seq_len"])))
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
