"""The mastery rule: accuracy and every distance bucket at the run's own pretraining length, before extension."""

from __future__ import annotations

import math

import pandas as pd

from archpool.analysis.mastery import mastery, mastery_frame, mastery_metric


def _row(**metrics):
    return {"run": "r", "pretrain_ctx": 128, **metrics}


def test_a_run_masters_its_own_length_when_accuracy_and_every_bucket_pass():
    row = _row(
        **{
            "base_mqar_acc@128": 0.95,
            "base_mqar_acc@128[d<=64]": 0.97,
            "base_mqar_acc@128[64<d<=128]": 0.92,
            "base_mqar_acc@128[d>64]": 0.93,
            "base_mqar_acc@256": 0.1,  # another length: not judged
            "base_mqar_acc@256[d>128]": 0.0,
        }
    )
    assert mastery(row) == {"mastery_acc": 0.95, "mastery_min_bucket": 0.92, "mastered": 1}


def test_one_bucket_below_the_threshold_fails_mastery_even_with_a_high_mean():
    row = _row(**{"base_mqar_acc@128": 0.97, "base_mqar_acc@128[d<=64]": 0.99, "base_mqar_acc@128[d>64]": 0.89})
    m = mastery(row)
    assert m["mastered"] == 0 and m["mastery_min_bucket"] == 0.89
    assert mastery(row, threshold=0.85)["mastered"] == 1
    assert mastery(_row(**{"base_mqar_acc@128": 0.89}))["mastered"] == 0  # no buckets: the mean decides


def test_missing_columns_give_none_and_empty_buckets_are_not_judged():
    none = {"mastery_acc": None, "mastery_min_bucket": None, "mastered": None}
    assert mastery(_row(**{"base_mqar_acc@256": 0.99})) == none  # not at its own length
    assert mastery({"base_mqar_acc@128": 0.99}) == none  # no pretraining length
    assert mastery(_row(**{"base_mqar_acc@128": float("nan")})) == none
    assert mastery(_row(**{"mqar_acc@128": 0.99})) == none  # after extension is not before
    row = _row(**{"base_mqar_acc@128": 0.95, "base_mqar_acc@128[d>64]": float("nan"), "base_mqar_acc@128[d<=64]": ""})
    assert mastery(row) == {"mastery_acc": 0.95, "mastery_min_bucket": None, "mastered": 1}


def test_the_mastery_metric_of_a_target():
    assert mastery_metric("mqar_acc@1024[d>128]#ladder_mean") == "mqar_acc"
    assert mastery_metric("mqar_acc@1024#ext5") == "mqar_acc"
    assert mastery_metric("mqar_lp@512") == "mqar_acc"
    assert mastery_metric("helmet") is None
    cols = ["base_mqar_acc@128", "remedy_mqar_acc@1024[d>128]#ladder_mean"]
    assert mastery_metric("remedy_mqar_acc@1024[d>128]#ladder_mean", cols) == "mqar_acc"


def test_mastery_frame_prefers_base_columns_and_falls_back_to_the_table():
    df = pd.DataFrame(
        {
            "run": ["a", "b"],
            "pretrain_ctx": [128, 128],
            "base_mqar_acc@128": [0.5, math.nan],
            "mastery_acc": [0.99, 0.93],
            "mastery_min_bucket": [0.99, 0.91],
            "mastered": [1.0, 1.0],
        }
    )
    m = mastery_frame(df)
    assert list(m["mastered"]) == [0, 1] and list(m["from"]) == ["base", "table"]
    assert m["mastery_acc"].tolist() == [0.5, 0.93]
