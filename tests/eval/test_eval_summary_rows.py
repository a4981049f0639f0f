"""``archpool eval``'s report.md: suite rows only for the suites asked for, incomplete scores marked, and
the reasons of skipped cells."""

from __future__ import annotations

from archpool.eval.api import render_report
from archpool.eval.runner import aggregate, format_table
from archpool.tasks import RULER_TASKS

SKIP = "context 64 is too short for 4 needles in a haystack (needs 150 tokens)"


def _results(skip_at_short: set[str]) -> list[dict]:
    rows = []
    for length in (64, 512):
        for task in RULER_TASKS:
            if length == 64 and task in skip_at_short:
                rows.append({"task": task, "length": length, "mode": "gen", "skipped": SKIP, "n": 0})
            else:
                rows.append({"task": task, "length": length, "mode": "gen", "score": 50.0, "n": 4})
    return rows


def _report(tasks: list[dict], suites: list[str]) -> str:
    result = {
        "target": "run",
        "model_hash": "m" * 12,
        "tokenizer_hash": "t" * 12,
        "pretrain_len": 64,
        "lengths": [64, 512],
        "seed": 0,
        "n_samples": 4,
        "haystack": "pseudo-text",
        "mode_note": "gen",
        "suites": suites,
        "tasks": tasks,
        "aggregate": aggregate(tasks),
    }
    return render_report(result, format_table(tasks))


def test_only_the_asked_suites_have_summary_columns():
    text = _report(_results(set()), ["ruler"])
    suites = text.split("## Suites", 1)[1]
    assert "| mode@length | ruler |" in suites
    assert "tiny" not in suites and "helmet" not in suites  # niah_single_1 is also a tiny-suite task


def test_incomplete_scores_are_marked_and_skips_explained():
    skipped = {"niah_multikey_3", "niah_multivalue"}
    text = _report(_results(skipped), ["ruler"])
    suites = text.split("## Suites", 1)[1]
    assert "| gen@64 | 50.0 (incomplete) |" in suites
    assert "| gen@512 | 50.0 |" in suites
    assert "(incomplete): the mean over the tasks that ran" in suites
    for task in skipped:
        assert f"- {task} at 64: {SKIP}" in text


def test_a_complete_run_has_no_marker_and_no_skip_list():
    text = _report(_results(set()), ["ruler"])
    assert "incomplete" not in text and "Skipped cells" not in text
