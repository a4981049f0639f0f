"""The harness backends check their inputs before a model loads: every HELMET data file read whole (JSON lines
in UTF-8, HELMET's fields, gold answers that are not empty), the model directory's tokenizer files, every
suite and flag of ``archpool eval`` before the first suite runs, and in a pool at parse (a missing data
directory or a downloading RULER task without ``--allow-download``) before any stage. A scoring rule gives
no credit for an empty gold answer."""

from __future__ import annotations

import json
import shutil

import pytest

from archpool.errors import ConfigError, DataError
from archpool.eval import helmet_data as H
from tests.eval.test_helmet_data import LENGTH, _export, make_data


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("harness_inputs"))


@pytest.fixture()
def data(tmp_path):
    return make_data(tmp_path)


@pytest.fixture()
def no_model(monkeypatch):
    """Loading the model or generating fails the test: the inputs must be refused before either."""

    def refuse(*a, **k):
        raise AssertionError("the model loaded before the inputs were checked")

    monkeypatch.setattr(H._Model, "load", refuse)
    monkeypatch.setattr(H._Model, "generate", refuse)


def _req(data, tmp_path, **kw):
    kw = {"lengths": [LENGTH], "limit": 2, "shots": 1, "out_dir": tmp_path / "out", "cache_dir": tmp_path / "cache", **kw}
    return H.HelmetDataRequest(data_dir=data, **kw)


def _rewrite(path, edit):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(i, r)) + "\n" for i, r in enumerate(rows)))


# the last dataset HELMET's plan reaches (re-rank), so a lazy reader would have generated every other cell first
RERANK = "msmarco/test_reranking_data_k14_dep3.jsonl"


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (
            lambda p: p.write_bytes(p.read_bytes() + b'{"qid": "x", "query": "\xff\xfe"}\n'),
            r"test_reranking_data_k14_dep3\.jsonl:4",
        ),
        (lambda p: p.write_text(p.read_text() + "{not json\n"), r"test_reranking_data_k14_dep3\.jsonl:4"),
        (lambda p: p.write_text(p.read_text() + "[1, 2]\n"), r"a JSON object per line"),
    ],
    ids=["non-utf8", "invalid-line", "not-an-object"],
)
def test_a_damaged_later_file_is_refused_before_the_model_loads(data, tmp_path, export, no_model, damage, match):
    damage(data / RERANK)
    with pytest.raises(DataError, match=match):
        H.run_helmet_data(export, _req(data, tmp_path))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # no cell ran


@pytest.mark.parametrize(
    ("file", "edit"),
    [
        ("ruler/niah_multikey_2/validation_1024.jsonl", lambda i, r: {**r, "outputs": [""]}),
        ("ruler/niah_multivalue/validation_1024.jsonl", lambda i, r: {**r, "outputs": ["11", "  "]}),
        ("json_kv/test_k50_dep6.jsonl", lambda i, r: {**r, "answer": ""}),
        ("kilt/nq-dev-multikilt_1000_k20_dep6.jsonl", lambda i, r: {**r, "answers": ["The"]}),  # normalises to nothing
        ("kilt/triviaqa-dev-multikilt_1000_k20_dep6.jsonl", lambda i, r: {**r, "answers": []}),
    ],
    ids=["ruler-empty", "ruler-blank-among", "json-kv-empty", "kilt-article-only", "kilt-none"],
)
def test_an_empty_gold_answer_is_refused_before_the_model_loads(data, tmp_path, export, no_model, file, edit):
    _rewrite(data / file, edit)
    with pytest.raises(DataError, match=r"(empty gold answer|no gold answer|no 'answer').*|record \d+ has no"):
        H.run_helmet_data(export, _req(data, tmp_path))


def test_scorers_give_no_credit_for_an_empty_gold():
    assert H.ruler_recall("anything at all", [""]) == 0.0
    assert H.ruler_recall("the number is 11", ["11", " "]) == 1.0  # the blank gold is not counted
    assert H.substring_exact_match("anything", [""]) == 0.0
    assert H.substring_exact_match("anything", ["the"]) == 0.0  # "the" normalises to nothing
    assert H.substring_exact_match("Paris, France", ["", "paris"]) == 1.0


