"""The transfer score: matched arms, the paper's matched pairs, standardised profiles and their cosine."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from archpool.analysis.carry import (
    CARRY_FEATURES,
    arm_flags,
    matched_arm_pairs,
    paper_noise_sd,
    paper_pairs,
    paper_profile,
    pooled_interval,
    replicate_pairs,
    transfer_scores,
)
from archpool.analysis.table import validate
from archpool.paper.table import HELMET_COLUMNS, paper_runs

ARMS = {  # name: (qk_norm, n_kv_heads, swa, pretrain_ctx, norm)
    "base": ("none", 4, 0, 128, "pre"),
    "qknorm": ("layerwise", 4, 0, 128, "pre"),
    "gqa": ("none", 1, 0, 128, "pre"),
    "swa": ("none", 4, 1, 128, "pre"),
    "short": ("none", 4, 0, 64, "pre"),
    "post": ("layerwise", 4, 0, 128, "post"),
}
EFFECT_OF = {"qknorm": "qk_norm", "gqa": "gqa", "swa": "swa", "short": "short_ctx"}
COLS = [f"m@{n}" for n in (128, 256, 512, 1024)]


def _pool(profile: np.ndarray, noise: float = 0.005, seeds: int = 3, rng_seed: int = 0, d_model: int = 64) -> pd.DataFrame:
    """Six arms whose effects at the four lengths are ``profile`` (features × lengths), plus seed noise."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for arch, (qk, kv, swa, ctx, norm) in ARMS.items():
        for s in range(seeds):
            level = np.full(4, 0.6)
            if arch in EFFECT_OF:
                level = level + profile[CARRY_FEATURES.index(EFFECT_OF[arch])]
            if arch == "post":
                level = level + profile[0] + profile[CARRY_FEATURES.index("post_norm")]
            value = level + rng.normal(0, noise, 4) + 0.01 * s  # a shared seed offset: pairing removes it
            rows.append(
                dict(
                    run=f"{arch}_d{d_model}_s{s}",
                    arch=f"{arch}_d{d_model}",
                    seed=s,
                    qk_norm=qk,
                    n_kv_heads=kv,
                    n_heads=4,
                    swa=swa,
                    pretrain_ctx=ctx,
                    norm=norm,
                    d_model=d_model,
                    short_ctx=64,
                    mastered=1,
                    **dict(zip(COLS, value)),
                )
            )
    return validate(pd.DataFrame(rows).astype(str))


def test_the_papers_pairs_differ_in_one_feature_and_share_init_where_they_can():
    runs = {r.name: r for r in paper_runs()}
    for feature in CARRY_FEATURES:
        pairs = paper_pairs(feature)
        assert pairs, feature
        for a, b in pairs:
            assert a.design["fp8"] == b.design["fp8"]
    assert all(a.design["init"] == b.design["init"] for a, b in paper_pairs("swa"))
    assert ("G_pre_LQK_8kv_8k_14k", "G_pre_8kv_8k_14k") in [(a.name, b.name) for a, b in paper_pairs("qk_norm")]
    assert len(paper_pairs("gqa")) == 16  # no GQA pair within an init group: every loose pair
    # the profile is the mean over pairs, by hand for one cell
    qk = paper_pairs("qk_norm")
    by_hand = np.mean([a.scores["helmet_64k"] - b.scores["helmet_64k"] for a, b in qk])
    assert paper_profile().effects[0, 3] == pytest.approx(by_hand)
    sd = np.std([r.scores["helmet_32k"] for r in runs.values()], ddof=1)
    assert paper_profile().sd[2] == pytest.approx(sd)


def test_the_papers_run_to_run_noise_is_its_replicate_pairs_rms_over_root_two():
    pairs = replicate_pairs()
    assert len(pairs) == 9
    for a, b in pairs:
        assert a.design["qk_norm"] == b.design["qk_norm"] and a.design["n_kv_heads"] == b.design["n_kv_heads"]
    d = np.array([a.scores["helmet_32k"] - b.scores["helmet_32k"] for a, b in pairs])
    assert paper_noise_sd()[2] == pytest.approx(np.sqrt((d**2).mean() / 2))
    assert len(paper_noise_sd()) == len(HELMET_COLUMNS)


def test_matched_arms_are_found_from_the_design_columns():
    flags = arm_flags(_pool(np.zeros((5, 4))), 64)
    pairs = {(p.feature, p.with_, p.without) for p in matched_arm_pairs(flags)}
    assert pairs == {
        ("qk_norm", "qknorm_d64", "base_d64"),
        ("gqa", "gqa_d64", "base_d64"),
        ("swa", "swa_d64", "base_d64"),
        ("short_ctx", "short_d64", "base_d64"),
        ("post_norm", "post_d64", "qknorm_d64"),
    }


def test_the_pooled_interval_is_the_additive_models_contrast():
    rng = np.random.default_rng(2)
    values = rng.normal(0, 1, (6, 4)) + np.arange(6)[:, None] * 0.3 + rng.normal(0, 1, 4)[None]
    got = pooled_interval(values, 1, 0)
    frame = pd.DataFrame([(f"a{a}", f"s{s}", values[a, s]) for a in range(6) for s in range(4)], columns=["arm", "seed", "y"])
    fit = smf.ols("y ~ C(arm) + C(seed)", frame).fit()
    assert got["effect"] == pytest.approx(fit.params["C(arm)[T.a1]"])
    assert got["se"] == pytest.approx(fit.bse["C(arm)[T.a1]"])
    assert got["df"] == fit.df_resid == 15
    lo, hi = fit.conf_int().loc["C(arm)[T.a1]"]
    assert got["ci95"] == pytest.approx([lo, hi])


