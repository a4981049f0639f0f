"""Rows recomputed from captured q/k equal the model's own softmax(QKᵀ/√d + mask) and transformers' eager attention."""

import pytest
import torch

from archpool.attention.capture import DecoderProbe
from archpool.attention.rows import attention_rows, full_attention
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder

VARIANTS = {
    "plain": dict(),
    "gqa_headwise_swa": dict(qk_norm="headwise", n_kv_heads=2, swa_pattern=["sliding", "full"], window=8),
    "post_layerwise_swa_all": dict(norm="post", qk_norm="layerwise", swa_pattern="all", window=5),
}


def tiny(**kw):
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=32, **kw)
    return Decoder(cfg, seed=3).eval()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_rows_from_captured_qk_equal_the_models_eager_probabilities(name):
    model = tiny(**VARIANTS[name])
    ids = torch.randint(0, 64, (2, 24))
    with torch.no_grad():
        _, probs = model.forward_with_attentions(ids)
    for layer, lq in enumerate(DecoderProbe(model).capture(ids)):
        torch.testing.assert_close(full_attention(lq.q, lq.k, window=lq.window, scale=lq.scale), probs[layer], atol=1e-6, rtol=0)
    # the last few queries only (the long-context path), in chunks of 2 rows
    for layer, lq in enumerate(DecoderProbe(model).capture(ids, keep_queries=5)):
        assert lq.q.shape[2] == 5 and lq.k.shape[2] == 24
        pad = lambda c: torch.nn.functional.pad(c.probs, (int(c.k_pos[0]), 24 - 1 - int(c.k_pos[-1])))
        got = torch.cat([pad(c) for c in attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, chunk=2)], dim=2)
        torch.testing.assert_close(got, probs[layer][:, :, -5:], atol=1e-6, rtol=0)


def test_sliding_rows_only_hold_the_window():
    model = tiny(**VARIANTS["post_layerwise_swa_all"])
    lq = DecoderProbe(model).capture(torch.randint(0, 64, (1, 30)), keep_queries=4)[0]
    (c,) = list(attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window))
    assert c.k_pos.tolist() == list(range(22, 30))  # keys 22..29 serve queries 26..29 with window 5
    assert torch.allclose(c.probs.sum(-1), torch.ones(()))


def test_row_recomputation_fails_loudly_on_a_wrong_window():
    """Guard that the equality above is not vacuous: ignoring the window breaks it."""
    model = tiny(**VARIANTS["post_layerwise_swa_all"])
    ids = torch.randint(0, 64, (1, 24))
    with torch.no_grad():
        _, probs = model.forward_with_attentions(ids)
    lq = DecoderProbe(model).capture(ids)[0]
    assert (full_attention(lq.q, lq.k, window=None) - probs[0]).abs().max() > 1e-2


@pytest.mark.parametrize("name", list(VARIANTS)[:2] + ["olmo3"])
def test_rows_equal_transformers_eager_output_attentions_of_the_export(name, tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from archpool.attention.capture import HFProbe, load_hf_for_capture
    from archpool.model.hf import export_hf

    kw = VARIANTS.get(name) or dict(norm="post", qk_norm="layerwise", swa_pattern=["sliding", "full"], window=6)
    model = tiny(**kw)
    export_hf(model, tmp_path / "hf")
    eager = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    ids = torch.randint(0, 64, (1, 20))
    with torch.no_grad():
        ref = eager(ids, output_attentions=True).attentions
    for source in (DecoderProbe(model), HFProbe(load_hf_for_capture(tmp_path / "hf"))):
        layers = source.capture(ids)
        assert [lq.window for lq in layers] == [model.layers[i].attn.window for i in range(2)]
        for layer, lq in enumerate(layers):
            torch.testing.assert_close(
                full_attention(lq.q, lq.k, window=lq.window, scale=lq.scale), ref[layer], atol=1e-5, rtol=0
            )
