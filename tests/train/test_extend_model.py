"""``archpool extend SOURCE --out OUT`` on models that exist (archpool.train.extend_model): tiny random Hugging Face
models written by transformers itself, and an archpool checkpoint.

Zero steps is the RoPE change alone: the weights' bytes are the source's, config.json differs in its RoPE and
context only, and transformers loading the written directory computes the logits of the source's weights under
the recipe's RoPE written by hand into transformers' own config class (and archpool's import of it the same).
A few steps train on plain text and write a directory transformers loads, with the run's final logits.
The provenance (extension.json), the pretraining context (read or given), re-runs and the one-line errors."""

from __future__ import annotations

import json

import pytest
import torch

from archpool.cli import main

PRE = 64  # the sources' context (their max_position_embeddings)
LENGTH = 256  # the extension's: ×4


@pytest.fixture(scope="module")
def tok():
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    return pseudo_bpe(pseudo_texts())


def _hf_config(tok, family: str = "llama"):
    import transformers

    common = dict(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=PRE,
        initializer_range=0.3,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        pad_token_id=tok.pad_id,
    )
    if family == "llama":
        return transformers.LlamaConfig(
            **common, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0}
        )
    types = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]  # Olmo 3's pattern
    plain = {"rope_type": "default", "rope_theta": 10_000.0}
    return transformers.Olmo3Config(
        **common,
        sliding_window=16,
        layer_types=types,
        rope_parameters={"full_attention": plain, "sliding_attention": dict(plain)},
    )


def _write_hf(path, tok, family: str = "llama"):
    import transformers

    from archpool.model.hf import export_tokenizer

    cfg = _hf_config(tok, family)
    torch.manual_seed(0)
    model_class = transformers.LlamaForCausalLM if family == "llama" else transformers.Olmo3ForCausalLM
    model_class(cfg).save_pretrained(path)
    export_tokenizer(tok, path, PRE)
    return path


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tok):
    return _write_hf(tmp_path_factory.mktemp("src") / "llama", tok)


@pytest.fixture(scope="module")
def ids(tok):
    from tests.helpers.tokenizers import pseudo_texts

    return torch.tensor([tok.encode(" ".join(pseudo_texts()[:3]))[:200]])  # beyond the source's 64 positions


def _logits(model_dir, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, local_files_only=True).eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


def _reference_logits(source_dir, family: str, tok, rope_parameters, ids):
    """transformers' own class with the source's weights and the recipe's RoPE written by hand."""
    import transformers

    cfg = _hf_config(tok, family)
    cfg.rope_parameters = rope_parameters
    cfg.max_position_embeddings = LENGTH
    model_class = transformers.LlamaForCausalLM if family == "llama" else transformers.Olmo3ForCausalLM
    model = model_class(cfg).eval()
    from safetensors.torch import load_file

    missing, unexpected = model.load_state_dict(load_file(str(source_dir / "model.safetensors")), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    if cfg.tie_word_embeddings:
        model.tie_weights()
    with torch.no_grad():
        return model(input_ids=ids).logits


def _extend(*args) -> int:
    return main(["extend", *map(str, args), "--no-progress"])


YARN = {"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0, "original_max_position_embeddings": PRE}
RECIPES = {
    "ntk": {"rope_type": "default", "rope_theta": 160_000.0},  # theta × 16
    "yarn": YARN,
    "pi": {"rope_type": "linear", "rope_theta": 10_000.0, "factor": 4.0},
}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_zero_step_is_the_rope_change_alone_and_transformers_computes_it(llama, tok, ids, tmp_path, recipe):
    out = tmp_path / recipe
    assert _extend(llama, "--out", out, "--recipe", recipe, "--length", LENGTH) == 0
    assert (out / "model.safetensors").read_bytes() == (llama / "model.safetensors").read_bytes()
    before, after = (json.loads((d / "config.json").read_text()) for d in (llama, out))
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == {
        "rope_parameters",
        "max_position_embeddings",
    }
    assert after["max_position_embeddings"] == LENGTH
    assert (out / "tokenizer.json").read_bytes() == (llama / "tokenizer.json").read_bytes()
    ours = _logits(out, ids)
    torch.testing.assert_close(ours, _reference_logits(llama, "llama", tok, dict(RECIPES[recipe]), ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ours, _logits(llama, ids), atol=1e-3)  # another model than the source
    from archpool.model.hf import import_hf

    with torch.no_grad():
        torch.testing.assert_close(import_hf(out).eval()(ids), ours, rtol=1e-4, atol=1e-4)  # archpool reads it alike
    record = json.loads((out / "extension.json").read_text())
    assert record["steps"] == 0 and record["recipe"] == recipe and record["length"] == LENGTH
    assert record["pretrain_ctx"] == PRE and record["pretrain_ctx_from"] == "max_position_embeddings"
    assert record["source"]["format"] == "hf" and record["source"]["path"] == str(llama.resolve())


def test_zero_step_per_layer_type_rope_on_full_layers_only(tmp_path, tok, ids):
    """Olmo 3 (sliding and full layers, RoPE per layer type): YaRN on the full layers, plain RoPE on the sliding ones."""
    src = _write_hf(tmp_path / "olmo3", tok, "olmo3")
    out = tmp_path / "out"
    assert _extend(src, "--out", out, "--recipe", "yarn", "--length", LENGTH, "--full-layers-only") == 0
    rope = {"full_attention": YARN, "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}
    ref = _reference_logits(src, "olmo3", tok, rope, ids)
    torch.testing.assert_close(_logits(out, ids), ref, rtol=1e-5, atol=1e-5)
    assert json.loads((out / "config.json").read_text())["rope_parameters"]["sliding_attention"]["rope_type"] == "default"


def test_the_given_pretraining_context_sets_the_recipe(llama, tmp_path):
    """A model extended after pretraining: the context it was pretrained at is given, and the recipe scales from it."""
    out = tmp_path / "out"
    assert _extend(llama, "--out", out, "--recipe", "yarn", "--pretrain-ctx", 32, "--length", LENGTH) == 0
    cfg = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert cfg["factor"] == LENGTH / 32 and cfg["original_max_position_embeddings"] == 32
    record = json.loads((out / "extension.json").read_text())
    assert record["pretrain_ctx"] == 32 and record["pretrain_ctx_from"] == "given"


def test_an_archpool_checkpoint_extends_into_a_checkpoint(tok, tmp_path):
    from archpool.model.checkpoint import load_checkpoint, save_checkpoint
    from archpool.model.config import ModelConfig, RopeConfig
    from archpool.model.model import Decoder
    from archpool.train.config import ExtensionConfig
    from archpool.train.extend import extension_rope

    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=PRE)
    source = Decoder(cfg, seed=1)
    save_checkpoint(source, tmp_path / "ck")
    tok.save(tmp_path / "ck")
    assert _extend(tmp_path / "ck", "--out", tmp_path / "out", "--recipe", "pi", "--length", LENGTH) == 0
    extended = load_checkpoint(tmp_path / "out")
    expect = extension_rope(RopeConfig(), ExtensionConfig(recipe="pi"), PRE, LENGTH)
    assert extended.cfg.rope == expect and extended.cfg.max_seq_len == LENGTH
    assert extended.cfg.extension["pretrain_seq_len"] == PRE and extended.cfg.extension["steps"] == 0
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(extended.state_dict()[name], tensor, rtol=0, atol=0)
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "out" / "extension.json").read_text())["source"]["format"] == "checkpoint"


def test_a_few_steps_on_text_write_a_model_transformers_loads(llama, tok, ids, tmp_path, monkeypatch):
    from archpool.model.checkpoint import load_checkpoint
    from tests.helpers.tokenizers import pseudo_texts

    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "train.txt"
    text.write_text("\n\n".join(pseudo_texts()[:12]))
    out = tmp_path / "out"
    args = [llama, "--out", out, "--length", 128, "--steps", 2, "--lr", 1e-3, "--text", text]
    assert _extend(*args) == 0
    record = json.loads((out / "extension.json").read_text())
    assert record["steps"] == 2 and record["tokens"] == 2 * 128 and record["recipe"] == "ntk"
    run = tmp_path / "out.run"
    assert record["run_dir"] == str(run.resolve())
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 2
    final = load_checkpoint(run / "milestones" / "final").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            _logits(out, ids), final(ids), rtol=1e-4, atol=1e-4
        )  # the trained model, as transformers runs it
    assert not torch.allclose(_logits(out, ids), _reference_logits(llama, "llama", tok, dict(RECIPES["ntk"]), ids), atol=1e-4)
    assert json.loads((out / "config.json").read_text())["rope_parameters"]["rope_theta"] == 160_000.0
    written = (out / "model.safetensors").stat().st_mtime_ns
    assert _extend(*args) == 0  # the same extension again: complete, nothing redone
    assert (out / "model.safetensors").stat().st_mtime_ns == written


