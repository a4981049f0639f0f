"""The mastery metric is the accuracy of the target's own task: any dense family's, behind a recipe prefix
and for any of its statistics, without the results table's columns to go by."""

from __future__ import annotations

import pytest

from archpool.analysis.mastery import dense_task, mastery, mastery_metric


@pytest.mark.parametrize(
    ("target", "metric"),
    [
        ("dense_kv_acc@512[d>128]#ext12", "dense_kv_acc"),
        ("dense_kv_lp@512", "dense_kv_acc"),
        ("remedy_dense_kv_acc@512[d>128]#ladder_mean", "dense_kv_acc"),
        ("base_dense_kv_acc@128", "dense_kv_acc"),
        ("mqar_rebind_acc@1024[d>128]#ext12", "mqar_rebind_acc"),
        ("temp_mqar_rebind_lp@1024", "mqar_rebind_acc"),
        ("mqar_chain_hop2_acc@512", "mqar_chain_acc"),
        ("mqar_chain_chain@512", "mqar_chain_acc"),
        ("niah_single_1_ll@4096", "niah_single_1_acc"),  # a prompt task: <task>_acc, as before
        ("helmet", None),
    ],
)
def test_the_mastery_metric_is_the_target_tasks_accuracy(target, metric):
    assert mastery_metric(target) == metric


def test_a_dense_task_is_found_by_its_familys_statistics():
    assert dense_task("dense_kv_acc") == "dense_kv" and dense_task("x_mqar_chain_hop2_acc") == "mqar_chain"
    assert dense_task("dense_kv_chain") is None  # dense_kv has no chains
    assert dense_task("kv_recall_ll") is None and dense_task("mqar") is None


def test_mastery_of_a_second_family_is_judged_on_its_own_columns():
    row = {
        "pretrain_ctx": 128,
        "base_dense_kv_acc@128": 0.96,
        "base_dense_kv_acc@128[d<=64]": 0.99,
        "base_dense_kv_acc@128[d>64]": 0.91,
        "base_mqar_acc@128": 0.2,  # another task of the pool: not the scored one
    }
    metric = mastery_metric("remedy_dense_kv_acc@1024[d>128]#ext12")
    assert mastery(row, metric) == {"mastery_acc": 0.96, "mastery_min_bucket": 0.91, "mastered": 1}
