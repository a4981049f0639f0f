"""The analysis's tables as data frames (each also written as a CSV by the report): runs, predictors,
coefficients, matched-pair effects, pairs, confounds, mastery, extension-only effects, remedies, the
findings' numbers and the per-architecture summary. Columns keep the analysis's names; the report gives
them human headers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from archpool.analysis import archs, inference
from archpool.analysis.results import Predictor


def _ci(ci: list[float | None] | None) -> list[float | None]:
    return ci if ci else [None, None]


def _alias(name: str, aliases: Mapping[str, list[str]]) -> str:
    """A metric name with the identical columns merged into it: ``a (= b = c)``."""
    return f"{name} (= {' = '.join(aliases[name])})" if aliases.get(name) else name


def tables(
    r: Mapping[str, Any], predictors: Sequence[Predictor], aliases: Mapping[str, list[str]] | None = None
) -> dict[str, pd.DataFrame]:
    """Every table of the analysis ``r`` (its ``predictors`` typed), as DataFrames (also written as CSV)."""
    aliases = aliases or {}
    t: dict[str, pd.DataFrame] = {}
    t["runs"] = pd.DataFrame(r["runs"]).rename(columns={"target": r["target"]})
    t["predictors"] = pd.DataFrame(
        [
            {
                "predictor": _alias(p.name, aliases),
                "kind": p.kind,
                "phase": p.phase,
                "n": p.n,
                "n_groups": p.n_groups,
                "r2": p.r2,
                "loo_r2": p.loo_r2,
                "coef": p.coef,
                "ci95_lo": p.ci95[0],
                "ci95_hi": p.ci95[1],
                "p": p.p,
                "note": p.note,
            }
            for p in predictors
        ]
    )
    coef_rows = []
    for model in ("feature_count", "four_axes", "four_axes_kv_ratio"):
        p = r["predictors"][model]
        if model != "feature_count" and not r.get("factorial", True):
            continue  # not a factorial design: the four-axis fit is a predictor (R²), not effects
        if model == "feature_count" and p.get("coef") is not None:
            coef_rows.append(
                dict(
                    model=model,
                    term="const",
                    coef=p["intercept"],
                    se=None,
                    ci95_lo=p["intercept_ci95"][0],
                    ci95_hi=p["intercept_ci95"][1],
                    p=None,
                )
            )
            coef_rows.append(
                dict(
                    model=model,
                    term="feature_count",
                    coef=p["coef"],
                    se=p["se"],
                    ci95_lo=p["ci95"][0],
                    ci95_hi=p["ci95"][1],
                    p=p["p"],
                )
            )
        for term, v in (p.get("coefs") or {}).items():
            coef_rows.append(
                dict(model=model, term=term, coef=v["coef"], se=v["se"], ci95_lo=v["ci95"][0], ci95_hi=v["ci95"][1], p=v["p"])
            )
    for term, v in (r["interaction_model"].get("coefs") or {}).items():
        coef_rows.append(
            dict(model="swa_x_gqa", term=term, coef=v["coef"], se=v["se"], ci95_lo=v["ci95"][0], ci95_hi=v["ci95"][1], p=v["p"])
        )
    pre = r.get("pre_extension") or []
    t["pre_extension"] = pd.DataFrame(
        [
            {
                "pre-extension predictor": _alias(p["predictor"], aliases),
                "n": p["n"],
                "n_groups": p.get("n_groups"),
                "r2": p["r2"],
                "loo_r2": p["loo_r2"],
                "coef": p["coef"],
                "ci95_lo": _ci(p["ci95"])[0],
                "ci95_hi": _ci(p["ci95"])[1],
                "p": p.get("p"),
                "p_holm": adj,
            }
            for p, adj in zip(pre, inference.holm([p.get("p") for p in pre]))
        ]
    )
    known = t["predictors"][(t["predictors"]["kind"] != "metric") | (t["predictors"]["phase"] == "pre")].copy()
    known["p_holm"] = inference.holm([None if pd.isna(x) else float(x) for x in known["p"]])
    t["predictors_before_extension"] = known.reset_index(drop=True)
    t["coefficients"] = pd.DataFrame(coef_rows)
    t["axis_effects"] = pd.DataFrame(r["axis_effects"])
    t["feature_effects"] = pd.DataFrame(r["feature_effects"])
    t["interactions"] = pd.DataFrame([{k: v for k, v in i.items() if k != "regression"} for i in r["interactions"]])
    t["pairs"] = pd.DataFrame(
        [
            {
                **{k: v for k, v in p.items() if k not in ("context", "runs_from", "runs_to")},
                "runs_from": " ".join(p["runs_from"]),
                "runs_to": " ".join(p["runs_to"]),
            }
            for p in r["pairs"]
        ]
    )
    if r["confounds"]:
        c = r["confounds"]
        t["confounds"] = pd.DataFrame(
            [
                {
                    "model": f"{k} covariates",
                    "coef": c[k]["coef"],
                    "ci95_lo": c[k]["ci95"][0],
                    "ci95_hi": c[k]["ci95"][1],
                    "p": c[k]["p"],
                    "r2": c[k]["r2"],
                    "loo_r2": c[k]["loo_r2"],
                }
                for k in ("without", "with")
            ]
        )
    t.update(extension_tables(r))
    if r["failed"] or r["excluded"]:
        failed = {f["run"]: f for f in r["failed"]}
        rows = [
            {"run": f["run"], "reason": f"failed{' in ' + f['stage'] if f.get('stage') else ''}: {f['error']}"}
            for f in r["failed"]
        ]
        rows += [e for e in r["excluded"] if e["run"] not in failed]
        t["excluded"] = pd.DataFrame(rows)
    return {k: v for k, v in t.items() if len(v)}


def _summary_cols(prefix: str, s: Mapping[str, Any] | None) -> dict[str, Any]:
    s = s or {}
    ci = _ci(s.get("ci95"))
    return {
        f"{prefix}": s.get("mean"),
        f"{prefix}_ci95_lo": ci[0],
        f"{prefix}_ci95_hi": ci[1],
        f"{prefix}_sd": s.get("sd"),
        f"{prefix}_n": s.get("n"),
    }


def extension_tables(r: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """Mastery per arm, extension-only effects, runs that did not master, remedies (absent without their columns)."""
    t: dict[str, pd.DataFrame] = {}
    m = r.get("mastery")
    if m:
        t["mastery"] = pd.DataFrame(
            [
                {
                    "arm": a["arm"],
                    "n": a["n"],
                    "mastery_acc": a["mean"],
                    "ci95_lo": _ci(a["ci95"])[0],
                    "ci95_hi": _ci(a["ci95"])[1],
                    "mastered": f"{a['n_mastered']}/{a['n_judged']}",
                    "mastered_wilson_lo": a["mastered_ci95"][0],
                    "mastered_wilson_hi": a["mastered_ci95"][1],
                }
                for a in m["arms"]
            ]
        )
    e = r.get("extension_effects")
    if e:
        rows = []
        for a in e["axes"]:
            for x in a["effects"]:
                rows.append(
                    {
                        "axis": f"{a['axis']} {a['from']} → {a['to']}" + (f" ({a['arm']})" if a.get("arm") else ""),
                        "length": x["length"],
                        "rung": x["rung"],
                        "column": x["column"] + (" (target)" if x["is_target"] else ""),
                        **_summary_cols("pre", a["pre"]),
                        **_summary_cols("post", x["post"]),
                        **_summary_cols("did", x["did"]),
                        "dropped_seeds": " ".join(map(str, a["dropped_seeds"])),
                    }
                )
        t["extension_effects"] = pd.DataFrame(rows)
        if e["not_mastered"]:
            t["not_mastered"] = pd.DataFrame(e["not_mastered"])
    rows = []
    for rec in r.get("remedy") or []:
        for a in rec["arms"]:
            rows.append(
                {
                    "recipe": rec["recipe"],
                    "arm": a["arm"],
                    **_summary_cols("remedy_minus_primary", a["paired"]),
                    **(_summary_cols("gap_primary", a["gap_primary"]) if "gap_primary" in a else {}),
                    **(_summary_cols("gap_remedy", a["gap_recipe"]) if "gap_recipe" in a else {}),
                    "closed_fraction": a.get("closed_fraction"),
                }
            )
    if rows:
        t["remedy"] = pd.DataFrame(rows)
    return t


def findings_table(f: Mapping[str, Any]) -> pd.DataFrame:
    """One row per (target, axis): the numbers behind the findings' sentences."""
    rows = []
    for t in f["targets"]:
        for a in t["axes"]:
            rows.append(
                {
                    "metric": t["metric"],
                    "axis": a["name"],
                    "effect": a["effect"],
                    "ci95_lo": a["ci95"][0],
                    "ci95_hi": a["ci95"][1],
                    "ci_from": a["ci_from"],
                    "seeds": a["n_seeds"],
                    "seed_sd": t["seed_sd"],
                    "above_seed_noise": a["above_noise"],
                    "vs_paper": a["paper_direction"] or "",
                    "lower_is_better": t["lower_is_better"],
                }
            )
    return pd.DataFrame(rows)