def test_a_pool_proportional_to_the_paper_scores_near_one_and_a_reversed_one_near_minus_one():
    paper = paper_profile().standardised
    good = transfer_scores(_pool(0.02 * paper), COLS, 64, n_boot=300)
    # each length is standardised by its own spread on each side, so proportional raw effects come close to 1
    assert len(good) == 1 and good[0].score > 0.85 and good[0].ci95[0] > 0.5
    assert good[0].seeds == [0, 1, 2] and good[0].archs[0].startswith("base")
    bad = transfer_scores(_pool(-0.02 * paper), COLS, 64, n_boot=300)[0]
    assert bad.score < -0.85 and bad.ci95[1] < -0.5
    # the score does not depend on the pool's units
    scaled = transfer_scores(_pool(0.2 * paper, noise=0.05), COLS, 64, n_boot=100)[0]
    assert scaled.score == pytest.approx(good[0].score, abs=0.02)


def test_a_pool_of_noise_has_an_interval_over_zero_and_cells_carry_their_tests():
    r = transfer_scores(_pool(np.zeros((5, 4)), noise=0.02), COLS, 64, n_boot=400)[0]
    assert r.ci95[0] < 0 < r.ci95[1]
    assert len(r.cells) == 5 * 4
    cell = next(c for c in r.cells if c["feature"] == "short_ctx" and c["multiple"] == 8)
    assert cell["column"] == "m@1024" and cell["with"] == "short_d64" and cell["without"] == "base_d64"
    assert cell["ci95"][0] < cell["effect"] < cell["ci95"][1]


def test_groups_are_scored_apart_and_unmastered_runs_are_left_out():
    paper = paper_profile().standardised
    table = pd.concat([_pool(0.02 * paper, d_model=64), _pool(-0.02 * paper, d_model=128)], ignore_index=True)
    scores = {s.group: s.score for s in transfer_scores(table, COLS, 64, n_boot=100)}
    assert len(scores) == 2 and max(scores.values()) > 0.85 and min(scores.values()) < -0.85
    one = _pool(0.02 * paper)
    one.loc[one["run"] == "swa_d64_s2", "mastered"] = 0
    r = transfer_scores(one, COLS, 64, n_boot=100)[0]
    assert r.not_mastered == ["swa_d64_s2"] and r.seeds == [0, 1]


def test_features_resolved_in_the_papers_direction():
    paper = paper_profile()
    r = transfer_scores(_pool(0.05 * paper.standardised, noise=0.001), COLS, 64, n_boot=100)[0]
    expected = [f for i, f in enumerate(CARRY_FEATURES[:4]) if paper.effects[i, 3] != 0]
    assert sorted(r.resolved_in_paper_direction()) == sorted(expected)
    assert (
        transfer_scores(_pool(-0.05 * paper.standardised, noise=0.001), COLS, 64, n_boot=100)[0].resolved_in_paper_direction()
        == []
    )


EVIDENCE = {
    "design": "demo/acc@ext12",
    "widths": [64, 128, 256],
    "features": {
        "short_ctx": {"smallest_width": 64, "per_width": {"64": {"paper_sign_resolved": True, "opposite_resolved": False}}},
        "qk_norm": {"smallest_width": 256, "per_width": {}},
        "gqa": {"smallest_width": None, "per_width": {"128": {"opposite_resolved": True}, "64": {}}},
    },
}


def test_the_words_say_whether_an_answer_carries_from_the_ladder_and_the_pools_own_cell():
    from archpool.analysis.carry import carries, pool_cell, pool_width

    assert carries("short_ctx", None, EVIDENCE, 64).startswith(
        "carries on the demo/acc@ext12 ladder: the paper's sign, resolved from d_model 64"
    )
    assert carries("qk_norm", None, EVIDENCE, 128).startswith(
        "not at this width: the demo/acc@ext12 ladder resolves the paper's sign from d_model 256"
    )
    words = carries("gqa", None, EVIDENCE, 64)
    assert words.startswith("not known to carry") and "opposite sign is resolved at d_model 128" in words
    assert carries("swa", None, EVIDENCE, 64).startswith("unknown: no scale ladder")
    assert carries("swa", None, None, None).startswith("unknown")
    r = transfer_scores(_pool(0.05 * paper_profile().standardised, noise=0.001), COLS, 64, n_boot=50)[0]
    c = {"groups": [r.to_dict()]}
    assert pool_width(c) == 64
    cell = pool_cell(c, "short_ctx")
    assert cell is not None and cell["multiple"] == 8
    assert "(the paper's sign, resolved)" in carries("short_ctx", cell, EVIDENCE, 64)


def test_the_verdict_table_carries_the_words(tmp_path):
    from archpool.analysis.carry import ladder_evidence

    ladder_evidence.cache_clear()
    from archpool.report import write_report

    table = _pool(0.03 * paper_profile().standardised, noise=0.01).assign(seed=lambda d: d["seed"].astype(int))
    cols = {c: c.replace("m@", "mqar_acc@") + "#ext12" for c in COLS}
    table = table.rename(columns=cols)
    table.to_csv(tmp_path / "results.csv", index=False)
    write_report(tmp_path / "results.csv", tmp_path / "report", "mqar_acc@1024#ext12")
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "carries to 7B?" in summary and "this pool at 8×: z" in summary
