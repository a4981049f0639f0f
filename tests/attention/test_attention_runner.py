"""The runner end to end on a tiny run: schema, pool columns, caching, CLI, errors."""

import json

import pytest

from archpool.attention import stage, stats
from archpool.attention.corpus import corpus_from_store
from archpool.attention.settings import Settings
from archpool.attention.stage import analyze_target

FAST = dict(sink_samples=3, long_samples=2, queries=8, retrieval_lengths=(24,), mask_k=1, top_k=3)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))


def test_run_directory_gives_the_pool_columns_and_per_layer_arrays(attn_run):
    r = analyze_target(attn_run, FAST, out=attn_run / "attention.json")
    assert json.loads((attn_run / "attention.json").read_text())["cache_key"] == r["cache_key"]
    m = r["metrics"]
    for k in (
        "attn_sink_rate",
        "attn_sink_rate_bos",
        "attn_first_token_mass",
        "attn_first_token_mass_bos",
        "attn_entropy",
        "attn_entropy_norm",
        "attn_entropy_sinkless_norm",
        "attn_first_token_mass_x4",
        "attn_entropy_norm_x2",
        "attn_sink_rate_full",
        "attn_sink_rate_sliding",
        "attn_retrieval_heads",
        "attn_niah_acc",
        "attn_niah_acc_top_masked",
    ):
        assert k in m, k
    assert 0 <= m["attn_sink_rate"] <= 100 and 0 < m["attn_first_token_mass"] < 1
    assert 0 < m["attn_entropy_norm"] <= 1.0 + 1e-6
    assert not any("@" in k for k in m)  # '@<length>' would read as a score-by-length column
    assert r["settings"]["seq_len"] == 32 and sorted(r["long"]["no_bos"], key=int) == ["32", "64", "128"]
    long = r["long"]["no_bos"]["128"]
    assert long["n_queries"] == 2 * 8 and len(long["per_head"]["entropy"]) == 2
    assert set(long["distance"]["by_layer_type"]) == {"full_attention", "sliding_attention"}
    # the sliding layer (window 8) cannot reach token 0 from the last 8 queries of 128 tokens
    assert long["distance"]["by_layer_type"]["sliding_attention"]["first_token_mass"] == 0.0
    assert r["per_layer"]["layer_types"] == ["sliding_attention", "full_attention"]
    assert len(r["per_layer"]["sink_rate"]) == len(r["per_layer"]["entropy_norm"]) == 2
    rt = r["retrieval"]
    assert rt["n_trials"] == 10 and rt["depths"] == [0, 11, 22, 33, 44, 56, 67, 78, 89, 100]
    assert len(rt["scores"]) == 2 and len(rt["scores"][0]) == 4 and rt["ablation"]["k"] == 1


def test_results_are_cached_by_checkpoint_hash(attn_run, monkeypatch):
    first = analyze_target(attn_run, FAST)
    monkeypatch.setattr(stage, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    assert analyze_target(attn_run, FAST)["metrics"] == first["metrics"]
    # other weights -> another key -> recomputed
    (attn_run / "milestones" / "final" / "model.safetensors").write_bytes(b"changed")
    with pytest.raises(AssertionError, match="recomputed"):
        analyze_target(attn_run, FAST)


def test_hf_export_gives_the_same_statistics_as_the_run(attn_run, tmp_path):
    pytest.importorskip("transformers")
    from archpool.cli.model import resolve_export_source
    from archpool.model.hf import export_hf

    src = resolve_export_source(attn_run, pretrained=True)  # the run's tokenizer is in its data store
    export_hf(src.checkpoint, tmp_path / "hf", tokenizer=src.tokenizer)
    s = {**FAST, "retrieval": False}
    ours = analyze_target(attn_run, s, use_cache=False)
    theirs = analyze_target(tmp_path / "hf", s, store=ours["text"]["store"], use_cache=False)
    assert theirs["kind"] == "hf"
    for k, v in ours["metrics"].items():
        assert theirs["metrics"][k] == pytest.approx(v, abs=1e-4), k


def test_explicit_texts_win_over_the_runs_store_so_every_format_reads_one_text(attn_run, attn_store, tmp_path):
    pytest.importorskip("transformers")
    from archpool.cli.model import resolve_export_source
    from archpool.model.hf import export_hf

    src = resolve_export_source(attn_run, pretrained=True)
    export_hf(src.checkpoint, tmp_path / "hf", tokenizer=src.tokenizer)
    text = tmp_path / "heldout.txt"
    text.write_text(" ".join(attn_store.text(int(i)) for i in attn_store.docs("val_long")))
    s = {**FAST, "retrieval": False}
    ours = analyze_target(attn_run, s, texts=[text], use_cache=False)
    theirs = analyze_target(tmp_path / "hf", s, texts=[text], use_cache=False)
    assert ours["text"]["source"] == theirs["text"]["source"] == "files"
    assert ours["text"]["tokenizer_hash"] == attn_store.tokenizer_hash  # the run's store's tokenizer
    on_store = analyze_target(attn_run, s, use_cache=False)  # without texts: the run's own store
    assert on_store["text"]["source"] == "store" and on_store["metrics"] != ours["metrics"]
    for k, v in ours["metrics"].items():
        assert theirs["metrics"][k] == pytest.approx(v, abs=1e-4), k


def test_cli_prints_side_by_side_and_json(attn_run, tmp_path, capsys):
    from archpool.cli import main

    other = tmp_path / "runB"
    import shutil

    shutil.copytree(attn_run, other)
    args = ["--sink-samples", "2", "--long-samples", "1", "--queries", "4", "--no-retrieval", "--lengths", "32", "64"]
    assert main(["attention", str(attn_run), str(other), *args, "--figures", str(tmp_path / "figs")]) == 0
    out = capsys.readouterr().out
    assert "runA" in out and "runB" in out and "sink rate, T=64, no BOS" in out and "entropy / log i, T=64" in out
    assert (tmp_path / "figs" / "attention_entropy_vs_sink.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["attention", str(attn_run), *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == stats.SCHEMA


def test_missing_text_and_wrong_tokenizer_are_clear_errors(attn_run, attn_store, capsys):
    from archpool.cli import main
    from archpool.errors import DataError
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    ckpt = attn_run / "milestones" / "final"
    (attn_run / "run_config.json").unlink()
    assert main(["attention", str(ckpt)]) == 2
    assert "no held-out text" in capsys.readouterr().err
    small = Decoder(ModelConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2, max_seq_len=32))
    with pytest.raises(DataError, match="vocabulary"):
        stats.analyze(small, corpus_from_store(attn_store.path), Settings(**FAST))