def arch_table(df: pd.DataFrame, r: Mapping[str, Any]) -> pd.DataFrame:
    """Per architecture: runs, mastery, the target (mean and 95% CI over seeds), the difference to the
    baseline (``vs baseline``: its effect record, paired by seed) and pretraining loss."""
    used = df[df["run"].isin({q["run"] for q in r["runs"]})]
    target = r["target"]
    rows = []
    arch = archs.arch_of(used)
    for a in archs.arch_order(used):
        d = used[arch == a]
        m = archs.mean_ci(d[target]) if target in d else None
        row: dict[str, Any] = {"arch": a, "runs": len(d)}
        if "mastered" in d and d["mastered"].notna().any():
            row["mastered"] = f"{int((d['mastered'] == 1).sum())}/{int(d['mastered'].notna().sum())}"
        if "mastery_acc" in d:
            acc = archs.mean_ci(d["mastery_acc"]) if d["mastery_acc"].notna().any() else None
            row["mastery_acc"] = acc.mean if acc is not None else None
        if m is not None:
            row.update({"target": m.mean, "target_ci95_lo": m.lo, "target_ci95_hi": m.hi})
        vs = next((x["effect"] for x in r.get("versus_baseline") or [] if set(x["runs"]) == set(d["run"])), None)
        if vs is not None:
            row["vs baseline"] = vs
        if "pretrain_loss" in d and d["pretrain_loss"].notna().any():
            row["pretrain_loss"] = float(d["pretrain_loss"].mean())
        rows.append(row)
    return pd.DataFrame(rows)
