"""HELMET's own data and metrics (archpool.eval.helmet_data): tiny files in the layout of HELMET's data.tar.gz
(a few records per dataset, a few hundred tokens each) on a random-init archpool model exported to Hugging
Face format. The columns and the category count, HELMET's metrics against hand-computed values (NDCG@10
against scikit-learn), an oracle model scoring 100 through the whole path, truncation of the context only,
the missing file named, the cache, the settings' validation and the CLI."""

from __future__ import annotations

import json

import pytest

from archpool.errors import ConfigError, DataError
from archpool.eval import helmet_data as H

LENGTH = 1024


def _export(root):
    """A random-init Llama-style archpool model (context 1024) exported with a 700-token byte-level BPE."""
    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.hf import export_hf
    from archpool.model.model import Decoder
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    tok = pseudo_bpe(pseudo_texts())
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=LENGTH)
    return export_hf(Decoder(cfg), root / "export", tokenizer=tok)


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_data(root, length=LENGTH, long_kv=False):
    """HELMET's layout: ruler/<task>/validation_<L>.jsonl, json_kv/test_k50_dep6.jsonl, kilt/*_k20_*.jsonl and
    msmarco/test_reranking_data_k14_dep3.jsonl (the files of HELMET's 4096, which serve lengths below it)."""
    d = root / "data"
    for task, vals in (("niah_multikey_2", ["4711"]), ("niah_multikey_3", ["ab-12"]), ("niah_multivalue", ["11", "22"])):
        _jsonl(d / f"ruler/{task}/validation_{length}.jsonl", [
            {"index": i, "context": f"grass sky {i}. The special magic number for lark is {' '.join(vals)}. sun.",
             "query": "lark", "type_needle_v": "numbers", "outputs": vals, "length": 40} for i in range(3)
        ])  # fmt: skip
    n_kv = 300 if long_kv else 4
    kv = {f"k{i}": f"v{i}" for i in range(n_kv)}
    _jsonl(d / "json_kv/test_k50_dep6.jsonl", [
        {"context": json.dumps(kv), "question": '"k0"', "answer": "v0", "demos": [["k9", "v9"], ["k8", "v8"]],
         "num_kvs": n_kv, "depth": 0.0} for _ in range(3)
    ])  # fmt: skip
    for name, demo in (("nq-dev-multikilt_1000_k20_dep6", "nq-train-multikilt_1000_k3_dep6"),
                       ("triviaqa-dev-multikilt_1000_k20_dep6", "triviaqa-train-multikilt_1000_k3_dep6"),
                       ("hotpotqa-dev-multikilt_1000_k20_dep3", "hotpotqa-train-multikilt_1000_k3_dep3"),
                       ("popqa_test_1000_k20_dep6", "popqa_test_1000_k3_dep6")):  # fmt: skip
        rows = [
            {"id": f"q{i}", "question": f"where is town {i}", "answers": [f"Paris {i}", "France"], "s_pop": 50 + i,
             "ctxs": [{"title": "Town", "text": f"town {i} is in Paris {i}", "has_answer": True},
                      {"title": "Sea", "text": "the sea is wide", "has_answer": False}]}
            for i in range(3)
        ]  # fmt: skip
        rows.append({**rows[0], "id": "famous", "s_pop": 10_000})  # PopQA keeps log10(s_pop) < 3 only
        _jsonl(d / f"kilt/{name}.jsonl", rows)
        if not (d / f"kilt/{demo}.jsonl").exists():
            _jsonl(d / f"kilt/{demo}.jsonl", rows)
    rank = [{"qid": f"m{i}", "query": "red fox",
             "ctxs": [{"id": "1", "text": "blue", "label": 0}, {"id": "2", "text": "red fox", "label": 3},
                      {"id": "3", "text": "fox", "label": 1}]} for i in range(3)]  # fmt: skip
    _jsonl(d / "msmarco/test_reranking_data_k14_dep3.jsonl", rank)
    _jsonl(d / "msmarco/test_reranking_data_k10_dep3.jsonl", rank)
    return d


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("helmet_data"))


@pytest.fixture()
def data(tmp_path):
    return make_data(tmp_path)


