"""A long attention analysis keeps its retrieval-head search's finished trials as they finish
(archpool.attention.retrieval.TrialJournal): stopped in the search or in the masking ablation, the same
analysis resumes without repeating a finished trial and gives the uninterrupted analysis's result; a line cut
short by the kill is dropped and its trial run again; the journal is gone once the result is cached."""

from __future__ import annotations

import json

import pytest

from archpool.attention import retrieval
from archpool.attention.stage import TRIALS_SUFFIX, analyze_target, cache_dir

# 1 length x 10 depths = 10 needle trials, one head masked in the ablation (each arm 10 more decodes)
SETTINGS = dict(sink_samples=2, long_samples=1, queries=4, lengths=(32,), retrieval_lengths=(24,), mask_k=1, top_k=3)
N_TRIALS = 10


class Stop(Exception):
    """Stands for the kill: raised by a decode after ``after`` calls."""


def counting(monkeypatch, name: str, after: int | None = None) -> list[int]:
    """Count calls of ``retrieval.<name>``; with ``after``, the call after that many raises :class:`Stop`."""
    calls: list[int] = []
    real = getattr(retrieval, name)

    def wrapped(*a, **k):
        if after is not None and len(calls) >= after:
            raise Stop
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(retrieval, name, wrapped)
    return calls


@pytest.fixture(scope="module")
def reference(attn_store, tmp_path_factory):
    """The uninterrupted analysis of the run (its own cache)."""
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    run = tmp_path_factory.mktemp("resume") / "run"
    cfg = ModelConfig(vocab_size=attn_store.tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                      max_seq_len=32, swa_pattern=["sliding", "full"], window=8)  # fmt: skip
    save_checkpoint(Decoder(cfg, seed=0), run / "milestones" / "final")
    record = {"kind": "pretrain", "model": cfg.to_dict(), "data": {"store": str(attn_store.path)}}
    (run / "run_config.json").write_text(json.dumps(record))
    with pytest.MonkeyPatch.context() as m:
        m.setenv("ARCHPOOL_CACHE", str(run.parent / "reference_cache"))
        return run, analyze_target(run, SETTINGS)


@pytest.fixture()
def uninterrupted(reference, tmp_path, monkeypatch):
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    return reference[1]


@pytest.fixture()
def attn_run(reference):
    return reference[0]


def journal_file():
    (path,) = cache_dir().glob(f"*{TRIALS_SUFFIX}")
    return path


def journal_entries(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_a_search_stopped_midway_resumes_without_repeating_finished_trials(attn_run, uninterrupted, monkeypatch):
    with monkeypatch.context() as m:
        counting(m, "decode_with_top1", after=7)
        with pytest.raises(Stop):
            analyze_target(attn_run, SETTINGS)
    path = journal_file()
    assert [e["i"] for e in journal_entries(path)] == list(range(7))  # kept as each trial finished
    assert not list(cache_dir().glob("*.json"))  # no result yet
    logs: list[str] = []
    decodes = counting(monkeypatch, "decode_with_top1")
    resumed = analyze_target(attn_run, SETTINGS, log=lambda *a: logs.append(" ".join(map(str, a))))
    assert len(decodes) == N_TRIALS - 7  # only the trials that had not finished
    assert any(f"resuming, 7/{N_TRIALS} search trials kept" in line for line in logs)
    assert resumed["retrieval"] == uninterrupted["retrieval"] and resumed["metrics"] == uninterrupted["metrics"]
    assert not path.exists()  # the result is cached: its trials are not kept


def test_a_stop_in_the_ablation_keeps_the_search_and_the_finished_ablation_trials(attn_run, uninterrupted, monkeypatch):
    with monkeypatch.context() as m:
        counting(m, "greedy", after=N_TRIALS + 5)  # the top-k arm done, 5 trials into the random arm
        with pytest.raises(Stop):
            analyze_target(attn_run, SETTINGS)
    phases = [e["phase"].split(":")[0] for e in journal_entries(journal_file())]
    assert phases.count("search") == N_TRIALS and phases.count("top") == N_TRIALS and phases.count("random") == 5
    decodes, greedies = counting(monkeypatch, "decode_with_top1"), counting(monkeypatch, "greedy")
    resumed = analyze_target(attn_run, SETTINGS)
    assert len(decodes) == 0 and len(greedies) == N_TRIALS - 5
    assert resumed["retrieval"] == uninterrupted["retrieval"]


def test_a_line_cut_short_by_the_kill_is_dropped_and_its_trial_run_again(attn_run, uninterrupted, monkeypatch):
    with monkeypatch.context() as m:
        counting(m, "decode_with_top1", after=6)
        with pytest.raises(Stop):
            analyze_target(attn_run, SETTINGS)
    path = journal_file()
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # the last line's write cut short
    decodes = counting(monkeypatch, "decode_with_top1")
    resumed = analyze_target(attn_run, SETTINGS)
    assert len(decodes) == N_TRIALS - 5
    assert resumed["retrieval"] == uninterrupted["retrieval"]


def test_a_journal_of_other_trials_is_started_afresh(attn_run, uninterrupted, monkeypatch):
    with monkeypatch.context() as m:
        counting(m, "decode_with_top1", after=4)
        with pytest.raises(Stop):
            analyze_target(attn_run, SETTINGS)
    path = journal_file()
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    path.write_text("\n".join([json.dumps({**header, "trials": "0" * 24}), *lines[1:]]) + "\n")  # other trials' journal
    decodes = counting(monkeypatch, "decode_with_top1")
    analyze_target(attn_run, SETTINGS)
    assert len(decodes) == N_TRIALS
