"""Extension-only effects (difference in differences), mastery exclusion, remedy, and ladder columns,
against hand computations on a small hand-written table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps

from archpool.analysis import analyze, format_text, load_results
from archpool.analysis.extension import NOT_MASTERED, extension_effects, is_factorial, remedy
from archpool.analysis.summary import length_columns
from archpool.analysis.table import validate

TARGET = "mqar_acc@1024[d>128]#ladder_mean"
SEEDS = (0, 1, 2)
# arm: (pretrain_ctx, qk_norm, mastery accuracy at its own length per seed, target per seed)
ARMS = {
    "base": (256, "none", [0.95, 0.97, 0.93], [0.60, 0.70, 0.65]),
    "qk": (256, "layerwise", [0.92, 0.96, 0.91], [0.30, 0.45, 0.35]),
    "short": (128, "none", [0.99, 0.98, 0.97], [0.50, 0.55, 0.60]),
}
REMEDY = {"qk": [0.55, 0.60, 0.62]}


def _table() -> pd.DataFrame:
    rows = []
    for arm, (ctx, qk, pre, post) in ARMS.items():
        for s in SEEDS:
            r = dict(run=f"{arm}_s{s}", swa=0, qk_norm=qk, norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=ctx, seed=s)
            r["state"] = "done"
            r[f"base_mqar_acc@{ctx}"] = pre[s]
            r[f"base_mqar_acc@{ctx}[d<=64]"] = 0.99
            if ctx == 256:
                r["base_mqar_acc@256[d>64]"] = 0.95
            else:
                r["base_mqar_acc@256"] = 0.2  # the short arm beyond its own length: not its mastery
            r[TARGET] = post[s]
            r["mqar_acc@1024[d>128]#ext0"] = post[s] - 0.1
            r["mqar_acc@1024[d>128]#ext5"] = post[s] + 0.1
            r["mqar_acc@512#ladder_mean"] = post[s] + 0.2  # no [d>128] filter at 512: the all-distance column
            r["mqar_acc@512#ext5"] = post[s] + 0.25
            r["remedy_" + TARGET] = REMEDY[arm][s] if arm in REMEDY else np.nan
            rows.append(r)
    return pd.DataFrame(rows)


def _validated(df: pd.DataFrame) -> pd.DataFrame:
    """The table as :func:`load_results` reads it: every cell text, missing values empty."""
    return validate(df.astype(object).where(df.notna(), "").astype(str))


def _t_summary(x: list[float]) -> tuple[float, float, float, float]:
    x = np.asarray(x, float)
    m, sd = x.mean(), x.std(ddof=1)
    h = sps.t.ppf(0.975, len(x) - 1) * sd / math.sqrt(len(x))
    return m, m - h, m + h, sd


def _axis(e, feature):
    (a,) = [a for a in e["axes"] if a["feature"] == feature]
    return a


def _at(a, length, rung):
    (x,) = [x for x in a["effects"] if x["length"] == length and x["rung"] == rung]
    return x


@pytest.mark.parametrize("feature, arm", [("qk_norm", "qk"), ("short_ctx", "short")])
def test_difference_in_differences_matches_a_hand_computation(feature, arm):
    e = extension_effects(_table(), TARGET, short_ctx=128)
    a = _axis(e, feature)
    pre = [ARMS[arm][2][s] - ARMS["base"][2][s] for s in SEEDS]  # each at its own length
    post = [ARMS[arm][3][s] - ARMS["base"][3][s] for s in SEEDS]
    did = [p - q for p, q in zip(post, pre)]
    assert a["pre"]["mean"] == pytest.approx(np.mean(pre))
    x = _at(a, 1024, "ladder_mean")
    assert x["is_target"] and x["column"] == TARGET
    assert x["post"]["mean"] == pytest.approx(np.mean(post))
    m, lo, hi, sd = _t_summary(did)
    assert x["did"]["mean"] == pytest.approx(m)
    assert x["did"]["ci95"] == pytest.approx([lo, hi])
    assert x["did"]["sd"] == pytest.approx(sd)
    assert x["did"]["n"] == 3
    # every rung, and the all-distance column where the filtered one does not exist
    assert _at(a, 1024, "ext0")["did"]["mean"] == pytest.approx(m)  # −0.1 on both sides cancels
    assert _at(a, 512, "ladder_mean")["column"] == "mqar_acc@512#ladder_mean"
    assert _at(a, 512, "ext5")["column"] == "mqar_acc@512#ext5"
    assert e["rungs"] == ["ext0", "ext5", "ladder_mean"]
    assert e["not_mastered"] == []


def test_a_run_that_did_not_master_is_excluded_and_listed():
    df = _table()
    i = df.index[df.run == "qk_s2"][0]
    df.loc[i, "base_mqar_acc@256[d>64]"] = 0.5  # one bucket fails: not mastered
    e = extension_effects(df, TARGET, short_ctx=128)
    assert e["not_mastered"] == [
        {"run": "qk_s2", "arm": "qk_norm", "mastery_acc": 0.91, "mastery_min_bucket": 0.5, "reason": NOT_MASTERED}
    ]
    a = _axis(e, "qk_norm")
    assert a["dropped_seeds"] == [2]
    x = _at(a, 1024, "ladder_mean")
    did = [(ARMS["qk"][3][s] - ARMS["base"][3][s]) - (ARMS["qk"][2][s] - ARMS["base"][2][s]) for s in (0, 1)]
    assert x["did"]["n"] == 2 and x["post"]["n"] == 2
    assert x["did"]["mean"] == pytest.approx(np.mean(did))
    assert set(x["did"]["per_seed"]) == {0, 1}
    assert _at(_axis(e, "short_ctx"), 1024, "ladder_mean")["did"]["n"] == 3  # other arms keep every seed
    text = format_text(analyze(_validated(df), TARGET, short_ctx=128))
    assert "Did not master before extension" in text and "qk_s2" in text


def test_remedy_paired_difference_and_no_gap_against_an_untreated_baseline():
    (rec,) = remedy(_table(), TARGET, short_ctx=128)
    assert rec["recipe"] == "remedy" and rec["column"] == "remedy_" + TARGET
    (arm,) = rec["arms"]  # only the QK-norm arm has the remedy
    assert arm["arm"] == "qk_norm"
    paired = [REMEDY["qk"][s] - ARMS["qk"][3][s] for s in SEEDS]
    m, lo, hi, sd = _t_summary(paired)
    assert arm["paired"]["mean"] == pytest.approx(m) and arm["paired"]["ci95"] == pytest.approx([lo, hi])
    gap_primary = [ARMS["qk"][3][s] - ARMS["base"][3][s] for s in SEEDS]
    assert arm["gap_primary"]["mean"] == pytest.approx(np.mean(gap_primary))
    # the baseline was not treated: a treated arm is never compared with it
    assert arm["base_treated"] is False and arm["gap_recipe"]["n"] == 0 and arm["closed_fraction"] is None


def test_remedy_gap_is_between_two_treated_arms():
    treated_base = [0.80, 0.78, 0.83]
    df = _table()
    for s in SEEDS:
        df.loc[df.run == f"base_s{s}", "remedy_" + TARGET] = treated_base[s]
    (rec,) = remedy(df, TARGET, short_ctx=128)
    arms = {a["arm"]: a for a in rec["arms"]}
    assert set(arms) == {"baseline", "qk_norm"}
    qk = arms["qk_norm"]
    gap_primary = [ARMS["qk"][3][s] - ARMS["base"][3][s] for s in SEEDS]
    gap_treated = [REMEDY["qk"][s] - treated_base[s] for s in SEEDS]
    m, lo, hi, _ = _t_summary(gap_treated)
    assert qk["base_treated"] is True
    assert qk["gap_recipe"]["mean"] == pytest.approx(m) and qk["gap_recipe"]["ci95"] == pytest.approx([lo, hi])
    assert qk["closed_fraction"] == pytest.approx(1 - np.mean(gap_treated) / np.mean(gap_primary))
    assert arms["baseline"]["paired"]["mean"] == pytest.approx(np.mean([treated_base[s] - ARMS["base"][3][s] for s in SEEDS]))


def test_difference_in_differences_uses_the_same_column_before_extension_when_measured():
    """before = base_<column> (the pretrained model at the same length and distances): a textbook 2×2
    difference in differences on one metric, per seed, computed here by hand."""
    before = {"base": [0.10, 0.05, 0.12], "qk": [0.02, 0.08, 0.01], "short": [0.0, 0.03, 0.06]}
    df = _table()
    for arm, values in before.items():
        for s in SEEDS:
            df.loc[df.run == f"{arm}_s{s}", "base_mqar_acc@1024[d>128]"] = values[s]
    e = extension_effects(df, TARGET, short_ctx=128)
    x = _at(_axis(e, "qk_norm"), 1024, "ladder_mean")
    assert x["did_from"] == "base_mqar_acc@1024[d>128]"
    hand = [
        (ARMS["qk"][3][s] - ARMS["base"][3][s]) - (before["qk"][s] - before["base"][s])  # (after gap) − (before gap)
        for s in SEEDS
    ]
    m, _, _, sd = _t_summary(hand)
    assert x["did"]["mean"] == pytest.approx(m) and x["did"]["sd"] == pytest.approx(sd)
    # the interval pools the seed variance over the three arms: the arm contrast of ``y ~ arm + seed`` (statsmodels)
    per_arm = {a: [ARMS[a][3][s] - before[a][s] for s in SEEDS] for a in before}
    frame = pd.DataFrame([(a, s, per_arm[a][s]) for a in per_arm for s in SEEDS], columns=["arm", "seed", "y"])
    fit = smf.ols("y ~ C(arm, Treatment('base')) + C(seed)", frame).fit()
    term = "C(arm, Treatment('base'))[T.qk]"
    assert x["did"]["ci95"] == pytest.approx(list(fit.conf_int().loc[term])) and x["did"]["df"] == fit.df_resid == 4
    assert x["did"]["seed_pooled"] is True
    assert x["before"]["mean"] == pytest.approx(np.mean([before["qk"][s] - before["base"][s] for s in SEEDS]))
    # the rung columns share the before column (one pretrained model), each with its own after
    y = _at(_axis(e, "qk_norm"), 1024, "ext5")
    assert y["did_from"] == x["did_from"] and y["did"]["mean"] == pytest.approx(m)
    # a length without a before column falls back to the own-length value of the metric
    assert _at(_axis(e, "qk_norm"), 512, "ladder_mean")["did_from"] == "base_mqar_acc@<pretrain_ctx>"


def test_analyze_reports_the_new_sections_and_flags_a_non_factorial_design():
    df = _validated(_table())
    assert not is_factorial(df, 128)
    r = analyze(df, TARGET, short_ctx=128)
    assert r["factorial"] is False
    assert r["predictors"]["four_axes"]["note"] == "not factorial: pairwise effects only"
    assert {a["feature"] for a in r["extension_effects"]["axes"]} == {"qk_norm", "short_ctx"}
    assert r["remedy"][0]["recipe"] == "remedy"
    arms = {a["arm"]: a for a in r["mastery"]["arms"]}
    assert arms["qk_norm"]["mean"] == pytest.approx(np.mean(ARMS["qk"][2]))
    assert arms["baseline"]["n_mastered"] == 3
    text = format_text(r)
    for section in ("Extension-only effects", "Treatment:", "Mastery before extension", "not factorial"):
        assert section in text
    assert "four_axes: coefficients" not in text


def test_ladder_columns_survive_loading_and_are_not_lengths(tmp_path):
    path = tmp_path / "results.csv"
    _table().to_csv(path, index=False)
    df = load_results(path)
    assert df["mqar_acc@512#ext5"].dtype == float and df[TARGET].notna().all()
    by = length_columns(df)
    assert not any("#" in k for k in by)
    assert by["mqar_acc"]["post"] == {512: "mqar_acc@512#ext5"}  # the final rung stands for "post"
    assert by["mqar_acc"]["pre"] == {128: "base_mqar_acc@128", 256: "base_mqar_acc@256"}
    r = analyze(df, TARGET, short_ctx=128)
    assert r["extension_effects"]["axes"]


def test_tables_without_mastery_columns_skip_the_new_sections(table):
    r = analyze(_validated(table(seeds=2)), "helmet")
    assert r["mastery"] is None and r["extension_effects"] is None and r["remedy"] == []
    assert r["factorial"] is True and "note" not in r["predictors"]["four_axes"]
    assert "Extension-only effects" not in format_text(r)


def test_html_report_has_the_extension_sections(tmp_path):
    from archpool.report.html import write_report

    df = _table()
    df.loc[df.run == "qk_s2", "base_mqar_acc@256[d>64]"] = 0.5
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    page = write_report(path, tmp_path / "report", TARGET, short_ctx=128).read_text()
    for title in ("Verdict", "Runs that did not master their own length", "Treatment", "Per architecture"):
        assert f">{title}</h2>" in page
    assert 'id="not-mastered-warning"' in page and "qk_s2" in page
    assert "changes one axis at a time" in page  # not factorial: the design note explains the statistics
    assert "<summary>Extension-only effects at every length and rung (" in page
    verdict = pd.read_csv(tmp_path / "report" / "tables" / "verdict.csv")
    qk = verdict.set_index("feature").loc["qk_norm"]
    assert qk.n == 2 and qk.after < 0 and not qk.before_present  # qk_s2 left out: it did not master
    assert (tmp_path / "report" / "tables" / "extension_effects.csv").is_file()


def test_arms_are_named_by_the_pools_architecture_when_two_baselines_exist():
    """A second baseline at another head count (the head_dim check) keeps its own name in every table."""
    df = _table()
    wide = df[df["run"].str.startswith(("base_", "qk_"))].copy()
    wide["run"] = wide["run"].str.replace("_s", "_hd32_s", regex=False)
    wide["n_heads"] = 2
    wide["n_kv_heads"] = 2
    both = pd.concat([df, wide], ignore_index=True)
    both["arch"] = both["run"].str.rsplit("_s", n=1).str[0]
    r = extension_effects(_validated(both), TARGET, 128)
    qk = [a for a in r["axes"] if a["axis"] == "qk_norm"]
    assert sorted(a["arm"] for a in qk) == ["qk", "qk_hd32"]
    assert {a["arm"] for a in remedy(_validated(both), TARGET, 128)[0]["arms"]} == {"qk", "qk_hd32"}


def test_a_shorter_treatment_is_compared_at_its_own_last_rung():
    """A recipe trained for fewer steps than the target's rung (temp_… at #ext5 only) is compared with the
    primary recipe at that same rung, never with the primary's longer extension."""
    df = _table().drop(columns=["remedy_" + TARGET])
    treated = {"base": [0.9, 0.8, 0.85], "qk": [0.7, 0.75, 0.6]}
    for arm, values in treated.items():
        for s in SEEDS:
            df.loc[df.run == f"{arm}_s{s}", "temp_mqar_acc@1024[d>128]#ext5"] = values[s]
            df.loc[df.run == f"{arm}_s{s}", "temp_mqar_acc@1024[d>128]#ext0"] = 0.0
    (rec,) = remedy(df, TARGET, short_ctx=128)
    assert (rec["recipe"], rec["column"], rec["column_untreated"]) == (
        "temp",
        "temp_mqar_acc@1024[d>128]#ext5",
        "mqar_acc@1024[d>128]#ext5",
    )
    qk = next(a for a in rec["arms"] if a["arm"] == "qk_norm")
    untreated = [ARMS["qk"][3][s] + 0.1 - (ARMS["base"][3][s] + 0.1) for s in SEEDS]  # #ext5 = target + 0.1
    assert qk["gap_primary"]["mean"] == pytest.approx(np.mean(untreated))
    assert qk["gap_recipe"]["mean"] == pytest.approx(np.mean([treated["qk"][s] - treated["base"][s] for s in SEEDS]))
