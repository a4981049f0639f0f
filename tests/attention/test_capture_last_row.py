"""The attention probes apply the LM head to the last position alone (the retrieval-head search decodes from it, the
statistics read no logits), for archpool's decoder and for a transformers model, and decode what the full forward
decodes."""

from __future__ import annotations

import pytest
import torch

from archpool.attention.capture import probe_for


def _models():
    from transformers import LlamaConfig, LlamaForCausalLM

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    torch.manual_seed(0)
    hf = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.3)  # fmt: skip
    return {
        "archpool": Decoder(ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, max_seq_len=128), seed=3).eval(),
        "transformers": LlamaForCausalLM(hf).eval(),
    }


@pytest.mark.parametrize("kind", ["archpool", "transformers"])
def test_a_probe_runs_the_head_on_one_row_and_decodes_as_the_full_forward(kind):
    model = _models()[kind]
    probe = probe_for(model)
    head = model.lm_head
    rows: list[int] = []
    head.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[1]))
    ids = torch.randint(0, 97, (1, 40))
    state = probe.start(ids)
    assert rows == [1]
    with torch.no_grad():
        full = model(ids).logits if kind == "transformers" else model(ids)
    torch.testing.assert_close(state.last_logits, full[:, -1], rtol=1e-5, atol=1e-5)
    token = int(state.last_logits[0].argmax())
    state.step(token)
    with torch.no_grad():
        again = torch.cat([ids, torch.tensor([[token]])], 1)
        full = model(again).logits if kind == "transformers" else model(again)
    torch.testing.assert_close(state.last_logits, full[:, -1], rtol=1e-5, atol=1e-5)
    rows.clear()
    layers = probe.capture(ids, keep_queries=4)
    assert rows == [1] and len(layers) == 2 and layers[0].q.shape[2] == 4
