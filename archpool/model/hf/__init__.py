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

``config.py`` maps configs both ways (the families, the export class, RoPE, size checks), ``weights.py``
parameter names and weight files, ``importer.py`` reads an HF directory, ``exporter.py`` writes one with
its tokenizer and provenance, and ``card.py`` writes its README.md.
"""

from archpool.model.hf.card import model_card
from archpool.model.hf.config import (
    ARCHPOOL_CONFIG_NAME,
    FAMILIES,
    HF_SIZE_FIELDS,
    IMPORTABLE,
    HFFamily,
    check_hf_sizes,
    hf_config_rope,
    hf_config_to_archpool,
    hf_family_for,
    hf_rope_parameters,
    read_hf_config,
    rescaled_hf_config,
    to_hf_config,
)
from archpool.model.hf.exporter import (
    CHAT_TEMPLATE_NAME,
    HF_TOKENIZER_CONFIG,
    TokenizerNotFoundError,
    chat_template,
    export_hf,
    export_metadata,
    export_tokenizer,
    generation_config,
    load_tokenizer,
    special_tokens,
)
from archpool.model.hf.importer import import_hf, read_hf_model_config
from archpool.model.hf.weights import (
    GLOBAL_NAMES,
    INDEX_NAME,
    LAYER_NAMES,
    MODEL_FILES,
    NORM_NAMES,
    PICKLE_SUFFIXES,
    QK_NORM_NAMES,
    QKV_BIAS_NAMES,
    TOKENIZER_FILES,
    check_weight_values,
    hf_model_to_archpool,
    hf_state_to_archpool,
    model_file_hashes,
    name_map,
    weight_files,
    weights_sha256,
)

__all__ = [
    "ARCHPOOL_CONFIG_NAME",
    "CHAT_TEMPLATE_NAME",
    "FAMILIES",
    "GLOBAL_NAMES",
    "HF_SIZE_FIELDS",
    "HF_TOKENIZER_CONFIG",
    "IMPORTABLE",
    "INDEX_NAME",
    "LAYER_NAMES",
    "MODEL_FILES",
    "NORM_NAMES",
    "PICKLE_SUFFIXES",
    "QKV_BIAS_NAMES",
    "QK_NORM_NAMES",
    "TOKENIZER_FILES",
    "HFFamily",
    "TokenizerNotFoundError",
    "chat_template",
    "check_hf_sizes",
    "check_weight_values",
    "export_hf",
    "export_metadata",
    "export_tokenizer",
    "generation_config",
    "hf_config_rope",
    "hf_config_to_archpool",
    "hf_family_for",
    "hf_model_to_archpool",
    "hf_rope_parameters",
    "hf_state_to_archpool",
    "import_hf",
    "load_tokenizer",
    "model_card",
    "model_file_hashes",
    "name_map",
    "read_hf_config",
    "read_hf_model_config",
    "rescaled_hf_config",
    "special_tokens",
    "to_hf_config",
    "weight_files",
    "weights_sha256",
]
