"""import-hf -> export-hf keeps the chat template and special tokens; exports carry provenance (safetensors
metadata and a model card)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors import safe_open  # noqa: E402

import archpool  # noqa: E402
from archpool.cli import main  # noqa: E402
from archpool.model import Decoder, ModelConfig  # noqa: E402
from archpool.model.checkpoint import save_checkpoint  # noqa: E402

TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]


def _hf_tokenizer(template: str | None):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate([*SPECIALS, "user", "assistant", "hi", "there", "the", "cat"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIALS)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="[UNK]", chat_template=template
    )


def _hf_dir(path, template: str | None):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=16, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.bias.normal_(0, 0.1)
    model.save_pretrained(path)
    _hf_tokenizer(template).save_pretrained(path)
    return model


def test_chat_template_and_special_tokens_survive_import_then_export(tmp_path, capsys):
    hf = _hf_dir(tmp_path / "hf", TEMPLATE)
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ckpt")]) == 0
    assert "chat template kept" in capsys.readouterr().out
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert "chat template: kept" in said and "Qwen2ForCausalLM" in said

    original = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert exported.chat_template == original.chat_template == TEMPLATE
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "there"}]
    assert exported.apply_chat_template(chat, tokenize=False) == original.apply_chat_template(chat, tokenize=False)
    assert (exported.eos_token, exported.pad_token, exported.unk_token) == ("<|im_end|>", "<|endoftext|>", "[UNK]")
    assert exported("hi there")["input_ids"] == original("hi there")["input_ids"]

    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 16, (2, 10))
    with torch.no_grad():
        assert (again(ids).logits - hf(ids).logits).abs().max().item() <= 1e-4
    assert again.generation_config.eos_token_id == exported.eos_token_id


def test_a_base_model_without_chat_template_says_so(tmp_path, capsys):
    _hf_dir(tmp_path / "hf", None)
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ckpt")]) == 0
    assert "no chat template" in capsys.readouterr().out
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "out")]) == 0
    assert "chat template: none (a base model" in capsys.readouterr().out
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "out").chat_template is None
    assert "Chat template: none (a base model)." in (tmp_path / "out" / "README.md").read_text()


def test_export_carries_provenance_in_safetensors_metadata_and_model_card(tmp_path, capsys):
    cfg = ModelConfig(
        vocab_size=16, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=32, window=8, swa_pattern="olmo3"
    )
    ckpt = save_checkpoint(
        Decoder(cfg), tmp_path / "ckpt", metadata={"run": "gqa_s0", "stage": "pretrain", "step": 12, "tokens": 4096}
    )
    _hf_tokenizer(None).save_pretrained(ckpt)  # tokenizer.json beside the checkpoint
    assert main(["export-hf", str(ckpt), str(tmp_path / "out")]) == 0
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt"
    assert meta["archpool_version"] == archpool.package_version()
    assert meta["archpool_commit"] == (archpool.git_commit() or "unknown")
    from archpool.io import sha256_json

    assert meta["archpool_config_sha256"] == sha256_json(cfg.to_dict())
    assert (meta["source_run"], meta["source_step"], meta["source_tokens"]) == ("gqa_s0", "12", "4096")
    assert meta["source"] == str(ckpt.resolve()) and meta["source_checkpoint"] == str(ckpt.resolve())
    card = (tmp_path / "out" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers")
    for text in ("# gqa_s0", "| steps | 12 |", "| tokens | 4096 |", "| GQA | yes |", "window 8 on", "MinistralForCausalLM"):
        assert text in card
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["MinistralForCausalLM"]
