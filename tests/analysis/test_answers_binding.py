"""The answers table is bound to its results table: runs, seeds and architectures must agree; intervals stay
inside the range of their statistic; a run without a seed among seeded ones is refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archpool.analysis.answers import Answers, clipped, estimate
from archpool.analysis.table import TableError, validate
from archpool.errors import DataError


def _answers(runs: dict[str, tuple[str, int]], correct: float = 1.0) -> Answers:
    rows = []
    for run, (arch, seed) in runs.items():
        for doc in range(3):
            for q in range(4):
                rows.append(
                    dict(
                        run=run,
                        arch=arch,
                        seed=seed,
                        recipe="ntk",
                        prefix="",
                        rung="ext1",
                        milestone="",
                        task="mqar",
                        mode="dense",
                        length=256,
                        doc=doc,
                        query=q,
                        distance=10 + 40 * q,
                        hop=1,
                        chain=0,
                        correct=correct if arch != "b" else 0.0,
                        lp=-0.1,
                    )
                )
    return Answers(pd.DataFrame(rows))


def _results(runs: dict[str, tuple[str, int]]) -> pd.DataFrame:
    rows = [
        dict(run=r, arch=a, seed=s, swa=0, qk_norm="none", norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=128)
        for r, (a, s) in runs.items()
    ]
    return validate(pd.DataFrame(rows).astype(str))


RUNS = {"a_s0": ("a", 0), "a_s1": ("a", 1), "b_s0": ("b", 0), "b_s1": ("b", 1)}


def test_answers_that_match_their_results_pass():
    _answers(RUNS).check(_results(RUNS), [])


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({**RUNS, "c_s0": ("c", 0)}, "is in the answers but not in results.csv"),
        ({"a_s0": ("a", 1), "a_s1": ("a", 0), "b_s0": ("b", 0), "b_s1": ("b", 1)}, "has seed 1 in the answers and 0"),
        ({"a_s0": ("b", 0), "a_s1": ("a", 1), "b_s0": ("b", 0), "b_s1": ("b", 1)}, "is architecture 'b' in the answers"),
    ],
)
def test_answers_from_another_table_or_with_swapped_labels_are_refused(answers, message):
    with pytest.raises(DataError, match=message):
        _answers(answers).check(_results(RUNS), [])


def test_a_run_without_a_seed_among_seeded_runs_is_refused():
    table = pd.DataFrame(
        [
            dict(run=r, seed="" if r == "b_s1" else s, swa=0, qk_norm="none", norm="pre", n_kv_heads=4, pretrain_ctx=128)
            for r, (_, s) in RUNS.items()
        ]
    ).astype(str)
    with pytest.raises(TableError, match=r"row 4.*no seed where other runs have one"):
        validate(table)


def test_an_accuracy_difference_stays_within_its_range_and_no_variance_gets_no_interval():
    a = _answers(RUNS)
    est = a.contrast([("mqar_acc@256#ext1", ["b_s0", "b_s1"], 1.0), ("mqar_acc@256#ext1", ["a_s0", "a_s1"], -1.0)])
    assert est["mean"] == pytest.approx(-1.0) and est["range"] == [-1.0, 1.0]
    assert est["zero_variance"] is True and est["ci95"] == [None, None]
    z = np.array([[-1.0, -0.9, -1.0], [-1.0, -1.0, -0.95]])
    wide = estimate(z, [0, 1], bounds=(-1.0, 1.0))
    assert wide["ci95"][0] >= -1.0 and wide["ci95"][1] <= 1.0
    assert clipped([-1.3, -0.7], (-1.0, 1.0)) == [-1.0, -0.7] and clipped([-3.0, 2.0], None) == [-3.0, 2.0]
    lp = a.contrast([("mqar_lp@256#ext1", ["b_s0", "b_s1"], 1.0), ("mqar_lp@256#ext1", ["a_s0", "a_s1"], -1.0)])
    assert lp["range"] is None


def test_one_seed_per_arm_does_not_claim_the_seeds_noise(tmp_path):
    from archpool.analysis import analyze, load_results
    from archpool.analysis.answers import load_answers
    from tests.helpers.answers import make_answers, results_from

    answers = make_answers(seeds=1)
    results_from(answers).to_csv(tmp_path / "results.csv", index=False)
    answers.to_parquet(tmp_path / "items.parquet")
    r = analyze(
        load_results(tmp_path / "results.csv"), "mqar_acc@1024[d>128]#ext50", answers=load_answers(tmp_path / "results.csv")
    )
    words = r["inference"]["words"]
    assert "one seed per architecture" in words and "seeds' is not measured" in words
    assert "carry the noise of the seeds" not in words


def test_an_answers_table_that_is_not_a_regular_file_is_named(tmp_path):
    from archpool.analysis.answers import load_answers

    (tmp_path / "results.csv").write_text("run\n")
    (tmp_path / "items.parquet").mkdir()
    with pytest.raises(DataError, match=r"items.parquet: not a regular file"):
        load_answers(tmp_path / "results.csv")
