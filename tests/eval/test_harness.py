"""lm-evaluation-harness's RULER as an eval backend (archpool.eval.harness): a tiny random-init archpool model
exported to Hugging Face format, two of lm-eval's local RULER tasks at 512 tokens on two documents each
(scores near zero: the model reads no English). The columns and their task count, the cache (a second run
calls lm-eval no more), the per-sample log, the prompts being lm-eval's own documents, offline refusals,
the CLI and the pool section; (slow) a checkpoint pool writing the columns into results.csv."""

from __future__ import annotations

import json
import os
import random
import sys

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("wonderwords")
pytest.importorskip("nltk")

from archpool.errors import ConfigError
from archpool.eval import harness as H

TASKS = ["niah_single_1", "niah_multikey_2"]
LENGTH = 512


def _export(root):
    """A random-init Llama-style archpool model (context 512) exported with a 700-token byte-level BPE."""
    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.hf import export_hf
    from archpool.model.model import Decoder
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    tok = pseudo_bpe(pseudo_texts())
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=LENGTH)
    model = Decoder(cfg)
    return export_hf(model, root / "export", tokenizer=tok), tok, model


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("harness"))[0]


class Calls:
    """Counts lm-eval runs (``harness.run_lm_eval``) while active."""

    def __init__(self):
        self.cells: list[tuple[str, int]] = []

    def __enter__(self):
        self.mp = pytest.MonkeyPatch()
        real = H.run_lm_eval

        def counted(lm, task, length, *a, **k):
            self.cells.append((task, length))
            return real(lm, task, length, *a, **k)

        self.mp.setattr(H, "run_lm_eval", counted)
        return self

    def __exit__(self, *exc):
        self.mp.undo()


@pytest.fixture(scope="module")
def first(export, tmp_path_factory):
    """The first run: (result, out dir, cache dir, lm-eval calls)."""
    root = tmp_path_factory.mktemp("run")
    request = H.HarnessRequest(tasks=TASKS, lengths=[LENGTH], limit=2, out_dir=root / "out", cache_dir=root / "cache")
    with Calls() as calls:
        res = H.run_ruler(export, request)
    return res, root / "out", root / "cache", calls.cells


def test_columns_are_named_like_the_paper_with_the_task_count(first):
    res, *_ = first
    cols = res["columns"]
    assert set(cols) == {"ruler_niah_single_1@512", "ruler_niah_multikey_2@512", "ruler@512", "ruler_tasks@512"}
    assert cols["ruler_tasks@512"] == 2  # of lm-eval's 13: never compared with a 13-task average
    assert cols["ruler@512"] == pytest.approx((cols["ruler_niah_single_1@512"] + cols["ruler_niah_multikey_2@512"]) / 2)
    assert all(0 <= cols[f"ruler_{t}@512"] <= 100 for t in TASKS)
    assert res["offline"] and res["lm_eval_version"] and res["max_length"] == LENGTH + H.MAX_GEN_TOKENS
    assert [(c["task"], c["n"]) for c in res["cells"]] == [(t, 2) for t in TASKS]
    assert all(c["prompt_tokens_max"] <= LENGTH for c in res["cells"])  # sized by lm-eval to the length


def test_a_skipped_cell_is_left_out_of_the_mean_and_the_count():
    cells = [
        {"task": "niah_single_1", "length": 4096, "score": 50.0},
        {"task": "ruler_vt", "length": 4096, "score": None, "skipped": "why"},
        {"task": "ruler_fwe", "length": 4096, "score": 100.0},
        {"task": "ruler_fwe", "length": 8192, "score": 20.0},
    ]
    assert H.harness_columns(cells) == {
        "ruler_niah_single_1@4096": 50.0,
        "ruler_fwe@4096": 100.0,
        "ruler_fwe@8192": 20.0,
        "ruler@4096": 75.0,
        "ruler_tasks@4096": 2.0,
        "ruler@8192": 20.0,
        "ruler_tasks@8192": 1.0,
    }


