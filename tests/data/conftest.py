import pytest

from tests.helpers.corpus import make_docs, tiny_config


@pytest.fixture
def docs_dir(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    for i, text in enumerate(make_docs(60)):
        (d / f"doc{i:03d}.txt").write_text(text)
    return d


@pytest.fixture
def tiny_store(docs_dir, tmp_path):
    from archpool.data.store import prepare

    return prepare(tiny_config(docs_dir, tmp_path / "cache"), progress=False, log=lambda *a: None)
