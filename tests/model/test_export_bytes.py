"""An export is byte-stable: the same model exported twice gives the same model.safetensors (the library writes its
metadata in a random order; the header is rewritten in sorted order), so caches keyed by a model's bytes see one
model."""

from __future__ import annotations

import hashlib
import struct

import torch

from archpool.model.config import ModelConfig
from archpool.model.hf import export_hf
from archpool.model.hf.weights import save_safetensors
from archpool.model.model import Decoder


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_save_safetensors_sorts_the_metadata_and_reads_back(tmp_path):
    from safetensors import safe_open

    meta = {k: str(i) for i, k in enumerate("zyxwvutsrq")}
    state = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.ones(4, dtype=torch.int64)}
    digests = set()
    for i in range(4):
        path = tmp_path / f"m{i}.safetensors"
        save_safetensors(state, path, meta)
        digests.add(_digest(path))
        with safe_open(str(path), "pt") as f:
            assert f.metadata() == meta
            assert torch.equal(f.get_tensor("b"), state["b"]) and torch.equal(f.get_tensor("a"), state["a"])
        size = struct.unpack("<Q", path.read_bytes()[:8])[0]
        assert path.read_bytes()[8 : 8 + size].index(b'"q":"9"') < path.read_bytes()[8 : 8 + size].index(b'"z":"0"')
    assert len(digests) == 1


def test_two_exports_of_one_model_are_the_same_bytes(tmp_path):
    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2, max_seq_len=32))
    a, b = export_hf(model, tmp_path / "a"), export_hf(model, tmp_path / "b")
    assert _digest(a / "model.safetensors") == _digest(b / "model.safetensors")
