"""``archpool export-hf`` / ``import-hf`` and ``archpool.load``: checkpoints and HF directories, tokenizer included."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import archpool  # noqa: E402
from archpool.cli import main  # noqa: E402
from archpool.model import Decoder, ModelConfig  # noqa: E402
from archpool.model.checkpoint import is_archpool_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402


def tiny_cfg(**kw):
    base = dict(
        vocab_size=64,
        d_model=32,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        max_seq_len=64,
        norm="post",
        qk_norm="layerwise",
        window=8,
        swa_pattern="olmo3",
        init_std=0.1,
        family="olmo3",
    )
    base.update(kw)
    return ModelConfig(**base)


def write_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<|bos|>", "<|eos|>", "<|pad|>", "[UNK]"]
    vocab = {w: i for i, w in enumerate(specials + ["the", "cat", "sat", "on", "a", "mat"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return tok


def test_cli_export_then_import_round_trips_logits_and_tokenizer(tmp_path, capsys):
    model = Decoder(tiny_cfg(), seed=2).eval()
    save_checkpoint(model, tmp_path / "ckpt")
    tok = write_tokenizer(tmp_path / "ckpt" / "tokenizer.json")
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf")]) == 0
    assert "Olmo3ForCausalLM" in capsys.readouterr().out

    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "Olmo3ForCausalLM"
    ids = torch.randint(0, 64, (2, 40))
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max().item() <= 1e-4
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert isinstance(hf_tok, transformers.PreTrainedTokenizerFast)
    assert hf_tok("the cat sat")["input_ids"] == tok.encode("the cat sat").ids
    assert (hf_tok.bos_token, hf_tok.eos_token, hf_tok.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert (hf.config.bos_token_id, hf.config.eos_token_id, hf.config.pad_token_id) == (0, 1, 2)
    assert hf.generation_config.eos_token_id == 1 and hf.generation_config.pad_token_id == 2

    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    assert is_archpool_checkpoint(tmp_path / "back") and (tmp_path / "back" / "tokenizer.json").is_file()
    back = load_checkpoint(tmp_path / "back").eval()
    assert back.cfg.family == "olmo3"  # bookkeeping restored from the export's archpool_config.json
    with torch.no_grad():
        assert (back(ids) - model(ids)).abs().max().item() <= 1e-4


def test_cli_export_of_unsupported_variant_fails_with_the_feature(tmp_path, capsys):
    save_checkpoint(Decoder(tiny_cfg(norm="pre")), tmp_path / "ckpt")  # pre-norm + layerwise QK-norm
    assert main(["export-hf", str(tmp_path / "ckpt"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "layerwise" in err and "Qwen3ForCausalLM" in err
    assert not (tmp_path / "hf" / "config.json").exists()


def test_cli_import_of_unknown_family_names_it(tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "out")]) == 2
    assert "'gpt_neox'" in capsys.readouterr().err


def test_load_returns_decoder_from_checkpoint_or_hf_dir(tmp_path):
    model = Decoder(tiny_cfg(norm="pre", qk_norm="headwise", swa_pattern="none", window=None), seed=3).eval()
    save_checkpoint(model, tmp_path / "ckpt")
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(
        transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            tie_word_embeddings=True,
        )
    ).eval()
    hf.save_pretrained(tmp_path / "hf")
    ids = torch.randint(0, 64, (3, 16))
    for path, want in ((tmp_path / "ckpt", model(ids)), (tmp_path / "hf", hf(ids).logits)):
        loaded = archpool.load(path)
        assert isinstance(loaded, Decoder)
        with torch.no_grad():
            logits = loaded(ids)
        assert logits.shape == (3, 16, 64)
        assert (logits - want).abs().max().item() <= 1e-4
    assert archpool.load(tmp_path / "hf").cfg.tie_embeddings
    with pytest.raises(Exception, match="nor a Hugging Face model directory"):
        archpool.load(tmp_path)


def test_importing_archpool_does_not_import_torch_or_transformers():
    import subprocess
    import sys

    code = (
        "import sys, archpool, archpool.model, archpool.cli.model, archpool.model.features, archpool.cli;"
        "archpool.cli.build_parser(); print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
