"""RoPE layouts: the q/k permutation is the one that maps interleaved rotary pairs onto transformers'
half-split ones; the check measures the layout of locally trained models saved in either layout,
and converts (to the original weights exactly) or refuses an interleaved one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from archpool.errors import CheckpointError
from archpool.model.rope_layout import (
    check_rope_layout,
    convert_state,
    declared_layout,
    half_to_interleaved,
    interleaved_to_half,
)


def _rotate(x, freqs, interleaved):
    """Reference RoPE on one head: pairs (2i, 2i+1) or (i, i + d/2) rotated by angle ``freqs[i]``."""
    d = x.shape[-1]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : d // 2], x[..., d // 2 :]
    ra, rb = a * freqs.cos() - b * freqs.sin(), a * freqs.sin() + b * freqs.cos()
    if interleaved:
        return torch.stack([ra, rb], dim=-1).reshape(x.shape)
    return torch.cat([ra, rb], dim=-1)


def test_permutation_maps_interleaved_rope_onto_half_split():
    torch.manual_seed(0)
    n_heads, head_dim, d_model = 3, 8, 12
    w = torch.randn(n_heads * head_dim, d_model)
    x = torch.randn(d_model)
    freqs = torch.rand(head_dim // 2) * 3
    q_inter = (w @ x).reshape(n_heads, head_dim)
    q_half = (interleaved_to_half(w, n_heads, head_dim) @ x).reshape(n_heads, head_dim)
    for h in range(n_heads):  # rotating the permuted rows half-split = permuting the interleaved rotation
        want = interleaved_to_half(_rotate(q_inter[h], freqs, True)[:, None], 1, head_dim)[:, 0]
        assert torch.allclose(_rotate(q_half[h], freqs, False), want, atol=1e-6)
    assert torch.equal(half_to_interleaved(interleaved_to_half(w, n_heads, head_dim), n_heads, head_dim), w)


def test_declared_layouts_are_taken_at_their_word():
    assert declared_layout({"rope_interleaved": True}) == "interleaved"
    assert declared_layout({"rotary_interleaved": False}) == "half"
    assert declared_layout({"rope_layout": "half"}) == "half"
    assert declared_layout({"model_type": "llama"}) is None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """HF exports of two tiny trained architectures (half-split, as transformers computes RoPE)."""
    from tests.helpers.checkpoints import export, train_pair

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rope")
    out = {}
    for arch in ("llama", "olmo"):
        pre, _ = train_pair(root, arch)
        out[arch] = export(pre, root / f"{arch}_hf", pretrained=True)
    return out


def _interleaved_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    state = load_file(str(dst / "model.safetensors"))
    save_file(convert_state(state, config, to_half=False), str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize("arch", ["llama", "olmo"])
def test_layout_detected_on_both_layouts_and_converted(trained, tmp_path, arch):
    from tests.helpers.checkpoints import probe_texts

    half = trained[arch]
    info = check_rope_layout(half, mode="refuse", texts=probe_texts())
    assert info["layout"] == "half" and not info["declared"]
    inter = _interleaved_copy(half, tmp_path / "inter")
    with pytest.raises(CheckpointError, match="interleaved RoPE layout"):
        check_rope_layout(inter, mode="refuse", texts=probe_texts())
    info = check_rope_layout(inter, mode="convert", texts=probe_texts())
    assert info["layout"] == "interleaved" and info["converted"] == ["model.safetensors"]
    assert info["nll_as_interleaved"] < info["nll_as_half"]
    original, converted = load_file(str(half / "model.safetensors")), load_file(str(inter / "model.safetensors"))
    assert original.keys() == converted.keys() and all(torch.equal(original[k], converted[k]) for k in original)
    assert check_rope_layout(inter, mode="refuse")["declared"]  # the converted config states its layout