def test_a_corrupt_tokenizer_is_one_named_error(tmp_path, export, data, no_model):
    model = tmp_path / "model"
    shutil.copytree(export, model)
    (model / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"')
    with pytest.raises(DataError, match=r"tokenizer\.json: not a readable HF tokenizer\.json"):
        H.run_helmet_data(model, _req(data, tmp_path))
    (model / "tokenizer.json").write_text((export / "tokenizer.json").read_text())
    (model / "tokenizer_config.json").write_text('["bos_token"]')
    with pytest.raises(DataError, match=r"tokenizer_config\.json: not a readable tokenizer file"):
        H.run_helmet_data(model, _req(data, tmp_path))


def test_the_lm_eval_backend_checks_the_tokenizer_before_loading(tmp_path, export, monkeypatch):
    from archpool.eval import harness

    model = tmp_path / "model"
    shutil.copytree(export, model)
    (model / "tokenizer.json").write_bytes(b"\xff\x00 not json")
    monkeypatch.setattr(harness._Session, "model", lambda self: pytest.fail("the model loaded"))
    with pytest.raises(DataError, match=r"tokenizer\.json"):
        harness.run_ruler(model, harness.HarnessRequest(lengths=[256], limit=1, cache_dir=tmp_path / "c"))


# ---------------------------------------------------------------------------------------------- archpool eval
@pytest.fixture()
def no_suite_runs(monkeypatch):
    """Running any suite fails the test: ``archpool eval`` must refuse before the first one."""
    from archpool.eval import api, harness

    def refuse(*a, **k):
        raise AssertionError("a suite ran before every suite's inputs were checked")

    monkeypatch.setattr(harness, "run_ruler", refuse)
    monkeypatch.setattr(H, "run_helmet_data", refuse)
    monkeypatch.setattr(api, "evaluate", refuse)


@pytest.mark.parametrize(
    "extra",
    [
        ["--suite", "lm-eval:ruler,helmet-data"],  # the second suite's --helmet-data missing
        ["--suite", "lm-eval:ruler,tiyn"],  # a typo in a later suite's name
        ["--suite", "lm-eval:ruler,helmet-data", "--helmet-data", "DATA"],  # a damaged data file (below)
    ],
    ids=["missing-flag", "suite-typo", "damaged-data"],
)
def test_eval_refuses_every_suite_before_the_first_runs(tmp_path, export, data, no_suite_runs, capsys, extra):
    from archpool.cli import main

    (data / RERANK).write_text((data / RERANK).read_text() + "{not json\n")
    extra = [str(data) if a == "DATA" else a for a in extra]
    args = ["eval", str(export), *extra, "--lengths", str(LENGTH), "--out", str(tmp_path / "ev"), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]
    assert not (tmp_path / "ev").exists()


def test_eval_refuses_a_corrupt_tokenizer_before_any_suite(tmp_path, export, no_suite_runs, capsys):
    from archpool.cli import main

    model = tmp_path / "model"
    shutil.copytree(export, model)
    (model / "tokenizer.json").write_text("{")
    assert main(["eval", str(model), "--suite", "lm-eval:ruler", "--lengths", "256", "--no-progress"]) == 2
    assert "tokenizer.json" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- pools
def _pool(tmp_path, harness: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: x\ntrain: {{max_steps: 2}}\neval: {{tasks: [mqar], harness: {harness}}}\nruns: [{{name: A}}]\n")
    return str(path)


def test_a_pool_refuses_a_missing_helmet_data_directory_at_parse(tmp_path):
    from archpool.pool.spec import load_pool

    with pytest.raises(ConfigError, match=r"eval\.harness\.helmet_data\.path.*no HELMET data directory") as e:
        load_pool(_pool(tmp_path, "{helmet_data: {path: nowhere}}"))
    assert e.value.field == "eval.harness.helmet_data.path"


def test_a_pool_reads_its_helmet_data_at_parse_relative_to_the_pool_file(tmp_path):
    from archpool.pool.spec import load_pool

    make_data(tmp_path)
    section = f"{{helmet_data: {{path: data, categories: [recall], lengths: [{LENGTH}]}}}}"
    load_pool(_pool(tmp_path, section))  # read whole
    _rewrite(tmp_path / f"data/ruler/niah_multikey_3/validation_{LENGTH}.jsonl", lambda i, r: {**r, "outputs": [""]})
    with pytest.raises(ConfigError, match=r"niah_multikey_3/validation_\d+\.jsonl: record \d+ has an empty gold answer"):
        load_pool(_pool(tmp_path, section))


def test_a_pool_with_a_downloading_ruler_task_runs_only_with_the_flag(tmp_path, capsys):
    from archpool.cli import main

    pool = _pool(tmp_path, "{ruler: {tasks: [niah_single_2], allow_download: true}}")
    assert main(["pool", "show", pool]) == 0
    assert "runs only under `archpool run --allow-download`" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["run", pool, "--out", str(out), "--no-progress"]) == 2
    assert "--allow-download: eval.harness.ruler runs niah_single_2" in capsys.readouterr().err
    assert not out.exists()  # refused before any stage
