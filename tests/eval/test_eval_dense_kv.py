"""Scoring a second dense family (``dense_kv``) through the one dense scorer: a windowed oracle gets exactly
the answers within its window right, the chance level is the family's, and the pool columns and the
distance filters pool validation accepts are the ones the scorer makes."""

from __future__ import annotations

import pytest

from archpool.columns import dense_columns
from archpool.errors import ConfigError
from archpool.eval.api import EvalRequest
from archpool.eval.dense import bucket_labels, default_buckets, run_dense_task, score_rows
from archpool.tasks import task_config
from tests.eval.test_eval_dense import WINDOW, _oracle_lm


@pytest.fixture(scope="module")
def tok(bpe):
    return bpe.with_task_tokens(369)


@pytest.mark.parametrize(("distance", "acc"), [(WINDOW - 8, 1.0), (WINDOW + 12, 0.0)])
def test_at_a_fixed_distance_the_oracle_is_right_exactly_within_its_window(tok, distance, acc):
    config = task_config("dense_kv", {"law": "fixed", "fixed_distance": distance, "buckets": [WINDOW]})
    r = run_dense_task(_oracle_lm(tok, config), tok, "dense_kv", 256, 4, seed=2, config=config)
    assert r["mode"] == "dense" and r["n"] >= 4 * 20 and r["result"]["acc"] == acc
    assert r["chance"] == 100.0 / config.n_values and r["params"] == config.generator_params()
    assert {row["distance"] for row in r["samples"]} == {distance}
    cols = dense_columns(r)
    inside = distance <= WINDOW
    assert cols == {
        "dense_kv_acc@256": acc,
        "dense_kv_lp@256": pytest.approx(r["result"]["lp"], abs=1e-6),
        f"dense_kv_acc@256[{'d<=' if inside else 'd>'}{WINDOW}]": acc,
        f"dense_kv_lp@256[{'d<=' if inside else 'd>'}{WINDOW}]": pytest.approx(r["result"]["lp"], abs=1e-6),
    }  # no chain columns: the family has none


def test_uniform_distances_split_at_the_window_and_every_filter_is_a_validated_label(tok):
    config = task_config("dense_kv", {"buckets": [WINDOW, 128]})
    r = run_dense_task(_oracle_lm(tok, config), tok, "dense_kv", 512, 6, seed=1, config=config)
    b = r["result"]["buckets"]
    assert b[f"d<={WINDOW}"]["acc"] == 1.0 and b[f"{WINDOW}<d<=128"]["acc"] == 0.0 and b["d>128"]["acc"] == 0.0
    assert sum(x["n"] for x in b.values()) == r["n"]
    filters = {c.partition("[")[2].rstrip("]") for c in dense_columns(r) if "[" in c}
    assert filters == set(bucket_labels([WINDOW, 128], 512))


@pytest.mark.parametrize(("length", "buckets"), [(256, None), (1024, [64, 128, 512]), (100, [200]), (300, [5, 5, 299, 300])])
def test_bucket_labels_are_the_scorers_filters(length, buckets):
    scored = score_rows([], length, buckets or default_buckets(length))
    assert bucket_labels(buckets, length) == [*scored["buckets"], *(t for t in scored["tails"] if t not in scored["buckets"])]


def test_a_length_too_short_for_the_config_is_skipped_not_failed(tok):
    config = task_config("dense_kv", {"law": "fixed", "fixed_distance": 200})
    r = run_dense_task(None, tok, "dense_kv", 128, 2, seed=0, config=config)
    assert r["n"] == 0 and "needs at least 202 tokens" in r["skipped"]


def test_an_eval_request_takes_the_familys_parameters():
    request = EvalRequest(suites=(), tasks=("dense_kv",), task_params={"dense_kv": {"law": "powerlaw", "alpha": 2}})
    assert request.task_config("dense_kv") == task_config("dense_kv", {"law": "powerlaw", "alpha": 2})
    with pytest.raises(ConfigError, match="did you mean 'alpha'"):
        EvalRequest(suites=(), tasks=("dense_kv",), task_params={"dense_kv": {"alpah": 2}})