@pytest.mark.parametrize(
    "args, field",
    [
        (["--steps", "2", "--text", "{text}"], "extension.lr"),
        (["--steps", "2", "--lr", "1e-3"], "--data"),
        (["--from", "step_000010"], "--from"),
    ],
)
def test_errors_name_the_option(llama, tmp_path, capsys, args, field):
    text = tmp_path / "t.txt"
    text.write_text("words " * 100)
    argv = ["extend", str(llama), "--out", str(tmp_path / "out"), *(a.format(text=text) for a in args)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err
    assert not (tmp_path / "out").exists()


def test_without_out_a_model_directory_is_refused_and_model_flags_need_out(llama, tmp_path, capsys):
    assert main(["extend", str(llama)]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["extend", str(llama), "--steps", "2"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_another_extension_into_an_existing_output_needs_replace(llama, tmp_path, capsys):
    out = tmp_path / "out"
    assert _extend(llama, "--out", out, "--recipe", "ntk", "--length", LENGTH) == 0
    assert _extend(llama, "--out", out, "--recipe", "pi", "--length", LENGTH) == 2
    assert "--replace" in capsys.readouterr().err
    assert _extend(llama, "--out", out, "--recipe", "pi", "--length", LENGTH, "--replace") == 0
    assert json.loads((out / "extension.json").read_text())["recipe"] == "pi"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert _extend(llama, "--out", tmp_path / "mine", "--replace") == 2  # not an extended model: never replaced
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_legacy_rope_spellings_that_transformers_reads_first_are_replaced(llama, tmp_path):
    """A source written with transformers 4's ``rope_scaling`` and top-level ``rope_theta`` (read before
    ``rope_parameters``): the extension's config holds the recipe's RoPE alone, and transformers reads it."""
    import shutil

    from transformers import AutoConfig

    src = shutil.copytree(llama, tmp_path / "legacy")
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("rope_parameters")
    cfg.update(rope_theta=10_000.0, rope_scaling={"rope_type": "linear", "factor": 2.0})
    (src / "config.json").write_text(json.dumps(cfg))
    assert AutoConfig.from_pretrained(str(src)).rope_parameters["rope_type"] == "linear"
    assert _extend(src, "--out", tmp_path / "out", "--recipe", "yarn", "--length", LENGTH) == 0
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "rope_scaling" not in written and "rope_theta" not in written
    read = AutoConfig.from_pretrained(str(tmp_path / "out")).rope_parameters
    assert (read["rope_type"], read["factor"], read["original_max_position_embeddings"]) == ("yarn", 4.0, PRE)
