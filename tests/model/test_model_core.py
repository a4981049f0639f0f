"""The decoder's axes: attention masking, QK-norm variants, parameter matching, shared init, config validation."""

import math
import warnings

import pytest
import torch

from archpool.errors import ConfigError
from archpool.model import Decoder, ModelConfig
from archpool.model.kernels.dispatch import flex_block_mask
from archpool.model.rope import apply_rope, rope_cos_sin


def tiny(**kw):
    base = dict(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64)
    base.update(kw)
    return ModelConfig(**base)


def naive_attention(attn, x, window):
    """Attention written out with explicit loops over (query, key) pairs: the reference."""
    B, T, _ = x.shape
    H, KV, D = attn.n_heads, attn.n_kv_heads, attn.head_dim
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    if attn.qk_norm == "layerwise":
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = q.view(B, T, H, D).transpose(1, 2)
    k = k.view(B, T, KV, D).transpose(1, 2)
    v = v.view(B, T, KV, D).transpose(1, 2)
    if attn.qk_norm == "headwise":
        q, k = attn.q_norm(q), attn.k_norm(k)
    inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, D, 2).float() / D))
    cos, sin = rope_cos_sin(inv_freq, 1.0, torch.arange(T), q.dtype)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    out = torch.zeros(B, H, T, D)
    for h in range(H):
        kh = h // (H // KV)
        for i in range(T):
            keys = [j for j in range(T) if j <= i and (window is None or i - j < window)]
            scores = torch.stack([(q[:, h, i] * k[:, kh, j]).sum(-1) / math.sqrt(D) for j in keys], -1)
            p = torch.softmax(scores, -1)
            out[:, h, i] = sum(p[:, n, None] * v[:, kh, j] for n, j in enumerate(keys))
    return attn.o_proj(out.transpose(1, 2).reshape(B, T, H * D))


