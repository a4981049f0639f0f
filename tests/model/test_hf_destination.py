"""Where ``export-hf`` and ``import-hf`` write: a new or empty directory, or with ``--replace`` their own
earlier output replaced whole; never through a link, never leaving stale files, never into a checkpoint
they did not write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from archpool.cli import main
from archpool.io import TMP_SUFFIX, sha256_file
from archpool.model import Decoder, ModelConfig
from archpool.model.checkpoint import save_checkpoint
from archpool.model.hf import export_hf

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, max_seq_len=32)


def _checkpoint(directory: Path, seed: int = 0, metadata: dict | None = None) -> Path:
    return save_checkpoint(Decoder(CFG, seed=seed), directory, metadata=metadata)


def _export(tmp_path: Path, out: Path, *extra: str) -> int:
    ck = tmp_path / "ck"
    if not ck.exists():
        _checkpoint(ck)
    return main(["export-hf", str(ck), str(out), "--no-tokenizer", *extra])


def _no_temporaries(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(TMP_SUFFIX) or p.name.startswith(".old_")]


def test_export_into_a_non_empty_directory_is_refused_without_replace(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert _export(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "--replace" in err and "\n" not in err.strip()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # --replace replaces only an earlier export, never a directory of other files
    assert _export(tmp_path, out, "--replace") == 2
    assert "not an export of archpool" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine\n"


def test_export_into_an_empty_directory_works(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert _export(tmp_path, out) == 0
    assert (out / "model.safetensors").is_file() and _no_temporaries(tmp_path)


def test_replace_writes_a_whole_new_export_without_stale_files(tmp_path):
    out = tmp_path / "out"
    assert _export(tmp_path, out) == 0
    (out / "chat_template.jinja").write_text("{{ stale }}")  # a file the new export does not have
    assert _export(tmp_path, out, "--replace") == 0
    assert not (out / "chat_template.jinja").exists()
    assert "Chat template: none" in (out / "README.md").read_text()  # the card and the files agree
    assert _no_temporaries(tmp_path)


def test_replace_never_writes_through_a_linked_config(tmp_path):
    out = tmp_path / "out"
    assert _export(tmp_path, out) == 0
    secret = tmp_path / "elsewhere" / "config.json"
    secret.parent.mkdir()
    secret.write_text('{"mine": true}\n')
    (out / "config.json").unlink()
    (out / "config.json").symlink_to(secret)
    assert _export(tmp_path, out) == 2  # non-empty: refused
    assert _export(tmp_path, out, "--replace") == 0
    assert secret.read_text() == '{"mine": true}\n'
    assert not (out / "config.json").is_symlink() and json.loads((out / "config.json").read_text())["model_type"]


def test_an_output_directory_that_is_a_link_is_refused(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    assert _export(tmp_path, tmp_path / "out") == 2
    assert "symbolic link" in capsys.readouterr().err
    assert list(real.iterdir()) == []


def test_a_failed_export_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert _export(tmp_path, out) == 0
    before = {p.name: sha256_file(p) for p in out.iterdir()}

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("archpool.model.hf.exporter.model_card", boom)
    with pytest.raises(OSError):
        export_hf(tmp_path / "ck", out, require_tokenizer=False, replace=True)
    assert {p.name: sha256_file(p) for p in out.iterdir()} == before and _no_temporaries(tmp_path)


def test_import_never_replaces_a_trained_checkpoint(tmp_path, capsys):
    hf = export_hf(Decoder(CFG, seed=1), tmp_path / "hf")
    trained = _checkpoint(tmp_path / "run" / "milestones" / "final", seed=7, metadata={"run": "A", "step": 10})
    before = {p.name: sha256_file(p) for p in trained.iterdir()}
    assert main(["import-hf", str(hf), str(trained)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["import-hf", str(hf), str(trained), "--replace"]) == 2
    assert "import-hf did not write" in capsys.readouterr().err
    assert {p.name: sha256_file(p) for p in trained.iterdir()} == before


def test_import_replace_replaces_an_earlier_import_whole(tmp_path):
    hf = export_hf(Decoder(CFG, seed=1), tmp_path / "hf")
    out = tmp_path / "imported"
    assert main(["import-hf", str(hf), str(out)]) == 0
    recorded = json.loads((out / "config.json").read_text())["metadata"]["imported_from"]
    assert recorded == str(hf.resolve())
    (out / "stale.bin").write_bytes(b"x")
    assert main(["import-hf", str(hf), str(out)]) == 2
    assert main(["import-hf", str(hf), str(out), "--replace"]) == 0
    assert not (out / "stale.bin").exists() and (out / "model.safetensors").is_file()
    assert _no_temporaries(tmp_path)


def test_import_records_the_resolved_source(tmp_path, monkeypatch):
    hf = export_hf(Decoder(CFG, seed=1), tmp_path / "hf")
    monkeypatch.chdir(tmp_path)
    assert main(["import-hf", "hf/../hf", "imp"]) == 0
    assert json.loads((tmp_path / "imp" / "config.json").read_text())["metadata"]["imported_from"] == str(hf.resolve())