def test_the_per_sample_log_sits_beside_results_json(first):
    res, out, *_ = first
    saved = json.loads((out / "results.json").read_text())
    assert saved["columns"] == res["columns"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [(r["task"], r["doc_id"]) for r in rows] == [(t, i) for t in TASKS for i in range(2)]
    for r in rows:
        assert r["length"] == LENGTH and isinstance(r["answer"], str) and 0 <= r["score"] <= 1
        assert r["doc"]["outputs"] and "special magic" in r["prompt"]


def test_a_second_run_reads_the_cache_and_calls_lm_eval_no_more(first, export):
    res, _, cache, cells = first
    assert sorted(cells) == sorted((t, LENGTH) for t in TASKS)
    out = cache.parent / "again"
    request = H.HarnessRequest(tasks=TASKS, lengths=[LENGTH], limit=2, out_dir=out, cache_dir=cache)
    with Calls() as calls:
        again = H.run_ruler(export, request)
    assert calls.cells == []
    assert all(c.get("cached") for c in again["cells"]) and again["columns"] == res["columns"]
    assert (out / "samples.jsonl").read_text() == (first[1] / "samples.jsonl").read_text()  # the log is cached too
    with Calls() as calls:  # another limit is another cell
        H.run_ruler(export, H.HarnessRequest(tasks=TASKS[:1], lengths=[LENGTH], limit=1, cache_dir=cache))
    assert calls.cells == [(TASKS[0], LENGTH)]


def test_a_damaged_cache_entry_is_recomputed(first, export, tmp_path):
    _, _, cache, _ = first
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    entry, data = next((p, d) for p in sorted(copy.glob("harness_*.json")) if (d := json.loads(p.read_text()))["limit"] == 2)
    data["score"] = 100.0  # edited by hand: its content hash no longer matches
    entry.write_text(json.dumps(data))
    with Calls() as calls, pytest.warns(UserWarning, match="content hash"):
        H.run_ruler(export, H.HarnessRequest(tasks=TASKS, lengths=[LENGTH], limit=2, cache_dir=copy))
    assert calls.cells == [(data["task"], LENGTH)]


def test_the_prompts_are_lm_evals_own_documents(first, export):
    """lm-eval's task function, called directly after the seeds simple_evaluate sets, builds the documents
    whose inputs open the prompts archpool logged."""
    import numpy as np
    from lm_eval.tasks.ruler import common_utils, niah_utils

    _, out, *_ = first
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    common_utils.get_tokenizer.cache_clear()
    with H.offline():
        for task in TASKS:
            random.seed(0)
            np.random.seed(1234)
            docs = getattr(niah_utils, task)(max_seq_lengths=[LENGTH], tokenizer=str(export))["test"]
            logged = [r for r in rows if r["task"] == task]
            for r in logged:
                doc = docs[r["doc_id"]]
                assert r["prompt"].startswith(doc["input"]) and r["prompt"].endswith(doc["gen_prefix"])
                assert r["doc"]["outputs"] == doc["outputs"]


def test_a_downloading_task_is_refused_offline_with_a_named_error():
    for task in ("niah_single_2", "niah_multivalue", "ruler_qa_squad", "ruler_qa_hotpot"):
        with pytest.raises(H.DownloadRefused, match="--allow-download") as e:
            H.HarnessRequest(tasks=["niah_single_1", task], lengths=[LENGTH])
        assert e.value.field == "harness.tasks" and task in e.value.message
    assert H.HarnessRequest(tasks=["niah_single_2"], lengths=[LENGTH], allow_download=True).tasks == ("niah_single_2",)
    assert set(H.LOCAL_TASKS) | set(H.DOWNLOADS) == set(H.RULER_TASKS) and len(H.RULER_TASKS) == 13


def test_a_failed_download_is_a_named_data_error(export, monkeypatch):
    from types import SimpleNamespace

    from archpool.errors import DataError

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'baber/paul_graham_essays' on the Hub")

    monkeypatch.setattr(H._Session, "model", lambda self: SimpleNamespace(tokenizer=None))
    monkeypatch.setattr(H, "run_lm_eval", unreachable)
    request = H.HarnessRequest(tasks=["niah_single_2"], lengths=[LENGTH], limit=1, allow_download=True)
    with pytest.raises(DataError, match="niah_single_2: lm-eval could not download its data .*Paul Graham"):
        H.run_ruler(export, request)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tasks": ["niah_single_9"]}, "harness.tasks"),
        ({"tasks": []}, "harness.tasks"),
        ({"lengths": [32]}, "harness.lengths"),
        ({"lengths": [1 << 40]}, "harness.lengths"),
        ({"lengths": []}, "harness.lengths"),
        ({"limit": 0}, "harness.limit"),
        ({"limit": 501}, "harness.limit"),
        ({"seed": 1.5}, "harness.seed"),
    ],
)
def test_a_request_is_checked_when_built(kwargs, field):
    with pytest.raises(ConfigError) as e:
        H.HarnessRequest(**{"lengths": [LENGTH], **kwargs})
    assert e.value.field == field


def test_offline_mode_is_set_for_the_run_and_restored(monkeypatch):
    import nltk

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    real = nltk.download
    with H.offline():
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
        assert nltk.download("punkt_tab") is False  # lm-eval's import-time download is skipped
        hub = sys.modules.get("huggingface_hub.constants")
        assert hub is None or hub.HF_HUB_OFFLINE
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["HF_DATASETS_OFFLINE"] == "0" and nltk.download is real
    with H.offline(False):
        assert "HF_HUB_OFFLINE" not in os.environ


def test_a_missing_package_is_a_named_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wonderwords" else real(name, *a))
    with pytest.raises(ConfigError, match=r"wonderwords not installed: pip install 'archpool\[harness\]'") as e:
        H.lm_eval_version()
    assert e.value.field == H.HARNESS_SUITE


def test_cells_lm_eval_cannot_build_are_skipped_with_their_reason(export):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(export))
    why = H.cannot_build("ruler_vt", LENGTH, tok)  # a 700-token BPE cannot fit the 500-token example
    assert why and "variable-tracking" in why
    assert H.cannot_build("niah_single_1", LENGTH, tok) is None
    why = H.cannot_build("ruler_cwe", LENGTH, tok)  # 10 words and the worked example: over 1,000 BPE tokens
    assert why and "common-words" in why
    assert H.cannot_build("ruler_cwe", 2048, tok) is None


