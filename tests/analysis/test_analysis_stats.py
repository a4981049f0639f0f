"""R², LOO R², coefficients and CIs of ``analyze`` equal independent scipy / statsmodels / scikit-learn fits."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import LeaveOneGroupOut, LeaveOneOut, cross_val_predict

from archpool.analysis import analyze, load_results, to_json

TOL = 1e-6


def _load(tmp_path, df: pd.DataFrame):
    path = tmp_path / "results.csv"
    df.to_csv(path, index=False)
    return load_results(path)


def _indicators(df: pd.DataFrame, short: int = 4096) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "qk": (df.qk_norm != "none").astype(int),
            "gqa": (df.n_kv_heads < df.n_heads).astype(int),
            "swa": df.swa.astype(int),
            "short": (df.pretrain_ctx <= short).astype(int),
        }
    )


def _loo_r2(X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> float:
    """scikit-learn's leave-one-out R², or leave-one-group-out with ``groups`` (a refit per fold)."""
    cv = LeaveOneOut() if groups is None else LeaveOneGroupOut()
    pred = cross_val_predict(LinearRegression(), X, y, cv=cv, groups=groups)
    return 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()


def _archs(df: pd.DataFrame) -> np.ndarray:
    """The architecture of each run: its name without the seed suffix."""
    return df.run.str.replace(r"_s\d+$", "", regex=True).to_numpy()


@pytest.fixture
def noisy(table):
    # a jittered design (unequal noise) so nothing is degenerate: target = 50 − 5·count + N(0, 2²)
    return table(seeds=2, noise=2.0, rng_seed=3)


def test_feature_count_fit_matches_scipy_and_sklearn(tmp_path, noisy):
    r = analyze(_load(tmp_path, noisy), "helmet")
    count = _indicators(noisy).sum(axis=1).to_numpy(float)
    y = noisy.helmet.to_numpy(float)
    lr = sps.linregress(count, y)
    t = sps.t.ppf(0.975, len(y) - 2)
    p = r["predictors"]["feature_count"]
    assert r["n"] == len(y) == 32
    assert p["r2"] == pytest.approx(lr.rvalue**2, abs=TOL)
    assert p["coef"] == pytest.approx(lr.slope, abs=TOL)
    assert p["intercept"] == pytest.approx(lr.intercept, abs=TOL)
    assert p["ci95"] == pytest.approx([lr.slope - t * lr.stderr, lr.slope + t * lr.stderr], abs=TOL)
    assert p["p"] == pytest.approx(lr.pvalue, abs=TOL)
    # held out by architecture (both seeds of a configuration together), not by run
    assert p["loo_r2"] == pytest.approx(_loo_r2(count[:, None], y, _archs(noisy)), abs=TOL)
    assert p["loo_r2"] != pytest.approx(_loo_r2(count[:, None], y), abs=1e-3)
    assert p["n_groups"] == 16
    assert p["coef"] == pytest.approx(-5, abs=1.0)  # the structure we built in


def test_four_axes_fit_matches_statsmodels_formula(tmp_path, noisy):
    r = analyze(_load(tmp_path, noisy), "helmet")
    d = _indicators(noisy).assign(y=noisy.helmet)
    ref = smf.ols("y ~ qk + gqa + swa + short", data=d).fit()
    ci = ref.conf_int(0.05)
    p = r["predictors"]["four_axes"]
    assert p["r2"] == pytest.approx(ref.rsquared, abs=TOL)
    assert p["intercept"] == pytest.approx(ref.params["Intercept"], abs=TOL)
    for ours, theirs in (("qk_norm", "qk"), ("gqa", "gqa"), ("swa", "swa"), ("short_ctx", "short")):
        c = p["coefs"][ours]
        assert c["coef"] == pytest.approx(ref.params[theirs], abs=TOL)
        assert c["se"] == pytest.approx(ref.bse[theirs], abs=TOL)
        assert c["ci95"] == pytest.approx(list(ci.loc[theirs]), abs=TOL)
        assert c["p"] == pytest.approx(ref.pvalues[theirs], abs=TOL)
    X = d[["qk", "gqa", "swa", "short"]].to_numpy(float)
    assert p["loo_r2"] == pytest.approx(_loo_r2(X, d.y.to_numpy(float), _archs(noisy)), abs=TOL)


def test_kv_ratio_variant_and_swa_gqa_interaction_match_statsmodels(tmp_path, table):
    df = table(seeds=2, noise=1.0, swa_gqa=-4.0, rng_seed=5)
    r = analyze(_load(tmp_path, df), "helmet")
    d = _indicators(df).assign(kv=df.n_kv_heads / df.n_heads, y=df.helmet)
    ref = smf.ols("y ~ qk + kv + swa + short", data=d).fit()
    assert r["predictors"]["four_axes_kv_ratio"]["coefs"]["kv_ratio"]["coef"] == pytest.approx(ref.params["kv"], abs=TOL)
    inter = smf.ols("y ~ qk + gqa + swa + short + swa:gqa", data=d).fit()
    term = r["interaction_model"]["coefs"]["swa_x_gqa"]
    assert term["coef"] == pytest.approx(inter.params["swa:gqa"], abs=TOL)
    assert term["ci95"] == pytest.approx(list(inter.conf_int().loc["swa:gqa"]), abs=TOL)
    assert term["ci95"][0] < -4 < term["ci95"][1]


