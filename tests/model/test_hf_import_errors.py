"""``import-hf`` on bad directories: each a one-line CheckpointError / ConfigError naming the file or field."""

import json
import os
import pickle

import pytest

transformers = pytest.importorskip("transformers")

from archpool.cli import main  # noqa: E402
from archpool.errors import CheckpointError, ConfigError  # noqa: E402
from archpool.model.hf import import_hf  # noqa: E402
from tests.helpers.export import edit_config  # noqa: E402


class _Boom:
    """Unpickling this creates a marker file: proof that a loader ran pickle code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _missing(d):
    (d / "model.safetensors").unlink()


def _bad_json(d):
    (d / "config.json").write_text('{"model_type": "llama", ')


def _truncated(d):
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _shapes(d):
    edit_config(d, intermediate_size=200)


def _pickle(d):
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps(_Boom(str(d.parent / "UNPICKLED"))))


def _custom_code(d):
    edit_config(d, auto_map={"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})


def _kv_heads(d):
    edit_config(d, num_key_value_heads=3)


def _shard(name):
    def mutate(d):
        (d / "model.safetensors").rename(d.parent / "outside.safetensors")
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": {"model.embed_tokens.weight": name}})
        )

    return mutate


CASES = {
    "missing weights": (_missing, CheckpointError, r"hf: no weights \(model.safetensors or model.safetensors.index.json\)"),
    "bad json": (_bad_json, CheckpointError, r"hf/config.json: not valid JSON"),
    "truncated safetensors": (_truncated, CheckpointError, r"hf/model.safetensors: unreadable or truncated safetensors file"),
    "config not matching weights": (
        _shapes,
        CheckpointError,
        r"hf/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape \(32, 96\), the config needs \(32, 200\)",
    ),
    "pickle only": (_pickle, CheckpointError, r"hf/pytorch_model.bin: pickle-format weights are refused"),
    "custom code": (_custom_code, ConfigError, r"auto_map: .*hf/config.json: a custom-code model \(needs trust_remote_code\)"),
    "3 kv heads for 4 heads": (
        _kv_heads,
        ConfigError,
        r"hf/config.json: num_key_value_heads: 3 KV heads do not evenly divide num_attention_heads=4",
    ),
    "shard ../": (
        _shard("../outside.safetensors"),
        CheckpointError,
        r"model.safetensors.index.json: weight_map shard '../outside.safetensors' contains a path separator",
    ),
    "shard absolute": (
        _shard("/tmp/outside.safetensors"),
        CheckpointError,
        r"model.safetensors.index.json: weight_map shard '/tmp/outside.safetensors' is an absolute path",
    ),
    "shard separator": (
        _shard("sub/outside.safetensors"),
        CheckpointError,
        r"model.safetensors.index.json: weight_map shard 'sub/outside.safetensors' contains a path separator",
    ),
    "shard ..": (_shard(".."), CheckpointError, r"weight_map shard '..' contains '..'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_import_hf_bad_directory_is_a_named_error(case, hf_dir, tmp_path, capsys):
    mutate, error, message = CASES[case]
    mutate(hf_dir)
    with pytest.raises(error, match=message):
        import_hf(hf_dir)
    assert main(["import-hf", str(hf_dir), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archpool import-hf: error: ") and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "UNPICKLED").exists()


def test_valid_directory_and_sharded_index_still_import(hf_dir, tmp_path):
    want = import_hf(hf_dir)
    from safetensors.torch import load_file, save_file

    state = load_file(str(hf_dir / "model.safetensors"))
    names = sorted(state)
    half = len(names) // 2
    for i, part in enumerate((names[:half], names[half:])):
        save_file({k: state[k] for k in part}, str(hf_dir / f"model-0000{i + 1}-of-00002.safetensors"))
    (hf_dir / "model.safetensors").unlink()
    weight_map = {k: f"model-0000{1 if k in names[:half] else 2}-of-00002.safetensors" for k in names}
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    got = import_hf(hf_dir)
    for k, v in want.state_dict().items():
        assert (got.state_dict()[k] == v).all(), k


def test_eval_and_features_refuse_bad_hf_configs(hf_dir, tmp_path, capsys):
    _custom_code(hf_dir)
    assert (
        main(
            [
                "eval",
                str(hf_dir),
                "--suite",
                "tiny",
                "--n",
                "1",
                "--lengths",
                "16",
                "--no-progress",
                "--cache",
                str(tmp_path / "cache"),
            ]
        )
        == 2
    )
    assert "a custom-code model (needs trust_remote_code)" in capsys.readouterr().err
    edit_config(hf_dir, auto_map=None, num_key_value_heads=3)
    assert main(["features", str(hf_dir)]) == 2
    assert "num_key_value_heads: 3 KV heads do not evenly divide num_attention_heads=4" in capsys.readouterr().err
    os.remove(hf_dir / "config.json")
    with pytest.raises(CheckpointError, match="no config.json"):
        import_hf(hf_dir)
