"""``archpool features``: the paper's four features and their count, for presets, archpool configs and
checkpoints, and Hugging Face configs of the real families (docs/paper.md §1)."""

import json

import pytest

from archpool.cli import main
from archpool.errors import ConfigError
from archpool.model import ModelConfig
from archpool.model.features import features, features_from_config, features_from_hf_config

# docs/paper.md "Real model families" table, as (qk_norm, heads, kv heads, any SWA, pretraining ctx). Where the
# table says "—" (Mistral, Gemma 3) or a staged context the config cannot show (Qwen 3, "4096 in its first
# stages"), the context is what the config states: max_position_embeddings.
TABLE = {
    "llama2_7b": ("none", 32, 32, False, 4096),
    "llama3_1_8b": ("none", 32, 8, False, 8192),
    "mistral_7b_v0_1": ("none", 32, 8, True, 32768),
    "qwen3_8b": ("headwise", 32, 8, False, 40960),
    "olmo2_7b": ("layerwise", 32, 32, False, 4096),
    "olmo3_7b": ("layerwise", 32, 32, True, 8192),
    "gemma3_4b_pattern": ("headwise", 8, 4, True, 131072),
    "gemma3_4b_layer_types": ("headwise", 8, 4, True, 131072),
}


def rule(qk_norm, heads, kv, swa, ctx, short=4096):
    """docs/paper.md §1: [any QK-norm] + [n_kv_heads < n_heads] + [any SWA layer] + [short pretraining context]."""
    return (qk_norm != "none") + (kv < heads) + swa + (ctx <= short)


OLMO3_TYPES = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"] * 8
GEMMA3_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 5 + ["sliding_attention"] * 4

# Hand-written config.json files in the shape the real checkpoints ship (trimmed to the fields that matter).
HF_CONFIGS = {
    "llama2_7b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "vocab_size": 32000,
    },
    "llama3_1_8b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "vocab_size": 128256,
    },
    "mistral_7b_v0_1": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "vocab_size": 32000,
    },
    "qwen3_8b": {  # sliding_window set but use_sliding_window false: the Qwen trap, no SWA
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "head_dim": 128,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "max_position_embeddings": 40960,
        "max_window_layers": 36,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": 4096,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    "olmo2_7b": {
        "architectures": ["Olmo2ForCausalLM"],
        "model_type": "olmo2",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "rope_scaling": None,
        "rope_theta": 500000,
        "vocab_size": 100352,
    },
    "olmo3_7b": {  # transformers >= 5 spelling: rope_parameters per layer type, YaRN on full layers only
        "architectures": ["Olmo3ForCausalLM"],
        "model_type": "olmo3",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 65536,
        "sliding_window": 4096,
        "layer_types": OLMO3_TYPES,
        "vocab_size": 100278,
        "rope_parameters": {
            "full_attention": {
                "rope_type": "yarn",
                "rope_theta": 500000,
                "factor": 8.0,
                "attention_factor": 1.2079441541679836,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 8192,
            },
            "sliding_attention": {"rope_type": "default", "rope_theta": 500000},
        },
    },
    "gemma3_4b_pattern": {  # the multimodal wrapper, text model in text_config, older sliding_window_pattern
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "head_dim": 256,
            "num_attention_heads": 8,
            "num_hidden_layers": 34,
            "num_key_value_heads": 4,
            "max_position_embeddings": 131072,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
            "query_pre_attn_scalar": 256,
        },
    },
    "gemma3_4b_layer_types": {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "head_dim": 256,
        "num_attention_heads": 8,
        "num_hidden_layers": 34,
        "num_key_value_heads": 4,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "layer_types": GEMMA3_TYPES,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    },
}


@pytest.mark.parametrize("name", list(HF_CONFIGS))
def test_real_family_configs_give_the_table_count(name, tmp_path):
    qk_norm, heads, kv, swa, ctx = TABLE[name]
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIGS[name]))
    for target in (tmp_path, tmp_path / "config.json"):  # a model dir or the file itself
        f = features(str(target))
        assert (f["qk_norm"], f["n_heads"], f["n_kv_heads"], f["swa"], f["pretrain_ctx"]) == (qk_norm, heads, kv, swa, ctx)
        assert f["gqa"] == (kv < heads) and f["short_ctx"] == (ctx <= 4096)
        assert f["count"] == rule(qk_norm, heads, kv, swa, ctx)


