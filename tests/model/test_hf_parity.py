"""Hugging Face interop: transformers models imported into archpool, and archpool models exported to
transformers, give the same logits; export picks the native class; unsupported variants fail loudly."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from archpool.errors import ConfigError  # noqa: E402
from archpool.model import Decoder, ModelConfig  # noqa: E402
from archpool.model.hf import export_hf, hf_model_to_archpool, import_hf, to_hf_config  # noqa: E402

TOL = 1e-4
VOCAB, SEQ = 101, 48
IMPLS = ["eager", "sdpa"]
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10_000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


def hf_config(model_type, **kw):
    base = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        initializer_range=0.1,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    base.update(kw)
    return transformers.AutoConfig.for_model(model_type, **base)


def perturb_(model, seed=0):
    """Move every parameter (norm weights included) off its initial value, so a swapped name shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def random_ids(seed=0, batch=2, seq=SEQ):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def max_diff(a, b):
    return (a - b).abs().max().item()


# (model_type, config overrides): real layouts at tiny size, incl. GQA, linear and YaRN RoPE, and Olmo 3's
# sliding window (8 tokens, 3 of 4 layers) with YaRN on full layers only, on sequences longer than the window.
HF_CASES = {
    "llama-mha": ("llama", dict(rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})),
    "llama-gqa-linear": (
        "llama",
        dict(num_key_value_heads=2, rope_parameters={"rope_type": "linear", "rope_theta": 10_000.0, "factor": 2.0}),
    ),
    "llama-gqa-tied": ("llama", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "qwen3-gqa-yarn": ("qwen3", dict(num_key_value_heads=2, head_dim=16, rope_parameters=dict(YARN))),
    "qwen3-swa": (
        "qwen3",
        dict(num_key_value_heads=2, head_dim=16, use_sliding_window=True, sliding_window=8, max_window_layers=2),
    ),
    "olmo2-mha": ("olmo2", dict(rope_parameters={"rope_type": "default", "rope_theta": 500_000.0})),
    "olmo2-gqa-yarn": ("olmo2", dict(num_key_value_heads=2, rope_parameters=dict(YARN, attention_factor=1.3))),
    "olmo3-swa-yarn-full": (
        "olmo3",
        dict(
            sliding_window=8,
            rope_parameters={
                "full_attention": dict(YARN, rope_theta=500_000.0),
                "sliding_attention": {"rope_type": "default", "rope_theta": 500_000.0},
            },
        ),
    ),
    "olmo3-gqa-swa-linear": (
        "olmo3",
        dict(
            num_key_value_heads=2,
            sliding_window=8,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "rope_theta": 10_000.0, "factor": 2.0},
                "sliding_attention": {"rope_type": "linear", "rope_theta": 10_000.0, "factor": 2.0},
            },
        ),
    ),
    "mistral-swa": ("mistral", dict(num_key_value_heads=2, sliding_window=8)),
    "ministral-mixed": (
        "ministral",
        dict(num_key_value_heads=2, sliding_window=8, head_dim=16, layer_types=["sliding_attention", "full_attention"] * 2),
    ),
}
NATIVE = {
    "llama": "LlamaForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "olmo3": "Olmo3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "ministral": "MinistralForCausalLM",
}


@pytest.fixture(scope="module")
def hf_models():
    models = {}
    for name, (model_type, kw) in HF_CASES.items():
        torch.manual_seed(0)
        models[name] = perturb_(transformers.AutoModelForCausalLM.from_config(hf_config(model_type, **kw))).eval()
    return models


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", list(HF_CASES))
def test_transformers_model_imported_into_archpool_gives_same_logits(case, impl, hf_models, tmp_path):
    hf = hf_models[case]
    hf.set_attn_implementation(impl)
    ids = random_ids()
    ours = hf_model_to_archpool(hf).eval()
    with torch.no_grad():
        want = hf(ids).logits
        assert max_diff(ours(ids), want) <= TOL
        # the same through a directory as transformers >= 5 writes it (rope_parameters per layer type included)
        hf.save_pretrained(tmp_path)
        assert max_diff(import_hf(tmp_path).eval()(ids), want) <= TOL
    if "swa" in case:
        assert ours.cfg.swa and ours.cfg.window == 8 and SEQ > 8
    if case == "olmo3-swa-yarn-full":
        assert ours.cfg.rope.type == "yarn" and ours.cfg.rope.full_layers_only and ours.cfg.swa_pattern == "olmo3"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", list(HF_CASES))
