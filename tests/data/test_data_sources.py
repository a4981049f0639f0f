import json

import pytest

from archpool.data.config import DataConfig, SourceConfig
from archpool.data.sources import FileSource, HFSource, TextListSource
from archpool.data.store import build_source, prepare
from archpool.errors import ConfigError, DataError
from tests.helpers.corpus import make_docs, tiny_config

DOCS = make_docs(12, seed=5)


def texts(src):
    return [d.text for d in src.documents()]


def test_txt_jsonl_json_parquet_and_globs_load(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.txt").write_text(DOCS[0])
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(DOCS[1:4])) + "\n\n")
    (tmp_path / "c.json").write_text(json.dumps([{"text": t} for t in DOCS[4:6]]))
    pq.write_table(pa.table({"text": DOCS[6:9], "n": [1, 2, 3]}), tmp_path / "d.parquet")
    assert texts(FileSource(str(tmp_path))) == DOCS[:9]
    assert texts(FileSource(str(tmp_path / "*.jsonl"))) == DOCS[1:4]
    assert texts(FileSource([str(tmp_path / "d.parquet"), str(tmp_path / "a.txt")])) == DOCS[6:9] + DOCS[:1]


def test_configurable_text_field(tmp_path):
    (tmp_path / "x.jsonl").write_text("\n".join(json.dumps({"content": t}) for t in DOCS[:2]))
    assert texts(FileSource(str(tmp_path / "x.jsonl"), text_field="content")) == DOCS[:2]


def test_datasets_save_to_disk_and_parquet_dir_load(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": DOCS[:5], "label": list(range(5))})
    ds.save_to_disk(str(tmp_path / "saved"))
    assert texts(HFSource(str(tmp_path / "saved"))) == DOCS[:5]
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dd"))
    assert texts(HFSource(str(tmp_path / "dd"), split="test")) == DOCS[:1]
    (tmp_path / "pq").mkdir()
    ds.to_parquet(str(tmp_path / "pq" / "part-0.parquet"))
    assert texts(build_source(SourceConfig(kind="hf", path=str(tmp_path / "pq")))) == DOCS[:5]


def test_hub_name_without_network_fails_clearly(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="no-such-user/no-such-dataset.*could not be loaded"):
        list(HFSource("no-such-user/no-such-dataset").documents())


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("missing.jsonl", '{"body": "x"}\n', r"missing.jsonl:1: missing text field 'text'"),
        ("bad.jsonl", '{"text": "ok"}\n{oops\n', r"bad.jsonl:2: invalid JSON"),
        ("notstr.jsonl", '{"text": 3}\n', r"notstr.jsonl:1: field 'text' is int"),
        ("latin1.txt", b"caf\xe9 au lait", r"latin1.txt: not UTF-8"),
        ("bad.json", "[{", r"bad.json: invalid JSON"),
    ],
)
def test_bad_files_are_errors_naming_the_file(tmp_path, name, content, match):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError, match=match):
        list(FileSource(str(p)).documents())


def test_parquet_missing_column_and_corrupt_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "p.parquet")
    with pytest.raises(DataError, match=r"p.parquet: missing text column 'text' \(columns: body\)"):
        list(FileSource(str(tmp_path / "p.parquet")).documents())
    (tmp_path / "q.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="q.parquet: not a readable parquet"):
        list(FileSource(str(tmp_path / "q.parquet")).documents())


def test_hf_missing_column(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"body": ["x"]}).save_to_disk(str(tmp_path / "s"))
    with pytest.raises(DataError, match="missing text column 'text'"):
        list(HFSource(str(tmp_path / "s")).documents())


def test_missing_paths_and_empty_globs(tmp_path):
    with pytest.raises(DataError, match="nope.txt: no such file"):
        FileSource(str(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match="glob matches no files"):
        FileSource(str(tmp_path / "*.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no"):
        FileSource(str(tmp_path / "empty"))


def test_source_with_no_documents_is_an_error_not_an_empty_stream(tmp_path):
    (tmp_path / "blank.txt").write_text("   \n\n ")
    (tmp_path / "empty.jsonl").write_text("\n")
    for name in ("blank.txt", "empty.jsonl"):
        cfg = tiny_config(tmp_path / name, tmp_path / "cache")
        with pytest.raises(DataError, match=f"yields no documents.*{name}"):
            prepare(cfg, progress=False, log=lambda *a: None)


def test_bad_config_values_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="^vocab_size"):
        DataConfig(vocab_size=10)
    with pytest.raises(ConfigError, match=r"^sources\[0\]\.kind"):
        DataConfig(sources=[{"kind": "ftp"}])
    with pytest.raises(ConfigError, match=r"^sources\[0\]\.path"):
        DataConfig(sources=[{"kind": "files"}])
    with pytest.raises(ConfigError, match="^holdout_fraction"):
        DataConfig(holdout_fraction=1.5)
    with pytest.raises(ConfigError, match="^tokenizer"):
        DataConfig(tokenizer=str(tmp_path / "none.json"))
    with pytest.raises(ConfigError, match="^bogus"):
        DataConfig.from_dict({"bogus": 1})


def test_config_file_paths_are_relative_to_the_file(tmp_path, docs_dir, monkeypatch):
    from archpool.tokenizer import train_tokenizer

    (tmp_path / "tok").mkdir()
    train_tokenizer(make_docs(5), 300).save(tmp_path / "tok")
    (tmp_path / "data.yaml").write_text(  # a data config (not a pool file) may name its cache
        "sources:\n  - {kind: files, path: corpus}\nvocab_size: 300\ntokenizer: tok/tokenizer.json\ncache_dir: cache\n"
    )
    monkeypatch.chdir(docs_dir)  # not where the config is
    cfg = DataConfig.load(tmp_path / "data.yaml")
    assert cfg.vocab_size == 300
    assert cfg.sources[0].path == str(docs_dir)
    assert cfg.tokenizer == str(tmp_path / "tok" / "tokenizer.json")
    assert cfg.cache_root() == tmp_path / "cache"


def test_text_list_source_is_deterministic_and_infinite():
    src = TextListSource(["a", "b", "c"])
    first = [x for _, x in zip(range(9), src.documents(1))]
    assert first == [x for _, x in zip(range(9), src.documents(1))]
    assert sorted(first[:3]) == ["a", "b", "c"] and len(first) == 9