def test_cli_suite_lm_eval_ruler(first, export, tmp_path, capsys):
    """``archpool eval EXPORT --suite lm-eval:ruler``: from the cache of the first run (no lm-eval call)."""
    from archpool.cli import main

    _, _, cache, _ = first
    args = ["eval", str(export), "--suite", "lm-eval:ruler", "--lengths", "512", "--harness-tasks", ",".join(TASKS)]
    with Calls() as calls:
        rc = main([*args, "--limit", "2", "--cache", str(cache), "--out", str(tmp_path / "ev"), "--no-progress"])
    assert rc == 0 and calls.cells == []
    shown = capsys.readouterr().out
    assert "(2/13 tasks)" in shown and "niah_multikey_2" in shown
    assert (tmp_path / "ev" / "harness" / "results.json").is_file() and (tmp_path / "ev" / "harness" / "samples.jsonl").is_file()
    assert main(["eval", str(export), "--suite", "lm-eval:ruler", "--harness-tasks", "ruler_qa_squad", "--lengths", "512"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "harness.tasks" in err[0] and "--allow-download" in err[0]
    assert main(["eval", str(export), "--suite", "lm-eval:ruler"]) == 2  # the lengths are asked for
    assert "--lengths" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- pool section
def test_pool_section_is_typed_and_checked_at_load():
    from archpool.pool.sections import EvalSettings

    e = EvalSettings.from_dict({"harness": {"ruler": {"lengths": [4096]}}})
    assert e.harness.ruler.tasks == list(H.LOCAL_TASKS) and e.harness.ruler.limit == H.DEFAULT_LIMIT
    assert EvalSettings.from_dict(e.to_dict()) == e
    assert "harness" not in EvalSettings.from_dict({}).to_dict()  # the stage keys of other pools stay the same
    with_download = {"ruler": {"tasks": ["ruler_qa_hotpot"], "allow_download": True}}
    assert EvalSettings.from_dict({"harness": with_download}).harness.ruler.tasks == ["ruler_qa_hotpot"]


@pytest.mark.parametrize(
    ("harness", "field"),
    [
        ({"ruler": {"tasks": ["niah_single_9"]}}, "eval.harness.ruler.tasks"),
        ({"ruler": {"tasks": ["niah_single_2"]}}, "eval.harness.ruler.tasks"),  # downloads: not allowed
        ({"ruler": {"tasks": "niah_single_1"}}, "eval.harness.ruler.tasks"),
        ({"ruler": {"lengths": [8]}}, "eval.harness.ruler.lengths"),
        ({"ruler": {"lengths": 4096}}, "eval.harness.ruler.lengths"),
        ({"ruler": {"limit": True}}, "eval.harness.ruler.limit"),
        ({"ruler": {"limit": 0}}, "eval.harness.ruler.limit"),
        ({"ruler": {"task": ["niah_single_1"]}}, "eval.harness.ruler.task"),
        ({"rulr": {}}, "eval.harness.rulr"),
        (["ruler"], "eval.harness"),
    ],
)
def test_pool_section_errors_name_the_field(harness, field):
    from archpool.pool.spec import load_pool

    with pytest.raises(ConfigError) as e:
        load_pool({"name": "p", "runs": [{"name": "a"}], "eval": {"harness": harness}})
    assert e.value.field == field


@pytest.mark.slow
def test_checkpoint_pool_writes_the_columns_into_results_csv(tmp_path):
    """A checkpoint pool of an HF export and an archpool checkpoint (exported into the pool's hf/ first)."""
    import csv

    import yaml

    from archpool.model.checkpoint import save_checkpoint
    from tests.helpers.pool import run_cli

    hf, tok, model = _export(tmp_path)
    ckpt = save_checkpoint(model, tmp_path / "ckpt")
    tok.save(ckpt)
    spec = {
        "name": "hx",
        "long_ctx": LENGTH,
        "runs": [{"name": "hf", "checkpoint": str(hf)}, {"name": "ours", "checkpoint": str(ckpt)}],
        "eval": {
            "tasks": ["kv_recall"],
            "n_samples": 2,
            "length_ratios": [1],
            "base": False,
            "harness": {"ruler": {"tasks": ["niah_multikey_2"], "limit": 1}},
        },
        "attention": {"enabled": False},
        "report": {"target": "ruler@512"},
    }
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    r = run_cli("run", str(path), "--out", str(out), "--no-progress", timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {row["run"]: row for row in csv.DictReader((out / "results.csv").read_text().splitlines())}
    for name in ("hf", "ours"):
        assert rows[name]["ruler_tasks@512"] not in ("", None) and float(rows[name]["ruler_tasks@512"]) == 1
        assert rows[name]["ruler@512"] == rows[name]["ruler_niah_multikey_2@512"] != ""
    assert rows["hf"]["ruler@512"] == rows["ours"]["ruler@512"]  # one model, two formats
    assert list(out.glob("hf/*/model.safetensors"))  # the archpool checkpoint's export, in the pool's hf/