def _req(data, tmp_path, **kw):
    kw = {"lengths": [LENGTH], "limit": 2, "shots": 1, "out_dir": tmp_path / "out", "cache_dir": tmp_path / "cache", **kw}
    return H.HelmetDataRequest(data_dir=data, **kw)


def _gold(ds, item):
    a = item["answer"]
    return " ".join(a) if isinstance(a, list) and ds.kind == "ruler" else (a[0] if isinstance(a, list) else a)


@pytest.fixture()
def oracle(monkeypatch):
    """The model answers each prompt with its gold answer (the order build_items made them in)."""
    queue: list[str] = []
    real = H.build_items

    def build(ds, *a, **k):
        items = real(ds, *a, **k)
        queue[:] = [_gold(ds, it) for it in items]
        return items

    monkeypatch.setattr(H, "build_items", build)
    monkeypatch.setattr(H._Model, "generate", lambda self, ids, gen, stops: queue.pop(0))


# ---------------------------------------------------------------------------------------------- metrics
def test_substring_em_and_ruler_recall_by_hand():
    assert H.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert H.substring_exact_match("It is in paris, France.", ["Paris", "Lyon"]) == 1.0
    assert H.substring_exact_match("It is in Lyons", ["Paris"]) == 0.0
    assert H.substring_exact_match("an apple", "the apple") == 1.0  # articles dropped on both sides
    assert H.ruler_recall("values: 11 and 33", ["11", "22"]) == 0.5
    assert H.ruler_recall("AB-12", ["ab-12"]) == 1.0
    assert H.parse_output("x\nAnswer: Paris\nmore") == "Paris"
    assert H.parse_output("Corresponding value: v0", "corresponding value:") == "v0"


def test_parse_rankings():
    assert H.parse_rankings("Ranking: [ID: 3] > [ID: 1] > 2, then 9") == {"3": 3, "1": 2, "2": 1}
    assert H.parse_rankings("ID2 > ID2 > ID1") == {"2": 3, "1": 1}  # a repeat keeps its first place
    assert H.parse_rankings("no numbers") == {"no numbers": 1}


@pytest.mark.parametrize(
    ("ranking", "qrels"),
    [
        ({"2": 3, "3": 2, "1": 1}, {"1": 0, "2": 3, "3": 1}),
        ({"1": 3, "3": 2, "2": 1}, {"1": 0, "2": 3, "3": 1}),
        ({str(i): 20 - i for i in range(15)}, {str(i): (i * 7) % 4 for i in range(15)}),  # cut at 10 of 15
    ],
)
def test_ndcg_at_10_against_sklearn(ranking, qrels):
    import numpy as np

    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    docs = sorted(set(qrels) | set(ranking))
    true = np.array([[qrels.get(d, 0) for d in docs]])
    score = np.array([[ranking.get(d, -1000 - i) for i, d in enumerate(docs)]])
    assert H.ndcg_at_k(ranking, qrels, 10) == pytest.approx(sklearn_metrics.ndcg_score(true, score, k=10))


def test_ndcg_hand_value_and_no_relevant():
    # gains 1, 3 at ranks 1, 2: (1 + 3/log2 3) / (3 + 1/log2 3)
    assert H.ndcg_at_k({"a": 2, "b": 1}, {"a": 1, "b": 3}) == pytest.approx((1 + 3 / 1.5849625) / (3 + 1 / 1.5849625))
    assert H.ndcg_at_k({"a": 1}, {"a": 0}) == 0.0
    # judged documents left out of the ranking gain nothing but count in the ideal (trec_eval; sklearn ranks all)
    ideal = 3 + 2 / 1.5849625 + 1 / 2
    assert H.ndcg_at_k({"1": 2, "2": 1}, {"1": 0, "2": 2, "3": 1, "4": 3}) == pytest.approx((2 / 1.5849625) / ideal)