def test_real_family_counts_by_hand():
    """The same rule spelled out per family, so a change in either shows."""
    got = {name: features_from_hf_config(cfg)["count"] for name, cfg in HF_CONFIGS.items()}
    assert got == {
        "llama2_7b": 1,
        "llama3_1_8b": 1,
        "mistral_7b_v0_1": 2,
        "qwen3_8b": 2,
        "olmo2_7b": 2,
        "olmo3_7b": 2,
        "gemma3_4b_pattern": 3,
        "gemma3_4b_layer_types": 3,
    }


def test_norm_placement_follows_the_traps():
    llama = features_from_hf_config(HF_CONFIGS["llama2_7b"])  # post_attention_layernorm is the pre-MLP norm
    olmo = features_from_hf_config(HF_CONFIGS["olmo2_7b"])
    gemma = features_from_hf_config(HF_CONFIGS["gemma3_4b_pattern"])
    assert (llama["norm"], olmo["norm"]) == ("pre", "post")
    assert (gemma["norm"], gemma["norm_placement"]) == ("pre", "sandwich")
    assert any("sandwich" in n for n in gemma["notes"])


def test_sliding_window_rules_per_family():
    olmo3 = features_from_hf_config(HF_CONFIGS["olmo3_7b"])
    assert (olmo3["window"], olmo3["n_sliding_layers"], olmo3["window_ratio"]) == (4096, 24, 0.5)
    assert features_from_hf_config(HF_CONFIGS["gemma3_4b_pattern"])["n_sliding_layers"] == 29
    assert features_from_hf_config(HF_CONFIGS["mistral_7b_v0_1"])["n_sliding_layers"] == 32
    mistral_v02 = dict(HF_CONFIGS["mistral_7b_v0_1"], sliding_window=None)  # null = no window
    assert not features_from_hf_config(mistral_v02)["swa"]
    qwen = features_from_hf_config(HF_CONFIGS["qwen3_8b"])
    assert not qwen["swa"] and qwen["window"] is None and any("use_sliding_window" in n for n in qwen["notes"])
    qwen_on = dict(HF_CONFIGS["qwen3_8b"], use_sliding_window=True, max_window_layers=28)
    assert features_from_hf_config(qwen_on)["n_sliding_layers"] == 8
    gemma2 = {
        "model_type": "gemma2",
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_hidden_layers": 42,
        "sliding_window": 4096,
        "max_position_embeddings": 8192,
    }
    g2 = features_from_hf_config(gemma2)
    assert (g2["n_sliding_layers"], g2["count"], g2["norm_placement"]) == (21, 2, "sandwich")


def test_pretraining_context_reads_original_max_position_embeddings():
    olmo3_v4 = dict(HF_CONFIGS["olmo3_7b"])  # transformers 4.x spelling: rope_theta + rope_scaling
    del olmo3_v4["rope_parameters"]
    olmo3_v4.update(
        rope_theta=500000, rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}
    )
    assert features_from_hf_config(olmo3_v4)["pretrain_ctx"] == 8192
    llama = dict(HF_CONFIGS["llama3_1_8b"])
    llama["rope_parameters"] = dict(llama.pop("rope_scaling"), rope_theta=500000.0)
    assert features_from_hf_config(llama)["pretrain_ctx"] == 8192
    assert features_from_hf_config(HF_CONFIGS["llama2_7b"], short_ctx=2048)["short_ctx"] is False


def test_transformers_written_configs_read_the_same(tmp_path):
    """Configs saved by transformers' own classes (all defaults spelled out) give the same features."""
    transformers = pytest.importorskip("transformers")
    small = dict(vocab_size=64, hidden_size=64, num_hidden_layers=8, num_attention_heads=4, max_position_embeddings=4096)
    cases = {
        "olmo3": (transformers.Olmo3Config(**small, sliding_window=512), (1, 0, 1, 1)),
        "qwen3": (transformers.Qwen3Config(**small, num_key_value_heads=2, head_dim=16), (1, 1, 0, 1)),
        "mistral": (transformers.MistralConfig(**small, num_key_value_heads=4, sliding_window=512), (0, 0, 1, 1)),
        "llama": (transformers.LlamaConfig(**dict(small, max_position_embeddings=8192), num_key_value_heads=1), (0, 1, 0, 0)),
    }
    for name, (cfg, bits) in cases.items():
        cfg.save_pretrained(tmp_path / name)
        f = features(str(tmp_path / name))
        assert (int(f["qk_norm"] != "none"), int(f["gqa"]), int(f["swa"]), int(f["short_ctx"])) == bits, name
        assert f["count"] == sum(bits)