@pytest.mark.parametrize("qk_norm", ["none", "layerwise", "headwise"])
def test_sliding_window_attention_matches_naive_masked_softmax(qk_norm):
    cfg = tiny(qk_norm=qk_norm, swa_pattern="all", window=5)
    model = Decoder(cfg, seed=1)
    attn = model.layers[0].attn
    x = torch.randn(2, 17, cfg.d_model)
    positions = torch.arange(17)
    cos, sin = rope_cos_sin(model.inv_freq_sliding_attention, 1.0, positions, x.dtype)
    mask = model._mask("sliding_attention", positions, None)
    got, _ = attn(x, cos, sin, mask)
    want = naive_attention(attn, x, window=5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    eager = Decoder(cfg, seed=1, attn_impl="eager").layers[0].attn  # the same weights
    got_eager, _ = eager(x, cos, sin, mask)
    torch.testing.assert_close(got_eager, want, atol=1e-5, rtol=1e-5)


def test_full_attention_matches_naive_causal_softmax():
    cfg = tiny()
    model = Decoder(cfg, seed=2)
    x = torch.randn(1, 12, cfg.d_model)
    cos, sin = rope_cos_sin(model.inv_freq_full_attention, 1.0, torch.arange(12), x.dtype)
    got, _ = model.layers[1].attn(x, cos, sin, None)
    torch.testing.assert_close(got, naive_attention(model.layers[1].attn, x, None), atol=1e-5, rtol=1e-5)


def test_window_changes_output_only_beyond_the_window():
    full = Decoder(tiny(), seed=3)
    swa = Decoder(tiny(swa_pattern="all", window=8), seed=3)
    ids = torch.randint(0, 97, (1, 24))
    a, b = full(ids), swa(ids)
    torch.testing.assert_close(a[:, :8], b[:, :8], atol=1e-6, rtol=1e-6)  # every key within the window
    assert (a[:, 8:] - b[:, 8:]).abs().max() > 1e-4


@pytest.mark.parametrize("pattern", ["none", "olmo3", "all"])
def test_kv_cache_decoding_equals_full_forward_beyond_window(pattern):
    cfg = tiny(n_layers=4, swa_pattern=pattern, window=None if pattern == "none" else 6)
    model = Decoder(cfg, seed=4)
    ids = torch.randint(0, 97, (2, 30))
    full = model(ids)
    cache = model.new_cache()
    steps = [model(ids[:, :11], kv_cache=cache)] + [model(ids[:, i : i + 1], kv_cache=cache) for i in range(11, 30)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_eager_path_returns_normalised_causal_probabilities():
    model = Decoder(tiny(n_layers=4, swa_pattern="olmo3", window=4), seed=5)
    ids = torch.randint(0, 97, (1, 10))
    logits, probs = model.forward_with_attentions(ids)
    torch.testing.assert_close(logits, model(ids), atol=1e-5, rtol=1e-5)
    assert len(probs) == 4
    for layer, p in zip(model.layers, probs):
        torch.testing.assert_close(p.sum(-1), torch.ones(1, 4, 10))
        assert torch.all(p.triu(1) == 0)
        if layer.attn.layer_type == "sliding_attention":
            assert torch.all(p.tril(-4) == 0) and p[0, 0, 9, 6] > 0


def test_intra_document_mask_blocks_attention_across_documents():
    model = Decoder(tiny(), seed=6)
    a, b = torch.randint(0, 97, (1, 7)), torch.randint(0, 97, (1, 9))
    doc_ids = torch.tensor([[0] * 7 + [1] * 9])
    packed = model(torch.cat([a, b], 1), doc_ids=doc_ids)
    torch.testing.assert_close(packed[:, :7], model(a), atol=1e-5, rtol=1e-5)
    # the second document sees none of the first, but keeps its absolute positions
    other = model(torch.cat([torch.randint(0, 97, (1, 7)), b], 1), doc_ids=doc_ids)
    torch.testing.assert_close(packed[:, 7:], other[:, 7:], atol=1e-5, rtol=1e-5)


def test_headwise_and_layerwise_qk_norm_coincide_with_one_head_and_differ_with_many():
    one = dict(n_heads=1, n_kv_heads=1, d_model=16, head_dim=16)
    ids = torch.randint(0, 97, (1, 12))
    lw, hw = Decoder(tiny(qk_norm="layerwise", **one), seed=7), Decoder(tiny(qk_norm="headwise", **one), seed=7)
    torch.testing.assert_close(lw(ids), hw(ids), atol=0, rtol=0)
    lw, hw = Decoder(tiny(qk_norm="layerwise"), seed=7), Decoder(tiny(qk_norm="headwise"), seed=7)
    assert (lw(ids) - hw(ids)).abs().max() > 1e-4


def test_headwise_norm_is_invariant_to_per_head_scaling_and_layerwise_is_not():
    ids = torch.randint(0, 97, (1, 12))
    for qk_norm, invariant in (("headwise", True), ("layerwise", False)):
        model = Decoder(tiny(qk_norm=qk_norm), seed=8)
        before = model(ids)
        with torch.no_grad():
            model.layers[0].attn.q_proj.weight[:8] *= 5.0  # rows of head 0 only (head_dim 8)
        after = model(ids)
        same = torch.allclose(before, after, atol=1e-5)
        assert same == invariant, qk_norm


def test_qk_norm_parameters_have_the_documented_shapes():
    lw = Decoder(tiny(qk_norm="layerwise"))
    hw = Decoder(tiny(qk_norm="headwise"))
    assert lw.layers[0].attn.q_norm.weight.shape == (32,) and lw.layers[0].attn.k_norm.weight.shape == (16,)
    assert hw.layers[0].attn.q_norm.weight.shape == (8,) and hw.layers[0].attn.k_norm.weight.shape == (8,)
    assert not hasattr(Decoder(tiny()).layers[0].attn, "q_norm")


@pytest.mark.parametrize("size", ["small", "base", "7b"])
def test_match_params_keeps_parameter_count_within_one_percent(size):
    mha = ModelConfig.preset("llama2", size=size)
    counts = {}
    for kv in (1, 2, mha.n_heads // 4, mha.n_heads // 2, mha.n_heads):
        cfg = ModelConfig.preset("llama2", size=size, n_kv_heads=kv, match_params=True)
        counts[kv] = cfg.num_params()
        assert abs(counts[kv] - mha.num_params()) / mha.num_params() < 0.01, (kv, counts)
    unmatched = ModelConfig.preset("llama2", size=size, n_kv_heads=1).num_params()
    assert unmatched < mha.num_params()


def test_num_params_matches_the_built_module():
    for qk in ("none", "layerwise", "headwise"):
        cfg = tiny(qk_norm=qk, match_params=True, n_kv_heads=1, tie_embeddings=qk == "none")
        assert Decoder(cfg).num_params() == cfg.num_params()


def test_shared_initialisation_is_bit_identical_where_names_and_shapes_agree():
    base = Decoder(ModelConfig.preset("llama3", size="tiny"), seed=11)
    qk = Decoder(ModelConfig.preset("llama3", size="tiny", qk_norm="headwise"), seed=11)
    mha = Decoder(ModelConfig.preset("llama3", size="tiny", n_kv_heads=4), seed=11)
    b = dict(base.named_parameters())
    for other in (qk, mha):
        shared = 0
        for name, p in other.named_parameters():
            if name in b and b[name].shape == p.shape:
                assert torch.equal(b[name], p), name
                shared += 1
        assert shared >= len(b) - 2 * base.cfg.n_layers
    assert not torch.equal(
        b["layers.0.attn.q_proj.weight"], dict(Decoder(base.cfg, seed=12).named_parameters())["layers.0.attn.q_proj.weight"]
    )
    assert b["layers.0.attn.k_proj.weight"].shape != dict(mha.named_parameters())["layers.0.attn.k_proj.weight"].shape


def test_initialisation_does_not_depend_on_global_rng():
    cfg = ModelConfig.preset("olmo3", size="tiny")
    torch.manual_seed(0)
    a = Decoder(cfg, seed=3)
    torch.manual_seed(123)
    b = Decoder(cfg, seed=3)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n


def test_olmo3_pattern_is_three_sliding_then_one_full():
    cfg = ModelConfig.preset("olmo3", size="base")
    assert cfg.layer_types == ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 3 + ["full_attention"]
    assert cfg.window == cfg.max_seq_len // 2
    explicit = tiny(n_layers=3, swa_pattern=["full", "sliding", "full"], window=4)
    assert explicit.layer_types == ["full_attention", "sliding_attention", "full_attention"]


def test_presets_keep_the_papers_axes_and_accept_overrides():
    expect = {
        "llama2": ("pre", "none", False, False),
        "llama3": ("pre", "none", True, False),
        "qwen3": ("pre", "headwise", True, False),
        "olmo2": ("post", "layerwise", False, False),
        "olmo3": ("post", "layerwise", False, True),
    }
    for name, (norm, qk, gqa, swa) in expect.items():
        cfg = ModelConfig.preset(name, size="7b")
        assert (cfg.norm, cfg.qk_norm, cfg.n_kv_heads < cfg.n_heads, cfg.swa) == (norm, qk, gqa, swa)
    assert ModelConfig.preset("llama3", size="7b").d_ff == 14336
    assert ModelConfig.preset("qwen3", size="7b").n_layers == 36
    assert ModelConfig.preset("olmo3", size="7b").max_seq_len == 8192
    assert ModelConfig.preset("olmo2", size="7b").max_seq_len == 4096
    over = ModelConfig.preset("olmo3", size="tiny", n_kv_heads=2, rope_theta=1e6)
    assert over.n_kv_heads == 2 and over.rope.theta == 1e6 and over.norm == "post"


def test_config_round_trips_through_yaml_and_json(tmp_path):
    cfg = ModelConfig.preset("olmo3", size="tiny", rope={"type": "yarn", "factor": 4.0, "original_max_seq_len": 128})
    (tmp_path / "m.json").write_text(__import__("json").dumps(cfg.to_dict()))
    assert ModelConfig.from_file(tmp_path / "m.json") == cfg
    (tmp_path / "m.yaml").write_text("model:\n  preset: qwen3\n  size: tiny\n  n_kv_heads: 4\n")
    loaded = ModelConfig.from_file(tmp_path / "m.yaml")
    assert loaded.qk_norm == "headwise" and loaded.n_kv_heads == 4


def test_window_equal_to_context_is_allowed_with_a_warning():
    # the paper's G_post_LQK_8kv_4k_14k_SWA pretrains at 4K with a 4K window
    with pytest.warns(UserWarning, match="until the context is extended"):
        cfg = tiny(swa_pattern="all", window=64)
    assert cfg.swa and cfg.window == cfg.max_seq_len


def test_post_norm_without_qk_norm_warns():
    with pytest.warns(UserWarning, match="diverged"):
        tiny(norm="post", qk_norm="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny(norm="post", qk_norm="layerwise")


BAD_CONFIGS = [
    ("n_kv_heads", dict(n_heads=4, n_kv_heads=3), "divisible"),
    ("n_kv_heads", dict(n_heads=4, n_kv_heads=8), "between 1 and n_heads"),
    ("window", dict(swa_pattern="all", window=65), "must not exceed the context"),
    ("window", dict(swa_pattern="olmo3"), "need a window"),
    ("norm", dict(norm="sandwich"), "allowed: pre, post"),
    ("qk_norm", dict(qk_norm="rms"), "allowed: none, layerwise, headwise"),
    ("d_model", dict(d_model=-8), "positive integer"),
    ("n_layers", dict(n_layers=0), "positive integer"),
    ("vocab_size", dict(vocab_size=2.5), "expected an integer, got 2.5"),
    ("tie_embeddings", dict(tie_embeddings="no"), "expected true/false, got 'no'"),
    ("rope.full_layers_only", dict(rope={"full_layers_only": "yes"}), "expected true/false"),
    ("head_dim", dict(d_model=30, n_heads=4), "not divisible"),
    ("head_dim", dict(head_dim=7), "even"),
    ("swa_pattern", dict(swa_pattern="every-other", window=8), "unknown pattern"),
    ("swa_pattern", dict(swa_pattern=["full"], window=8), "entries for n_layers"),
    ("swa_pattern[1]", dict(swa_pattern=["full", "chunked"], window=8), "unknown layer type"),
    ("rope.type", dict(rope={"type": "longrope"}), "allowed: default"),
    ("rope.original_max_seq_len", dict(rope={"type": "yarn", "factor": 4.0}), "pretraining context"),
    ("rope.factor", dict(rope={"type": "linear", "factor": 0.5}), ">= 1"),
    ("norm_eps", dict(norm_eps=0.0), "> 0"),
]


@pytest.mark.parametrize("field,overrides,message", BAD_CONFIGS, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_CONFIGS)])
def test_bad_config_is_rejected_naming_the_field(field, overrides, message):
    with pytest.raises(ConfigError) as err:
        tiny(**overrides)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":") and message in str(err.value)


def test_unknown_preset_size_and_field_are_rejected():
    with pytest.raises(ConfigError, match="^preset: unknown preset 'gpt2'"):
        ModelConfig.preset("gpt2")
    with pytest.raises(ConfigError, match="^size: unknown size 'huge'"):
        ModelConfig.preset("llama3", size="huge")
    with pytest.raises(ConfigError, match="^n_kv_head: unknown model config field"):
        ModelConfig.from_dict({"n_kv_head": 2})


def test_flex_attention_forward_matches_sdpa_with_window_and_documents():
    cfg = tiny(n_layers=4, swa_pattern="olmo3", window=5)
    model = Decoder(cfg, seed=9)
    ids = torch.randint(0, 97, (2, 40))
    doc_ids = torch.tensor([[0] * 13 + [1] * 27, [0] * 40])
    flex = Decoder(cfg, seed=9, attn_impl="flex")  # the same weights (init is a function of the seed)
    with torch.no_grad():
        want = model(ids, doc_ids=doc_ids)
        got = flex(ids, doc_ids=doc_ids)
        torch.testing.assert_close(flex(ids), model(ids), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 1, 5, 16, 40])
def test_flex_mask_mod_allows_exactly_the_causal_window_pairs(window):
    T = 16
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    want = (q >= k) & ((q - k < window) if window is not None else True)
    got = flex_block_mask(T, window, None, torch.device("cpu")).mask_mod(0, 0, q, k)
    assert torch.equal(got, want)


def test_flex_mask_mods_compile_once_for_every_window():
    """Compiled FlexAttention guards on the Python values a mask_mod captures: one mask_mod shape for
    full and sliding layers of any window keeps a model (and an evaluation over many windows) at one
    compile instead of one per window, which past dynamo's recompile limit falls back to eager
    FlexAttention and its T×T score matrix."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    @torch.compile(backend=counter, dynamic=False)
    def allowed(mask_mod, q, k):
        return mask_mod(0, 0, q, k)

    q, k = torch.arange(16)[:, None], torch.arange(16)[None, :]
    for window in (None, 3, 5, 16, 40):
        allowed(flex_block_mask(16, window, None, torch.device("cpu")).mask_mod, q, k)
    assert counter.frame_count == 1