# ---------------------------------------------------------------------------------------------- layout
def test_files_by_length_follow_helmets_table(tmp_path):
    kv = next(d for d in H.DATASETS if d.name == "json_kv")
    (tmp_path / "json_kv").mkdir()
    for k in (50, 105):
        (tmp_path / f"json_kv/test_k{k}_dep6.jsonl").write_text("{}\n")
    assert H.test_file(tmp_path, kv, 8192).name == "test_k105_dep6.jsonl"
    assert H.test_file(tmp_path, kv, 512).name == "test_k50_dep6.jsonl"  # below 4096: 4096's file, truncated
    with pytest.raises(DataError, match=r"json_kv/test_k220_dep6\.jsonl"):
        H.test_file(tmp_path, kv, 16384)


def test_missing_file_is_named(data, tmp_path, export):
    (data / "json_kv/test_k50_dep6.jsonl").unlink()
    with pytest.raises(DataError, match=r"recall \(json_kv\) at 1024 tokens: no file .*json_kv/test_k50_dep6\.jsonl"):
        H.run_helmet_data(export, _req(data, tmp_path))
    with pytest.raises(DataError, match=r"ruler/niah_multikey_2/validation_2048\.jsonl or .*validation_4096\.jsonl"):
        H.run_helmet_data(export, _req(data, tmp_path, lengths=[2048]))


# ---------------------------------------------------------------------------------------------- running
def test_oracle_scores_100_with_columns_and_count(data, tmp_path, export, oracle):
    res = H.run_helmet_data(export, _req(data, tmp_path))
    cols = res["columns"]
    for ds in H.DATASETS:
        assert cols[f"helmet_data_{ds.name}@{LENGTH}"] == 100.0, ds.name
    assert {cols[f"helmet_data_{c}@{LENGTH}"] for c in H.CATEGORIES} == {100.0}
    assert cols[f"helmet_data@{LENGTH}"] == 100.0
    assert cols[f"helmet_data_categories@{LENGTH}"] == 3.0
    cells = {c["dataset"]: c for c in res["cells"]}
    assert cells["kilt_popqa_3"]["n"] == 2 and cells["json_kv"]["n"] == 2  # limit 2 (PopQA's popular row gone)
    assert cells["msmarco_rerank_psg"]["metric"].startswith("NDCG@10")
    lines = [json.loads(x) for x in (tmp_path / "out/samples.jsonl").read_text().splitlines()]
    assert len(lines) == sum(c["n"] for c in res["cells"]) and set(lines[0]) == set(H.SAMPLE_KEYS)
    assert json.loads((tmp_path / "out/results.json").read_text())["columns"] == cols


def test_random_model_runs_and_caches(data, tmp_path, export, monkeypatch):
    res = H.run_helmet_data(export, _req(data, tmp_path, categories=["recall", "rerank"]))
    cols = res["columns"]
    assert cols[f"helmet_data_categories@{LENGTH}"] == 2.0
    expect = (cols[f"helmet_data_recall@{LENGTH}"] + cols[f"helmet_data_rerank@{LENGTH}"]) / 2
    assert cols[f"helmet_data@{LENGTH}"] == pytest.approx(expect)
    assert f"helmet_data_rag@{LENGTH}" not in cols
    assert all(0 <= v <= 100 for v in cols.values())

    def no_generation(*a, **k):
        raise AssertionError("a cached cell generated again")

    monkeypatch.setattr(H._Model, "generate", no_generation)
    again = H.run_helmet_data(export, _req(data, tmp_path, categories=["recall", "rerank"]))
    assert again["columns"] == cols and all(c.get("cached") for c in again["cells"])
    assert len((tmp_path / "out/samples.jsonl").read_text().splitlines()) == sum(c["n"] for c in res["cells"])
    (data / "json_kv/test_k50_dep6.jsonl").write_text((data / "json_kv/test_k50_dep6.jsonl").read_text() + "\n")
    with pytest.raises(AssertionError, match="cached cell"):  # a changed data file is a new cell
        H.run_helmet_data(export, _req(data, tmp_path, categories=["recall"]))