def test_round_trip_exports_back_to_the_same_native_class(case, impl, hf_models, tmp_path):
    model_type, _ = HF_CASES[case]
    ours = hf_model_to_archpool(hf_models[case]).eval()
    export_hf(ours, tmp_path)
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=impl, output_loading_info=True)
    assert type(hf).__name__ == NATIVE[model_type]
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = random_ids(1)
    with torch.no_grad():
        assert max_diff(hf.eval()(ids).logits, ours(ids)) <= TOL


def tiny(**kw):
    base = dict(vocab_size=VOCAB, d_model=64, n_layers=4, n_heads=4, max_seq_len=64, init_std=0.1)
    base.update(kw)
    return ModelConfig(**base)


# archpool configs -> the class that must load them.
EXPORT_CASES = {
    "llama-mha": (tiny(), "LlamaForCausalLM"),
    "llama-gqa-yarn": (tiny(n_kv_heads=2, rope=dict(type="yarn", factor=4.0, original_max_seq_len=16)), "LlamaForCausalLM"),
    "llama-ntk-tied": (tiny(n_kv_heads=2, tie_embeddings=True, rope=dict(type="ntk", factor=4.0)), "LlamaForCausalLM"),
    "llama-match-params": (tiny(n_kv_heads=1, match_params=True), "LlamaForCausalLM"),
    "mistral-swa-all": (tiny(n_kv_heads=2, window=8, swa_pattern="all"), "MistralForCausalLM"),
    "ministral-swa-olmo3": (tiny(n_kv_heads=2, window=8, swa_pattern="olmo3"), "MinistralForCausalLM"),
    "qwen3-gqa-linear": (tiny(qk_norm="headwise", n_kv_heads=2, rope=dict(type="linear", factor=2.0)), "Qwen3ForCausalLM"),
    "qwen3-swa-layer-types": (
        tiny(
            qk_norm="headwise",
            n_kv_heads=2,
            window=8,
            swa_pattern=["full", "sliding", "sliding", "full"],
            rope=dict(type="yarn", factor=4.0, original_max_seq_len=16, attention_factor=1.25),
        ),
        "Qwen3ForCausalLM",
    ),
    "olmo2-yarn": (
        tiny(norm="post", qk_norm="layerwise", rope=dict(type="yarn", factor=4.0, original_max_seq_len=16)),
        "Olmo2ForCausalLM",
    ),
    "olmo2-head-dim": (tiny(norm="post", qk_norm="layerwise", n_kv_heads=2, head_dim=8), "Olmo2ForCausalLM"),
    "olmo3-yarn-full-only": (
        tiny(
            norm="post",
            qk_norm="layerwise",
            window=8,
            swa_pattern="olmo3",
            rope=dict(theta=500_000.0, type="yarn", factor=8.0, original_max_seq_len=16, full_layers_only=True),
        ),
        "Olmo3ForCausalLM",
    ),
    "olmo3-gqa-ntk": (
        tiny(norm="post", qk_norm="layerwise", n_kv_heads=2, window=8, swa_pattern="olmo3", rope=dict(type="ntk", factor=4.0)),
        "Olmo3ForCausalLM",
    ),
    "olmo3-theta-full-only": (
        tiny(
            norm="post",
            qk_norm="layerwise",
            window=8,
            swa_pattern="olmo3",
            rope=dict(theta=160_000.0, full_layers_only=True, sliding_theta=10_000.0),
        ),
        "Olmo3ForCausalLM",
    ),
    "olmo3-any-layer-types": (
        tiny(norm="post", qk_norm="layerwise", window=8, swa_pattern=["sliding", "full", "sliding", "full"]),
        "Olmo3ForCausalLM",
    ),
    "qwen2-qkv-bias-gqa": (tiny(qkv_bias=True, n_kv_heads=2), "Qwen2ForCausalLM"),
    "qwen2-qkv-bias-swa": (tiny(qkv_bias=True, n_kv_heads=2, window=8, swa_pattern="olmo3"), "Qwen2ForCausalLM"),
}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_archpool_model_exported_loads_natively_with_same_logits(case, impl, tmp_path):
    cfg, cls = EXPORT_CASES[case]
    ours = perturb_(Decoder(cfg, seed=1)).eval()
    export_hf(ours, tmp_path)
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation=impl, output_loading_info=True)
    assert type(hf).__name__ == cls
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = random_ids(2)
    with torch.no_grad():
        want = ours(ids)
        assert max_diff(hf.eval()(ids).logits, want) <= TOL
        back = import_hf(tmp_path).eval()
        assert max_diff(back(ids), want) <= TOL
    for field in ("norm", "qk_norm", "n_kv_heads", "head_dim", "window", "tie_embeddings", "layer_types"):
        assert getattr(back.cfg, field) == getattr(cfg, field), field
    assert back.cfg.mlp_width == cfg.mlp_width


