"""``import-hf`` refuses, before anything is allocated or written: huge shapes, deep or duplicate-key
JSON, ``layer_types`` of the wrong length, non-finite or integer weights, a malformed tokenizer.json."""

import json

import pytest

pytest.importorskip("transformers")

from archpool.cli import main
from archpool.errors import CheckpointError, ConfigError, DataError
from archpool.model import Decoder, ModelConfig
from archpool.model.hf import export_hf, import_hf
from tests.helpers.export import edit_config


def edit_weights(d, fn):
    from safetensors.torch import load_file, save_file

    state = load_file(str(d / "model.safetensors"))
    fn(state)
    save_file(state, str(d / "model.safetensors"))


def _nan(state):
    k = sorted(state)[0]
    state[k] = state[k] * float("nan")


def _int64(state):
    k = sorted(state)[0]
    state[k] = state[k].long()


CASES = {
    "n_layers 2e9": (
        lambda d: edit_config(d, num_hidden_layers=2_000_000_000),
        ConfigError,
        "num_hidden_layers: a positive integer",
    ),
    "hidden_size 1e9": (lambda d: edit_config(d, hidden_size=1e9), ConfigError, "hidden_size: a positive integer of at most"),
    "budget": (
        lambda d: edit_config(d, hidden_size=1 << 18, intermediate_size=1 << 20, num_hidden_layers=4096),
        ConfigError,
        "exceed the budget",
    ),
    "negative heads": (lambda d: edit_config(d, num_attention_heads=-4), ConfigError, "num_attention_heads"),
    "deep json": (lambda d: (d / "config.json").write_text("[" * 50_000 + "]" * 50_000), CheckpointError, "nested deeper"),
    "duplicate key": (
        lambda d: (d / "config.json").write_text('{"model_type": "llama", "model_type": "qwen3"}'),
        CheckpointError,
        "duplicate key 'model_type'",
    ),
    "all-NaN weights": (lambda d: edit_weights(d, _nan), CheckpointError, "NaN/infinite values"),
    "int64 weights": (lambda d: edit_weights(d, _int64), CheckpointError, "dtype torch.int64; weights are floating point"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_import_hf_refuses_before_allocation(case, hf_dir, tmp_path, capsys):
    mutate, error, words = CASES[case]
    mutate(hf_dir)
    with pytest.raises(error) as err:
        import_hf(hf_dir)
    assert words in str(err.value), str(err.value)
    assert main(["import-hf", str(hf_dir), str(tmp_path / "out")]) == 2
    out = capsys.readouterr().err.strip()
    assert out.startswith("archpool import-hf: error: ") and "\n" not in out
    assert not (tmp_path / "out").exists()


def test_layer_types_of_the_wrong_length_are_refused(tmp_path):
    cfg = ModelConfig(
        vocab_size=64, d_model=32, n_layers=3, n_heads=4, max_seq_len=64, window=16, swa_pattern=["sliding", "full", "sliding"]
    )
    d = export_hf(Decoder(cfg, seed=1), tmp_path / "hf")
    raw = json.loads((d / "config.json").read_text())
    assert "layer_types" in raw
    edit_config(d, layer_types=raw["layer_types"][:2])
    with pytest.raises(ConfigError, match="layer_types"):
        import_hf(d)


def test_a_malformed_tokenizer_is_refused_at_import_not_at_eval(hf_dir, tmp_path, capsys):
    (hf_dir / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 5}}')
    assert main(["import-hf", str(hf_dir), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "tokenizer.json: not a readable HF tokenizer.json" in err
    assert not (tmp_path / "out").exists()
    from archpool.tokenizer import Tokenizer

    with pytest.raises(DataError):
        Tokenizer.load(hf_dir / "tokenizer.json")


def test_a_valid_directory_still_imports(hf_dir, tmp_path):
    assert main(["import-hf", str(hf_dir), str(tmp_path / "out")]) == 0


def test_a_config_of_a_larger_model_than_its_weights_is_refused_before_allocation(hf_dir):
    """Only ``model_type`` (a duplicate key aside): transformers fills in a multi-billion-parameter
    default; the shape check runs on a meta-device model, so nothing that size is allocated."""
    import resource

    (hf_dir / "config.json").write_text('{"model_type": "qwen3"}')
    with pytest.raises(CheckpointError, match="weights do not match the config|has shape"):
        import_hf(hf_dir)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 8 * 1024 * 1024  # KiB: far below the 8B model's 32 GB
