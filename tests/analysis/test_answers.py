"""Effects from the scored answers: every results.csv column rebuilt from them, contrasts whose per-seed
values are results.csv's differences, and the analysis's inference on both sources of noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archpool.analysis import analyze, load_results
from archpool.analysis.answers import Answers, load_answers
from archpool.errors import DataError
from tests.helpers.answers import make_answers, results_from

TARGET = "mqar_acc@1024[d>128]#ext50"


def _pool(tmp_path, answers: pd.DataFrame):
    results_from(answers).to_csv(tmp_path / "results.csv", index=False)
    answers.to_parquet(tmp_path / "items.parquet", index=False)
    return load_results(tmp_path / "results.csv"), load_answers(tmp_path / "results.csv")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return _pool(tmp_path_factory.mktemp("answers"), make_answers())


@pytest.mark.parametrize(
    "column",
    [
        "mqar_acc@1024[d>128]#ext25",
        "mqar_lp@1024#ext0",
        "base_mqar_acc@128",
        "base_mqar_lp@1024[d>128]",
        "mqar_acc@1024[d>128]#ladder_mean",
        "mqar_acc@1024[d>128]#ladder_auc",
    ],
)
def test_every_column_is_rebuilt_from_the_answers(pool, column):
    df, answers = pool
    v = answers.doc_values(column)
    assert v is not None and v.n_docs == 16
    for run, x in zip(df["run"], df[column]):
        assert v.value(run) == pytest.approx(float(x), abs=2e-6)


def test_columns_that_are_no_mean_over_answers_have_none(pool):
    _, answers = pool
    assert answers.doc_values("pretrain_loss") is None
    assert answers.doc_values("mqar_acc@2048#ext25") is None  # never evaluated
    assert answers.doc_values("mqar_chain_chain@1024") is None


def test_a_contrast_has_results_csvs_per_seed_differences(pool):
    df, answers = pool
    arm, base = [f"gqa_s{s}" for s in range(3)], [f"base_s{s}" for s in range(3)]
    est = answers.contrast([(TARGET, arm, 1.0), (TARGET, base, -1.0)])
    v = df.set_index("run")[TARGET]
    for s in range(3):
        assert est["per_seed"][s] == pytest.approx(v[f"gqa_s{s}"] - v[f"base_s{s}"], abs=4e-6)
    assert est["source"] == "answers" and est["n_docs"] == 16 and est["n"] == 3
    assert est["mean"] == pytest.approx(np.mean(list(est["per_seed"].values())))
    assert est["ci95"][0] < est["mean"] < est["ci95"][1]


def test_an_answers_table_of_another_pool_is_refused(tmp_path):
    answers = make_answers(rng_seed=1)
    df, _ = _pool(tmp_path, make_answers(rng_seed=2))
    with pytest.raises(DataError, match="belongs to another results table"):
        analyze(df, TARGET, answers=Answers(answers, "other.parquet"))


def test_a_damaged_answers_table_is_a_named_error(tmp_path):
    (tmp_path / "items.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="not a readable answers table"):
        load_answers(tmp_path / "results.csv")


def one_document_accuracy(arm: str, seed: int, where: str, doc: int, distance: int) -> float:
    """Every answer right, except that the GQA arm misses the answers of document 5 beyond 128 after extension."""
    return 0.0 if arm == "gqa" and where.startswith("ext") and doc == 5 and distance > 128 else 1.0


def test_identical_seeds_from_one_document_are_not_beyond_noise(tmp_path):
    df, answers = _pool(tmp_path, make_answers(accuracy=one_document_accuracy, arms=("base", "gqa")))
    r = analyze(df, TARGET, answers=answers)
    x = next(x for x in r["extension_effects"]["axes"][0]["effects"] if x["is_target"])
    post = x["post"]
    assert len(set(np.round(list(post["per_seed"].values()), 9))) == 1 and post["mean"] < 0  # the same cost on every seed
    assert post["source"] == "answers" and post["p"] > 0.05
    r_seeds = analyze(df, TARGET)  # without the answers: no spread to test against, not a certainty
    x = next(x for x in r_seeds["extension_effects"]["axes"][0]["effects"] if x["is_target"])
    assert x["post"]["source"] == "seeds" and x["post"]["p"] is None
    assert r["inference"]["source"] == "answers" and r_seeds["inference"]["source"] == "seeds"


def test_a_real_effect_on_every_document_is_beyond_noise(tmp_path):
    def acc(arm, seed, where, doc, distance):
        return 0.9 if where.startswith("base") else (0.5 if arm == "gqa" else 0.8) + 0.02 * seed

    df, answers = _pool(tmp_path, make_answers(accuracy=acc, arms=("base", "gqa")))
    post = next(x for x in analyze(df, TARGET, answers=answers)["extension_effects"]["axes"][0]["effects"] if x["is_target"])[
        "post"
    ]
    assert post["mean"] == pytest.approx(-0.3, abs=0.06) and post["p"] < 1e-3


def test_an_answers_table_of_the_wrong_types_is_a_named_error(tmp_path):
    frame = make_answers(arms=("base",)).assign(doc="first")  # a document index that is not a number
    frame.to_parquet(tmp_path / "items.parquet", index=False)
    with pytest.raises(DataError, match="not a readable answers table"):
        load_answers(tmp_path / "results.csv")
    make_answers(arms=("base",)).drop(columns="lp").to_parquet(tmp_path / "items.parquet", index=False)
    with pytest.raises(DataError, match="not a readable answers table"):
        load_answers(tmp_path)
