"""Matched pairs, interactions and seed spread on tables whose effects we built in."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archpool.analysis import analyze, load_results


def _analyze(tmp_path, df: pd.DataFrame, **kw):
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    return analyze(load_results(path), "helmet", **kw)


def test_factorial_pairs_recover_the_built_in_effects(tmp_path, table):
    effects = {"qk_norm": -6.0, "gqa": -2.0, "swa": -1.0, "short_ctx": -1.5}
    r = _analyze(tmp_path, table(noise=0.0, effects=effects))
    assert len(r["pairs"]) == 4 * 8  # each feature flips between 8 pairs of the 16 configurations
    by_axis = {(e["axis"], e["from"], e["to"]): e for e in r["axis_effects"]}
    assert by_axis[("qk_norm", "none", "layerwise")]["mean"] == pytest.approx(-6.0)
    assert by_axis[("n_kv_heads", "32", "8")]["mean"] == pytest.approx(-2.0)
    assert by_axis[("swa", "0", "1")]["mean"] == pytest.approx(-1.0)
    assert by_axis[("pretrain_ctx", "8192", "4096")]["n"] == 8
    assert {f["feature"]: f["mean"] for f in r["feature_effects"]} == pytest.approx(effects)
    assert all(p["seed_sd"] is None and not p["below_seed_sd"] for p in r["pairs"])
    assert any("no seed replicates" in n for n in r["notes"])


def test_swa_effect_with_vs_without_gqa_is_the_first_interaction(tmp_path, table):
    r = _analyze(tmp_path, table(noise=0.0, effects={"swa": -1.0}, swa_gqa=-8.0))
    it = r["interactions"][0]
    assert (it["effect_of"], it["given"], it["stressed"]) == ("swa", "gqa", True)
    assert it["without"] == pytest.approx(-1.0) and it["with"] == pytest.approx(-9.0)
    assert (it["n_with"], it["n_without"]) == (4, 4)
    assert it["difference"] == pytest.approx(-8.0)
    assert it["regression"]["coef"] == pytest.approx(-8.0)


def test_effect_smaller_than_seed_spread_is_flagged(tmp_path, table):
    # short context costs nothing, every other feature costs 8; seeds scatter by sd 2
    r = _analyze(
        tmp_path, table(seeds=3, noise=2.0, effects={"short_ctx": 0.0, "qk_norm": -8.0, "gqa": -8.0, "swa": -8.0}, rng_seed=1)
    )
    sd = r["spread"]["seed_sd"]
    assert r["spread"]["seed_df"] == 16 * 2 and r["spread"]["replicated_configs"] == 16
    assert sd == pytest.approx(2.0, rel=0.3)
    by_axis = {e["axis"]: e for e in r["axis_effects"]}
    assert by_axis["pretrain_ctx"]["below_seed_sd"] is True
    assert by_axis["pretrain_ctx"]["seed_sd"] == sd
    assert not any(by_axis[a]["below_seed_sd"] for a in ("qk_norm", "n_kv_heads", "swa"))
    assert all(p["n_from"] == p["n_to"] == 3 for p in r["pairs"])


def test_seed_sd_is_the_pooled_within_configuration_sd(tmp_path, table):
    df = table(seeds=2, noise=1.5, rng_seed=2)
    r = _analyze(tmp_path, df)
    key = ["swa", "qk_norm", "n_kv_heads", "pretrain_ctx"]
    var = df.groupby(key)["helmet"].var(ddof=1)
    assert r["spread"]["seed_sd"] == pytest.approx(float(np.sqrt(var.mean())), abs=1e-9)


def test_pairs_require_equal_confounds_and_qk_with_norm_is_one_lever(tmp_path, table):
    df = table(noise=0.0)
    df.loc[df.qk_norm == "layerwise", "norm"] = "post"  # Olmo-style: QK-norm comes with post-norm
    df.loc[df.run == "pre_32kv_8k", "init"] = "Z"  # this run has its own init: unmatched
    r = _analyze(tmp_path, df)
    assert {p["axis"] for p in r["pairs"]} == {"qk_norm+norm", "n_kv_heads", "swa", "pretrain_ctx"}
    assert not any("pre_32kv_8k" in p["runs_from"] + p["runs_to"] for p in r["pairs"])
    lever = [p for p in r["pairs"] if p["axis"] == "qk_norm+norm"]
    assert lever[0]["from"] == "none/pre" and lever[0]["to"] == "layerwise/post"
    assert lever[0]["effect"] == pytest.approx(-5.0)


def test_attention_columns_give_sink_vs_target_r2(tmp_path, table):
    df = table(noise=1.0)
    rng = np.random.default_rng(0)
    df["attn_sink_rate"] = 0.5 - 0.3 * (df.qk_norm != "none") + 0.02 * rng.standard_normal(len(df))
    df["attn_entropy"] = 2 + 0.5 * (df.qk_norm != "none") + 0.05 * rng.standard_normal(len(df))
    r = _analyze(tmp_path, df)
    a = r["attention"]
    assert a["sink_column"] == "attn_sink_rate" and a["entropy_column"] == "attn_entropy"
    assert a["sink_vs_target"]["r2"] == pytest.approx(r["predictors"]["attn_sink_rate"]["r2"])
    assert a["sink_by_qk_norm"]["none"] > a["sink_by_qk_norm"]["layerwise"]
    assert a["sink_entropy_corr"] < -0.9
