"""Per-layer geometry (window and RoPE theta of each layer) against the configs of every preset
family, and the attention-kernel table: every kernel gives SDPA's output."""

from __future__ import annotations

import pytest
import torch

from archpool.model.config import ModelConfig, RopeConfig
from archpool.model.geometry import layer_windows, theta_for, type_theta, window_of
from archpool.model.kernels import ATTENTION_FUNCTIONS
from archpool.model.kernels.dispatch import flex_block_mask
from archpool.model.kernels.local import LocalMask
from archpool.model.model import Decoder
from archpool.model.presets import FAMILIES
from archpool.model.rope import rope_frequencies
from archpool.study import FULL, SLIDING
from archpool.train.config import ExtensionConfig
from archpool.train.extension_plan import extension_rope

FULL_FAMILIES = ["llama2", "llama3", "qwen3", "olmo2"]


def test_every_preset_family_is_covered():
    assert sorted(FAMILIES) == sorted([*FULL_FAMILIES, "olmo3"])


@pytest.mark.parametrize("family", FULL_FAMILIES)
def test_full_attention_families_have_no_window_and_one_theta(family):
    cfg = ModelConfig.preset(family, size="small")
    assert set(cfg.layer_types) == {FULL}
    assert [window_of(cfg, i) for i in range(cfg.n_layers)] == layer_windows(cfg) == [None] * cfg.n_layers
    assert {theta_for(cfg, i) for i in range(cfg.n_layers)} == {cfg.rope.theta}


def test_olmo3_slides_on_three_layers_of_four():
    cfg = ModelConfig.preset("olmo3", size="base")
    assert cfg.window is not None and cfg.n_layers == 8
    want = [cfg.window, cfg.window, cfg.window, None] * 2  # 3 sliding : 1 full
    assert [window_of(cfg, i) for i in range(cfg.n_layers)] == layer_windows(cfg) == want
    assert [t == SLIDING for t in cfg.layer_types] == [w is not None for w in want]
    assert {theta_for(cfg, i) for i in range(cfg.n_layers)} == {cfg.rope.theta}


def test_model_layers_take_their_window_from_the_geometry():
    cfg = ModelConfig.preset("olmo3", size="tiny")
    model = Decoder(cfg, seed=0)
    assert [block.attn.window for block in model.layers] == layer_windows(cfg)


@pytest.mark.parametrize("recipe", ["ntk", "abf"])
def test_a_theta_raise_on_full_layers_only_keeps_the_sliding_layers_theta(recipe):
    cfg = ModelConfig.preset("olmo3", size="tiny")
    ext = ExtensionConfig(recipe=recipe, theta_ratio=16, full_layers_only=True)
    extended = cfg.replace(rope=extension_rope(cfg.rope, ext, 128, 512))
    thetas = [theta_for(extended, i) for i in range(cfg.n_layers)]
    assert thetas == [cfg.rope.theta if t == SLIDING else 16 * cfg.rope.theta for t in cfg.layer_types]
    again = extended.replace(rope=extension_rope(extended.rope, ext, 512, 1024))  # a second raise
    assert [theta_for(again, i) for i in range(cfg.n_layers)] == [
        cfg.rope.theta if t == SLIDING else 256 * cfg.rope.theta for t in cfg.layer_types
    ]


def test_a_theta_raise_on_every_layer_moves_every_theta():
    cfg = ModelConfig.preset("olmo3", size="tiny")
    extended = cfg.replace(rope=extension_rope(cfg.rope, ExtensionConfig(recipe="abf", theta_ratio=16), 128, 512))
    assert {theta_for(extended, i) for i in range(cfg.n_layers)} == {16 * cfg.rope.theta}


def test_rope_frequencies_rotate_by_the_layer_theta():
    rope = RopeConfig(theta=160_000.0, full_layers_only=True, sliding_theta=10_000.0)
    for kind in (FULL, SLIDING):
        inv_freq, scale = rope_frequencies(rope, 16, kind)
        want = 1.0 / (type_theta(rope, kind) ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))
        assert scale == 1.0 and torch.equal(inv_freq, want)


# ---------------------------------------------------------------------------------------------- kernels
def test_the_kernel_table_names_what_training_may_select():
    assert list(ATTENTION_FUNCTIONS) == ["sdpa", "eager", "flex"]
    assert ATTENTION_FUNCTIONS.training() == ("sdpa", "flex")
    with pytest.raises(ValueError, match="attn_impl: unknown 'flash3'; allowed: sdpa, eager, flex"):
        Decoder(ModelConfig.preset("llama2", size="tiny"), attn_impl="flash3")


def _qkv(T: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, T, 8, generator=g)
    k, v = torch.randn(2, 2, T, 8, generator=g), torch.randn(2, 2, T, 8, generator=g)
    return q, k, v


def _docs(T: int) -> torch.Tensor:
    return torch.tensor([[0] * 10 + [1] * (T - 10), [0] * 5 + [1] * 7 + [2] * (T - 12)])


@pytest.mark.parametrize("impl", list(ATTENTION_FUNCTIONS))
@pytest.mark.parametrize(("window", "documents"), [(None, False), (5, False), (None, True), (5, True)])
def test_every_kernel_in_the_table_gives_sdpas_output(impl, window, documents):
    q, k, v = _qkv()
    T = q.shape[2]
    doc_ids = _docs(T) if documents else None
    local = LocalMask(window, doc_ids)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=local.dense(T, T, q.device), enable_gqa=True)
    mask = flex_block_mask(T, window, doc_ids, q.device) if impl == "flex" else local  # flex: a forward on CPU
    torch.testing.assert_close(ATTENTION_FUNCTIONS[impl](q, k, v, mask), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["eager", "flex"])
def test_every_kernel_gives_sdpas_logits_in_the_model(impl):
    cfg = ModelConfig.preset("olmo3", size="tiny", window=8)
    ids = torch.randint(0, cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = Decoder(cfg, seed=3)(ids)
        got = Decoder(cfg, seed=3, attn_impl=impl)(ids)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
