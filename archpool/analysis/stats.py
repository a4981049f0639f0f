"""Regressions of a target on predictors: OLS fits (statsmodels) with 95% CIs, and cross-validated R².

Cross-validated R² is ``1 − Σ(y − ŷ_cv)² / Σ(y − ȳ)²`` where ``ŷ_cv`` are the held-out predictions of the
same linear model and ``ȳ`` is the full-sample mean; it can be negative when the model predicts worse than
the mean. A pool's runs are held out by architecture (every seed of an arm together: a seed of the same
architecture left in the fit would predict its sibling), which is the paper's leave-one-out when each
architecture is one run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import statsmodels.api as sm
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import LeaveOneGroupOut, cross_val_predict
from statsmodels.tools.sm_exceptions import SingularMatrixWarning

ALPHA = 0.05


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def loo_predictions(X: pd.DataFrame, y: pd.Series, groups: Sequence[Any] | None = None) -> np.ndarray:
    """Each run's prediction from the linear model fitted without it, or, with ``groups`` (an
    architecture per run), without every run of its group (leave-one-architecture-out: every seed of
    an arm held out together, as the paper's leave-one-out holds out one architecture).

    Exact for OLS from the hat matrix: the held-out residuals of a group ``g`` are
    ``(I − H_gg)⁻¹ e_g`` (statsmodels' PRESS residuals when every group is one run); where a group alone
    fixes a coefficient (``I − H_gg`` singular) each fold is refitted with scikit-learn instead."""
    yv = y.to_numpy(float)
    labels = np.arange(len(yv)) if groups is None else pd.factorize(pd.Series(list(groups), dtype=object))[0]
    infl = ols(X, y).get_influence()
    if len(np.unique(labels)) == len(yv) and np.max(infl.hat_matrix_diag) < 1 - 1e-9:
        press: np.ndarray = yv - np.asarray(infl.resid_press)
        return press
    A = sm.add_constant(X.astype(float), has_constant="add").to_numpy(float)
    H = A @ np.linalg.pinv(A)
    e = yv - H @ yv
    pred = np.empty(len(yv))
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        block = np.eye(len(idx)) - H[np.ix_(idx, idx)]
        if np.linalg.svd(block, compute_uv=False).min() < 1e-9:  # the group alone fixes a coefficient
            refitted: np.ndarray = cross_val_predict(
                LinearRegression(), X.to_numpy(float), yv, cv=LeaveOneGroupOut(), groups=labels
            )
            return refitted
        pred[idx] = yv[idx] - np.linalg.solve(block, e[idx])
    return pred


def loo_r2(X: pd.DataFrame, y: pd.Series, groups: Sequence[Any] | None = None) -> float | None:
    """Leave-one-out R² of a linear regression of ``y`` on ``X`` (with intercept); with ``groups``,
    leave-one-group-out (see :func:`loo_predictions`). None with fewer than 3 runs or groups."""
    n_units = len(set(groups)) if groups is not None else len(y)
    if len(y) < 3 or n_units < 3:
        return None
    pred = loo_predictions(X, y, groups)
    sst = float(((y - y.mean()) ** 2).sum())
    return _num(1.0 - float(((y.to_numpy(float) - pred) ** 2).sum()) / sst) if sst > 0 else None


def r2_without_each(x: pd.Series, y: pd.Series, groups: Sequence[Any]) -> dict[str, float | None]:
    """In-sample R² of ``y ~ x`` with each group's runs left out (does one architecture carry the fit?)."""
    labels = pd.Series(list(groups), index=y.index, dtype=object)
    out: dict[str, float | None] = {}
    for g in dict.fromkeys(labels):
        keep = labels != g
        xv, yv = x[keep].to_numpy(float), y[keep].to_numpy(float)
        ok = len(yv) >= 3 and np.ptp(xv) > 0 and np.ptp(yv) > 0
        with np.errstate(invalid="ignore", divide="ignore"):  # a column too narrow for float precision: no R²
            out[str(g)] = _num(np.corrcoef(xv, yv)[0, 1] ** 2) if ok else None
    return out


def ols(X: pd.DataFrame, y: pd.Series) -> Any:  # statsmodels' fitted RegressionResults
    """statsmodels OLS of ``y`` on ``X`` plus an intercept (``const``); rank deficiency is reported by :func:`fit`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingularMatrixWarning)
        return sm.OLS(y.to_numpy(float), sm.add_constant(X.astype(float), has_constant="add")).fit()


def terms(res: Any, names: list[str]) -> dict[str, dict[str, float | list[float | None] | None]]:
    """Coefficient, standard error, 95% CI and p-value of each term (``const`` included)."""
    ci = np.asarray(res.conf_int(ALPHA))
    coef, se, p = (np.asarray(a) for a in (res.params, res.bse, res.pvalues))
    return {
        n: {"coef": _num(coef[i]), "se": _num(se[i]), "ci95": [_num(ci[i, 0]), _num(ci[i, 1])], "p": _num(p[i])}
        for i, n in enumerate(["const", *names])
    }


def fit(X: pd.DataFrame, y: pd.Series, groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """In-sample and cross-validated R² plus coefficient table of one linear model; drops constant
    predictors. ``loo_r2`` holds out one group (architecture) at a time when ``groups`` are given, else
    one run; ``n_groups`` says how many held-out units the fit rests on."""
    keep = [c for c in X.columns if X[c].nunique() > 1]
    dropped = [c for c in X.columns if c not in keep]
    n_groups = len(set(groups)) if groups is not None else len(y)
    out: dict[str, Any] = {"n": len(y), "n_groups": n_groups, "predictors": keep, "dropped_constant": dropped}
    if not keep or len(y) < len(keep) + 2:
        return {**out, "r2": None, "loo_r2": None, "note": "not identifiable (constant predictors or too few runs)"}
    X = X[keep]
    res = ols(X, y)
    rank = int(np.linalg.matrix_rank(sm.add_constant(X.astype(float), has_constant="add").to_numpy()))
    out.update(
        r2=_num(res.rsquared),
        adj_r2=_num(res.rsquared_adj),
        loo_r2=loo_r2(X, y, groups),
        df_resid=_num(res.df_resid),
        terms=terms(res, keep),
    )
    if rank < len(keep) + 1:
        out["note"] = f"collinear predictors (rank {rank} < {len(keep) + 1}): coefficients are not unique"
    return out


def fit_single(x: pd.Series, y: pd.Series, name: str, groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """Simple regression ``y ~ x`` on the rows where both are present; coef/intercept/ci95/p flattened;
    with ``groups`` (an architecture per row) cross-validated by group, with each group's R² without it
    (``r2_without``)."""
    ok = x.notna() & y.notna()
    g = None if groups is None else [v for v, k in zip(groups, ok) if k]
    r = fit(pd.DataFrame({name: x[ok]}), y[ok], g)
    if g is not None and r.get("r2") is not None and len(set(g)) >= 3:
        r["r2_without"] = r2_without_each(x[ok], y[ok], g)
    t = r.pop("terms", None)
    if t and name in t:
        r.update(
            coef=t[name]["coef"],
            se=t[name]["se"],
            ci95=t[name]["ci95"],
            p=t[name]["p"],
            intercept=t["const"]["coef"],
            intercept_ci95=t["const"]["ci95"],
        )
    return r


def fit_multi(X: pd.DataFrame, y: pd.Series, groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """Multiple regression; ``coefs`` maps each term to its coef/se/ci95/p, ``intercept`` is the constant."""
    r = fit(X, y, groups)
    t = r.pop("terms", None)
    if t:
        r["intercept"] = t.pop("const")["coef"]
        r["coefs"] = t
    return r


def design_with_covariates(df: pd.DataFrame, covariates: list[str]) -> pd.DataFrame:
    """Covariate columns as regressors: numeric as they are, text as 0/1 dummies (first level dropped)."""
    parts = []
    for c in covariates:
        col = df[c]
        if pd.api.types.is_numeric_dtype(col):
            parts.append(col.astype(float).rename(c))
        else:
            parts.append(pd.get_dummies(col.astype(str), prefix=c, drop_first=True, dtype=float))
    return pd.concat(parts, axis=1) if parts else pd.DataFrame(index=df.index)


def confound_check(count: pd.Series, y: pd.Series, covars: pd.DataFrame) -> dict[str, Any]:
    """Does the feature-count coefficient survive the covariates? Coef and CI with and without them.

    Also the R² of count → target after residualising the target on the covariates alone.
    """
    without = fit_multi(pd.DataFrame({"feature_count": count}), y)
    X = pd.concat([count.rename("feature_count"), covars], axis=1)
    with_ = fit_multi(X, y)
    resid_fit = ols(covars, y) if covars.shape[1] and covars.nunique().gt(1).any() else None
    resid = pd.Series(resid_fit.resid, index=y.index) if resid_fit is not None else y - y.mean()
    r_resid = fit_single(count, resid, "feature_count")

    def pick(r: dict[str, Any]) -> dict[str, Any]:
        t = (r.get("coefs") or {}).get("feature_count")
        return (
            {"coef": t["coef"], "ci95": t["ci95"], "p": t["p"], "r2": r["r2"], "loo_r2": r["loo_r2"], "note": r.get("note")}
            if t
            else {
                "coef": None,
                "ci95": [None, None],
                "p": None,
                "r2": r.get("r2"),
                "loo_r2": r.get("loo_r2"),
                "note": r.get("note"),
            }
        )

    a, b = pick(without), pick(with_)

    def excludes_zero(ci: list[float | None]) -> bool:
        return ci[0] is not None and ci[1] is not None and (ci[0] > 0 or ci[1] < 0)

    return {
        "covariates": list(covars.columns),
        "without": a,
        "with": b,
        "covariate_terms": {k: v for k, v in (with_.get("coefs") or {}).items() if k != "feature_count"},
        "residualised_r2": r_resid.get("r2"),
        "residualised_loo_r2": r_resid.get("loo_r2"),
        "survives": bool(excludes_zero(a["ci95"]) and excludes_zero(b["ci95"])),
    }