def test_every_metric_column_is_a_single_predictor_sorted_by_r2(tmp_path, noisy):
    r = analyze(_load(tmp_path, noisy), "helmet")
    preds = r["predictors"]
    assert {"pretrain_loss", "base_helmet_8k"} <= set(preds)
    assert "helmet" not in preds and "seed" not in preds
    r2 = [p["r2"] for p in preds.values()]
    assert r2 == sorted(r2, reverse=True)
    # the pretraining loss is measured before extension whatever its name says
    assert preds["base_helmet_8k"]["phase"] == "pre" and preds["pretrain_loss"]["phase"] == "pre"
    pre = r["pre_extension"]
    assert {p["predictor"] for p in pre} == {k for k, p in preds.items() if p.get("phase") == "pre"}
    loo = [p["loo_r2"] for p in pre]
    assert loo == sorted(loo, reverse=True)
    x, y = noisy.pretrain_loss.to_numpy(float), noisy.helmet.to_numpy(float)
    lr = sps.linregress(x, y)
    assert preds["pretrain_loss"]["r2"] == pytest.approx(lr.rvalue**2, abs=TOL)
    assert preds["pretrain_loss"]["loo_r2"] == pytest.approx(_loo_r2(x[:, None], y, _archs(noisy)), abs=TOL)


def test_metric_predictor_uses_only_runs_that_have_it(tmp_path, noisy):
    noisy = noisy.copy()
    noisy.loc[:4, "pretrain_loss"] = np.nan
    p = analyze(_load(tmp_path, noisy), "helmet")["predictors"]["pretrain_loss"]
    lr = sps.linregress(noisy.pretrain_loss[5:], noisy.helmet[5:])
    assert p["n"] == len(noisy) - 5
    assert p["r2"] == pytest.approx(lr.rvalue**2, abs=TOL)


def test_short_context_default_and_override(tmp_path, table):
    df = table(noise=0.5)
    df["pretrain_ctx"] = df["pretrain_ctx"].map({4096: 256, 8192: 512})  # a scaled pool
    d = _load(tmp_path, df)
    assert analyze(d, "helmet")["short_ctx"] == 256
    counts = [x["feature_count"] for x in analyze(d, "helmet", short_ctx=100)["runs"]]
    assert max(counts) == 3  # nothing counts as short
    one = df[df.pretrain_ctx == 512]
    assert analyze(_load(tmp_path, one), "helmet")["short_ctx"] == 4096


def test_leverage_one_run_falls_back_to_refitting(tmp_path, table):
    df = table(noise=1.0).iloc[:9].copy()  # design where one run alone carries a coefficient
    r = analyze(_load(tmp_path, df), "helmet")
    X = _indicators(df)
    X = X.loc[:, X.nunique() > 1].to_numpy(float)
    assert r["predictors"]["four_axes"]["loo_r2"] == pytest.approx(_loo_r2(X, df.helmet.to_numpy(float)), abs=TOL)


def test_confounds_report_count_with_and_without_covariates(tmp_path, noisy):
    rng = np.random.default_rng(0)
    noisy = noisy.assign(init=rng.choice(["A", "B", "C"], len(noisy)), fp8=rng.integers(0, 2, len(noisy)))
    r = analyze(_load(tmp_path, noisy), "helmet", covariates=["init", "fp8"])
    c = r["confounds"]
    d = _indicators(noisy).assign(count=lambda x: x.sum(axis=1), y=noisy.helmet, init=noisy.init, fp8=noisy.fp8)
    ref = smf.ols("y ~ count + C(init) + fp8", data=d).fit()
    assert c["with"]["coef"] == pytest.approx(ref.params["count"], abs=TOL)
    assert c["with"]["ci95"] == pytest.approx(list(ref.conf_int().loc["count"]), abs=TOL)
    assert c["without"]["coef"] == pytest.approx(r["predictors"]["feature_count"]["coef"], abs=TOL)
    assert c["survives"] is True
    assert set(c["covariates"]) == {"init_B", "init_C", "fp8"}


def test_json_output_is_strict_and_has_the_documented_keys(tmp_path, noisy):
    r = json.loads(to_json(analyze(_load(tmp_path, noisy), "helmet")))
    assert {"n", "target", "predictors", "pairs", "interactions"} <= set(r)
    fc = r["predictors"]["feature_count"]
    assert {"r2", "loo_r2", "coef", "intercept", "ci95"} <= set(fc)
    assert {"r2", "loo_r2"} <= set(r["predictors"]["four_axes"])
