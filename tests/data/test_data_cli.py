import json

from archpool.cli import main


def test_prepare_is_idempotent_and_inspect_reports(docs_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))  # a pool file cannot choose its cache
    cfg = tmp_path / "pool.yaml"
    cfg.write_text(
        json.dumps(
            {
                "data": {
                    "sources": [{"kind": "files", "path": str(docs_dir)}],
                    "vocab_size": 400,
                    "max_chars": None,
                    "long_doc_tokens": 600,
                    "reference_context": 64,
                }
            }
        )
    )
    assert main(["data", "prepare", str(cfg), "--no-progress"]) == 0
    first = capsys.readouterr().out
    assert main(["data", "prepare", str(cfg), "--no-progress"]) == 0
    second = capsys.readouterr().out
    assert "reusing" in second
    store = next(line.split(": ", 1)[1] for line in first.splitlines() if line.startswith("store: "))
    assert store in second
    assert main(["data", "inspect", store, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["documents"] == 60 and s["context"] == 64
    assert s["docs_over_4x_context"] >= s["docs_over_16x_context"] >= 0
    assert sum(h["docs"] for h in s["length_histogram"]) == 60
    assert s["sample"].startswith("Document")


def test_bad_config_and_bad_data_exit_2_with_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("vocab_size: 3\n")
    assert main(["data", "prepare", str(tmp_path / "bad.yaml")]) == 2
    assert "vocab_size" in capsys.readouterr().err
    (tmp_path / "x.jsonl").write_text('{"body": 1}\n')
    (tmp_path / "c.yaml").write_text(f"sources: [{{kind: files, path: x.jsonl}}]\ncache_dir: {tmp_path}/cache\n")
    assert main(["data", "prepare", str(tmp_path / "c.yaml"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "x.jsonl:1: missing text field 'text'" in err
    assert main(["data", "inspect", str(tmp_path)]) == 2
