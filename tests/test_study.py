"""The study's definitions have one home (archpool/study.py): every stage that reports them agrees."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from archpool import axes, study
from archpool.analysis.table import features, validate
from archpool.model.features import features_from_config
from archpool.pool.results import results_rows
from archpool.pool.spec import load_pool


@pytest.mark.parametrize("pool_name", ["demo", "smoke", "olmpool"])
def test_feature_counts_agree_across_the_pool_the_model_and_the_analysis(pool_name, tmp_path):
    pool = load_pool(pool_name)
    short = pool.short_ctx
    assert short == study.pool_short_ctx(pool.long_ctx)
    rows = results_rows(tmp_path, pool, [])  # design columns only: nothing has run
    table = validate(pd.DataFrame(rows).astype(str), "results.csv")
    from_analysis = features(table, short)["feature_count"].tolist()
    for run, row, counted in zip(pool.runs, rows, from_analysis):
        cfg = run.model.replace(max_seq_len=run.pretrain_ctx)  # the model's own view of its context
        assert row["feature_count"] == run.feature_count(short) == counted
        assert features_from_config(cfg, short)["count"] == counted, run.name


def test_short_context_rules():
    assert study.pool_short_ctx(8192) == study.PAPER_SHORT_CTX  # the paper's 4K of 8K
    assert study.pool_short_ctx(128, override=100) == 100
    assert study.table_short_ctx([64, 128, 128]) == 64 and study.table_short_ctx([128]) == study.PAPER_SHORT_CTX


def test_one_final_loss_for_the_pool_and_archpool_eval(tmp_path):
    """pretrain_loss in results.csv (pool) and in `archpool eval`'s short metrics: the last 10% of steps."""
    from archpool.eval.short import final_loss

    losses = [float(i) for i in range(1, 51)]
    torch.save({"losses": losses, "step": 50}, tmp_path / "train_state.pt")
    assert final_loss(tmp_path) == study.final_loss(losses) == sum(losses[-5:]) / 5


def test_layer_patterns_round_trip():
    for name in study.SWA_PATTERNS:
        assert study.swa_pattern_name(study.layer_types(name, 8)) == name
    assert study.olmo3_layer_types(4) == ["sliding_attention"] * 3 + ["full_attention"]
    assert study.swa_pattern_name(study.every_kth_full(6, 2)) == study.every_kth_full(6, 2)


def test_qk_norm_spellings_are_one_map():
    from archpool.model.config import ModelConfig

    for alias, canonical in axes.QK_NORM_ALIASES.items():
        assert ModelConfig(qk_norm=alias).qk_norm == canonical == axes.canonical_qk_norm(alias.upper())
