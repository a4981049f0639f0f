"""``archpool import-gguf``: a GGUF file written here with the ``gguf`` package (a tiny random Llama in float32,
q/k rows permuted as llama.cpp's converter writes them, a byte-level BPE tokenizer) becomes a Hugging Face
directory whose model computes the original's logits in transformers and in archpool, and whose tokenizer
encodes as the original; its provenance names the file's sha256. No network."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("gguf")

from archpool.cli import main
from archpool.io import sha256_file

HEADS, KV_HEADS = 4, 2


def _permute(t, n_head: int):
    """llama.cpp's q/k row order (its converter's ``permute``)."""
    return t.reshape(n_head, 2, t.shape[0] // n_head // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)


def _write_gguf(path, model, tok, tied: bool) -> None:
    import gguf
    import numpy as np

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10_000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // HEADS)
    w.add_vocab_size(cfg.vocab_size)
    spec = json.loads(tok._json)
    tokens = [""] * tok.vocab_size
    for t, i in spec["model"]["vocab"].items():
        tokens[i] = t
    added = {a["id"]: a["content"] for a in spec.get("added_tokens", [])}
    for i, t in added.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in added else 1 for i in range(len(tokens))])  # 3: control, 1: normal
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.bos_id)
    w.add_eos_token_id(tok.eos_id)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    per_layer = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }  # fmt: skip
    for i in range(cfg.num_hidden_layers):
        names.update({f"model.layers.{i}.{a}.weight": f"blk.{i}.{b}.weight" for a, b in per_layer.items()})
    for name, tensor in model.state_dict().items():
        if name not in names:
            continue
        t = tensor.detach().numpy().astype(np.float32)
        if name.endswith("q_proj.weight"):
            t = _permute(t, HEADS)
        elif name.endswith("k_proj.weight"):
            t = _permute(t, KV_HEADS)
        w.add_tensor(names[name], t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def tok():
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    return pseudo_bpe(pseudo_texts())


def _llama(tok, tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
                      initializer_range=0.3, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, tie_word_embeddings=tied,
                      rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("tied", [False, True])
def test_a_gguf_file_imports_as_a_model_computing_the_same_logits(tok, tmp_path, tied):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from archpool.model.hf import import_hf
    from tests.helpers.tokenizers import pseudo_texts

    model = _llama(tok, tied)
    gguf_file = tmp_path / "src" / "tiny.gguf"
    gguf_file.parent.mkdir()
    _write_gguf(gguf_file, model, tok, tied)
    out = tmp_path / "hf"
    assert main(["import-gguf", str(gguf_file), str(out)]) == 0
    text = " ".join(pseudo_texts()[1].split()[:60])
    ids = tok.encode(text)
    assert AutoTokenizer.from_pretrained(str(out), local_files_only=True)(text, add_special_tokens=False).input_ids == ids
    x = torch.tensor([ids])
    imported = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, local_files_only=True).eval()
    assert imported.config.tie_word_embeddings == tied and getattr(imported.config, "quantization_config", None) is None
    with torch.no_grad():
        expect = model(x).logits
        torch.testing.assert_close(imported(x).logits, expect, rtol=0, atol=1e-5)
        torch.testing.assert_close(import_hf(out).eval()(x), expect, rtol=1e-4, atol=1e-4)  # archpool reads it too
    record = json.loads((out / "gguf_import.json").read_text())
    assert record["source_sha256"] == sha256_file(gguf_file) and record["model_type"] == "llama"


def test_an_existing_output_and_a_missing_package_are_one_line_errors(tok, tmp_path, capsys, monkeypatch):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("mine")
    gguf_file = tmp_path / "tiny.gguf"
    _write_gguf(gguf_file, _llama(tok, False), tok, False)
    assert main(["import-gguf", str(gguf_file), str(tmp_path / "out"), "--replace"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a GGUF import" in err[0]
    assert (tmp_path / "out" / "mine.txt").read_text() == "mine"
    import importlib.metadata as md

    real = md.version
    monkeypatch.setattr(
        md, "version", lambda name: real(name) if name != "gguf" else (_ for _ in ()).throw(md.PackageNotFoundError(name))
    )
    assert main(["import-gguf", str(gguf_file), str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'archpool[gguf]'" in err[0]
