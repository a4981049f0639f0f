"""Fixtures shared by the Hugging Face import tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def hf_dir(tmp_path):
    """A valid Llama-family HF directory (4 heads, 2 KV heads), written by our exporter."""
    from archpool.model import Decoder, ModelConfig
    from archpool.model.hf import export_hf

    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64)
    return export_hf(Decoder(cfg, seed=1), tmp_path / "hf")