def test_truncation_cuts_the_context_end_only(tmp_path, export, oracle):
    data = make_data(tmp_path, long_kv=True)
    res = H.run_helmet_data(export, _req(data, tmp_path, categories=["recall"], cache_dir=None))
    kv = next(c for c in res["cells"] if c["dataset"] == "json_kv")
    assert kv["truncated"] == kv["n"] == 2 and kv["gold_kept"] == 1.0  # the gold pair opens the JSON
    assert kv["prompt_tokens_max"] <= LENGTH - 100 + 4  # HELMET's budget: the length less the answer's 100 tokens
    s = next(json.loads(x) for x in (tmp_path / "out/samples.jsonl").read_text().splitlines() if '"json_kv"' in x)
    assert "Key: k9\nCorresponding value: v9" in s["prompt_tail"]  # demos and instruction kept
    assert s["prompt_tail"].endswith('Key: "k0"\nCorresponding value:')


def test_prompt_that_cannot_fit_is_skipped(data, tmp_path, export):
    res = H.run_helmet_data(export, _req(data, tmp_path, categories=["rerank"], lengths=[256], cache_dir=None))
    (cell,) = res["cells"]
    assert cell["score"] is None and "without a context needs" in cell["skipped"]
    assert res["columns"] == {}


# ---------------------------------------------------------------------------------------------- settings, CLI
@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"path": ""}, "path"),
        ({"path": "d", "categories": ["icl"]}, "categories"),
        ({"path": "d", "categories": []}, "categories"),
        ({"path": "d", "lengths": [8]}, "lengths"),
        ({"path": "d", "limit": 0}, "limit"),
        ({"path": "d", "shots": 11}, "shots"),
        ({"path": "d", "seed": -1}, "seed"),
        ({"path": "d", "dir": "x"}, "dir"),
    ],
)
def test_settings_validated_at_load(value, field):
    from archpool.pool.sections import EvalSettings

    with pytest.raises(ConfigError) as e:
        EvalSettings.from_dict({"harness": {"helmet_data": value}})
    assert e.value.field == f"eval.harness.helmet_data.{field}"


def test_settings_round_trip_and_stage_keys_unchanged():
    from archpool.pool.sections import EvalSettings

    e = EvalSettings.from_dict({"harness": {"helmet_data": {"path": "h", "categories": ["rag"], "lengths": [512]}}})
    assert EvalSettings.from_dict(e.to_dict()) == e
    assert "ruler" not in e.to_dict()["harness"]
    ruler_only = EvalSettings.from_dict({"harness": {"ruler": {}}}).to_dict()["harness"]
    assert set(ruler_only) == {"ruler"}  # a pool without helmet_data keeps its stage keys
    req = H.request_from(e.harness.helmet_data, [4096], H.Path("/pool"), None, None)
    assert req.data_dir == H.Path("/pool/h") and req.lengths == (512,) and req.categories == ("rag",)


def test_cli(data, tmp_path, export, oracle):
    from archpool.cli import main

    assert main(["eval", str(export), "--helmet-data", str(data), "--lengths", "512"]) == 2  # without its suite
    assert main(["eval", str(export), "--suite", "helmet-data", "--lengths", "512"]) == 2  # without its directory
    out = tmp_path / "ev"
    args = ["eval", str(export), "--suite", "helmet-data", "--helmet-data", str(data), "--helmet-data-categories", "rag",
            "--lengths", str(LENGTH), "--limit", "1", "--out", str(out), "--cache", str(tmp_path / "c")]  # fmt: skip
    assert main(args) == 0
    res = json.loads((out / "helmet_data/results.json").read_text())
    assert res["columns"][f"helmet_data_categories@{LENGTH}"] == 1.0 and res["categories"] == ["rag"]


def test_pool_stage_reads_the_path_from_the_pool_file(data, tmp_path, export, oracle):
    from types import SimpleNamespace

    from archpool.pool.sections import EvalSettings
    from archpool.pool.stages import eval as stage

    e = EvalSettings.from_dict({"harness": {"helmet_data": {"path": "data", "categories": ["recall"], "limit": 1}}})
    ctx = SimpleNamespace(out_dir=tmp_path / "node", pool=SimpleNamespace(base_dir=data.parent), log=lambda line: None)
    res = stage.helmet_data(ctx, e.harness.helmet_data, export, [LENGTH])
    assert res["columns"][f"helmet_data_recall@{LENGTH}"] == 100.0
    assert (tmp_path / "node/helmet_data/samples.jsonl").is_file()