def test_unknown_model_type_names_the_type(tmp_path):
    with pytest.raises(ConfigError, match="'gpt2'"):
        features_from_hf_config({"model_type": "gpt2", "n_head": 12})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "falcon", "num_attention_heads": 8}))
    with pytest.raises(ConfigError, match="'falcon'"):
        features(str(tmp_path))
    with pytest.raises(ConfigError, match="num_hidden_layers: missing"):
        features_from_hf_config({"model_type": "llama", "num_attention_heads": 8})
    with pytest.raises(ConfigError, match="neither an existing file"):
        features("no-such-preset")


# -------------------------------------------------------------------------------- archpool presets and configs
# Expected by hand from presets.py's family table: (QK-norm, GQA, SWA, short ctx: pretrained at half the long ctx).
PRESET_BITS = {
    "llama2": (0, 0, 0, 1),
    "llama3": (0, 1, 0, 0),
    "qwen3": (1, 1, 0, 0),
    "olmo2": (1, 0, 0, 1),
    "olmo3": (1, 0, 1, 0),
}


@pytest.mark.parametrize("size", ["tiny", "7b"])
@pytest.mark.parametrize("preset", list(PRESET_BITS))
def test_every_preset_counts_like_its_family(preset, size):
    f = features(f"{preset}:{size}")
    bits = (int(f["qk_norm"] != "none"), int(f["gqa"]), int(f["swa"]), int(f["short_ctx"]))
    assert bits == PRESET_BITS[preset]
    assert f["count"] == sum(PRESET_BITS[preset])
    if size == "7b":  # at paper scale the preset threshold is the paper's 4096
        assert f["short_ctx_threshold"] == 4096 and f["pretrain_ctx"] in (4096, 8192)
        assert f["count"] == features_from_config(ModelConfig.preset(preset, size="7b"))["count"]


def test_explicit_short_ctx_overrides_the_preset_scale():
    assert features("llama3:tiny")["short_ctx"] is False
    assert features("llama3:tiny", short_ctx=4096)["short_ctx"] is True  # 128 tokens is short at paper scale


def test_archpool_config_file_and_checkpoint(tmp_path):
    from archpool.model import Decoder
    from archpool.model.checkpoint import save_checkpoint

    (tmp_path / "m.yaml").write_text("model:\n  preset: olmo3\n  n_kv_heads: 1\n")
    f = features(str(tmp_path / "m.yaml"), short_ctx=64)
    assert (f["gqa"], f["swa"], f["count"]) == (True, True, 3)
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, max_seq_len=32, qk_norm="headwise")
    save_checkpoint(Decoder(cfg), tmp_path / "ckpt")
    f = features(str(tmp_path / "ckpt"))
    assert (f["qk_norm"], f["short_ctx"], f["count"]) == ("headwise", True, 2)
    extended = cfg.replace(max_seq_len=256, rope=dict(type="yarn", factor=8.0, original_max_seq_len=32))
    assert features_from_config(extended, short_ctx=64)["pretrain_ctx"] == 32


# -------------------------------------------------------------------------------- CLI
def test_cli_features_json(capsys, tmp_path):
    assert main(["features", "olmo3:7b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("qk_norm", "norm", "n_heads", "n_kv_heads", "gqa", "swa", "window", "pretrain_ctx", "short_ctx", "count"):
        assert key in out
    assert (out["qk_norm"], out["norm"], out["window"], out["pretrain_ctx"], out["count"]) == ("layerwise", "post", 4096, 8192, 2)
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIGS["llama3_1_8b"]))
    assert main(["features", str(tmp_path), "llama2:7b", "--json", "--short-ctx", "8192"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["count"] for o in out] == [2, 1]


def test_cli_features_text_and_errors(capsys):
    assert main(["features", "qwen3"]) == 0
    text = capsys.readouterr().out
    assert "headwise" in text and "count        2" in text
    assert main(["features", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_cli_model_show_reports_params_and_match_params(capsys):
    assert main(["model", "show", "llama3", "--set", "match_params=true", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = ModelConfig.preset("llama3", match_params=True)
    assert out["params"]["params"] == cfg.num_params() and out["params"]["mlp_width"] == cfg.mlp_width > cfg.d_ff
    assert abs(out["params"]["params_vs_mha"]) < 0.01
    assert main(["model", "show", "olmo3:7b"]) == 0
    text = capsys.readouterr().out
    assert "parameters: 7," in text and "family: olmo3" in text