def test_parity_tolerance_detects_a_rope_mismatch():
    """The 1e-4 tolerance is meaningful: a 1% theta change moves these logits far more."""
    ours = perturb_(Decoder(tiny(qk_norm="headwise"), seed=1)).eval()
    ids = random_ids()
    with torch.no_grad():
        a = ours(ids)
        ours.set_rope(dict(theta=10_100.0))
        assert max_diff(ours(ids), a) > 100 * TOL


# -------------------------------------------------------------------------------- what must not pass silently
@pytest.mark.parametrize(
    "cfg, feature, nearest",
    [
        (tiny(norm="pre", qk_norm="layerwise"), "layerwise", "Qwen3ForCausalLM"),
        (tiny(norm="post", qk_norm="headwise"), "headwise", "Olmo2ForCausalLM"),
        (
            tiny(
                norm="pre",
                qk_norm="headwise",
                window=8,
                swa_pattern="olmo3",
                rope=dict(type="yarn", factor=4.0, original_max_seq_len=16, full_layers_only=True),
            ),
            "full-attention layers only",
            "Olmo3ForCausalLM",
        ),
        (
            tiny(norm="pre", window=8, swa_pattern="all", rope=dict(type="linear", factor=2.0, full_layers_only=True)),
            "full-attention layers only",
            "Olmo3ForCausalLM",
        ),
    ],
)
def test_export_of_variant_without_native_class_names_feature_and_nearest_class(cfg, feature, nearest, tmp_path):
    with pytest.raises(ConfigError, match=feature) as err:
        export_hf(Decoder(cfg), tmp_path)
    assert nearest in str(err.value)
    assert not (tmp_path / "model.safetensors").exists()


def test_export_of_post_norm_without_qk_norm_is_refused():
    with pytest.warns(UserWarning):
        cfg = tiny(norm="post", qk_norm="none")
    with pytest.raises(ConfigError, match="post-norm without QK-norm.*Olmo2ForCausalLM"):
        to_hf_config(cfg)


def test_qwen2_with_qkv_biases_round_trips_through_import_and_export(tmp_path):
    torch.manual_seed(0)
    hf = perturb_(transformers.AutoModelForCausalLM.from_config(hf_config("qwen2", num_key_value_heads=2))).eval()
    assert hf.model.layers[1].self_attn.k_proj.bias.abs().max() > 0  # real Qwen2 checkpoints carry biases
    ids = random_ids()
    with torch.no_grad():
        want = hf(ids).logits
        ours = hf_model_to_archpool(hf).eval()
        assert ours.cfg.qkv_bias and max_diff(ours(ids), want) <= TOL
    hf.save_pretrained(tmp_path / "qwen2")
    back = import_hf(tmp_path / "qwen2").eval()
    export_hf(back, tmp_path / "out")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(again).__name__ == "Qwen2ForCausalLM"
    with torch.no_grad():
        assert max_diff(back(ids), want) <= TOL
        assert max_diff(again(ids).logits, want) <= TOL


def test_qkv_bias_model_trains_from_zero_biases_and_exports_only_as_qwen2():
    cfg = tiny(qkv_bias=True)
    model = Decoder(cfg)
    biases = [p for n, p in model.named_parameters() if n.endswith("_proj.bias")]
    assert len(biases) == 3 * cfg.n_layers and all(not b.any() for b in biases)
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params()
    assert "qkv_bias" in cfg.to_dict() and "qkv_bias" not in tiny().to_dict()
    assert ModelConfig.from_dict(cfg.to_dict()).qkv_bias
    assert to_hf_config(cfg).architectures == ["Qwen2ForCausalLM"]
    with pytest.raises(ConfigError, match="qkv_bias.*Qwen2ForCausalLM"):
        to_hf_config(tiny(qkv_bias=True, qk_norm="headwise"))


def test_import_refuses_unknown_model_type_and_unsupported_rope(tmp_path):
    gemma = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma2Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        )
    )
    gemma.save_pretrained(tmp_path / "gemma")
    with pytest.raises(ConfigError, match="'gemma2'"):
        import_hf(tmp_path / "gemma")
    llama31 = hf_config(
        "llama",
        max_position_embeddings=128,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    )
    with pytest.raises(ConfigError, match="'llama3'"):
        hf_model_to_archpool(transformers.AutoModelForCausalLM.from_config(llama31))
