"""Readable text of the analysis: the tables ``archpool analyze`` prints and the report embeds, from
an :func:`archpool.analysis.summary.analyze` (or ``design_summary``) result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from archpool.analysis.extension import NOT_FACTORIAL
from archpool.analysis.results import target_label
from archpool.axes import FEATURE_NAMES, FEATURES
from archpool.columns import RUNG_SEP, split_rung


def _n(v: Any, fmt: str = "{:+.3f}") -> str:
    return "—" if v is None else fmt.format(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(r: Sequence[Any]) -> str:
        return "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(r, widths)))

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]


def _ci(ci: Sequence[float | None] | None) -> str:
    return "—" if not ci or ci[0] is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _eff(s: dict[str, Any] | None) -> list[str]:
    """mean, 95% CI, p, seed sd, n of an effect."""
    s = s or {}
    return [_n(s.get("mean")), _ci(s.get("ci95")), _n(s.get("p"), "{:.2g}"), _n(s.get("sd"), "{:.3f}"), str(s.get("n", 0))]


def format_design(r: dict[str, Any]) -> str:
    """The feature counts of a :func:`~archpool.analysis.summary.design_summary` result."""
    rows = [[x["run"], *(str(x[k]) for k in (*FEATURES, "feature_count")), f"{x['kv_ratio']:.3g}"] for x in r["runs"]]
    return "\n".join(
        [
            f"{r['n']} runs (short context ≤ {r['short_ctx']})",
            *_table(["run", *FEATURES, "count", "kv_ratio"], rows),
            *(f"note: {n}" for n in r["notes"]),
        ]
    )


def format_text(r: dict[str, Any]) -> str:
    """Readable tables of an :func:`~archpool.analysis.summary.analyze` result."""
    out = [f"target {r['target']!r}: {r['n']} runs (short context ≤ {r['short_ctx']})"]
    basis = r.get("inference")
    if basis:
        out.append(f"inference: {basis['words']}; smallest effect of interest ±{basis['min_effect']:g}")
        out.append(f"cross-validation: {basis['cross_validation']}")
    if r["excluded"]:
        out.append("excluded: " + "; ".join(f"{e['run']} ({e['reason']})" for e in r["excluded"]))
    out += _runs(r)
    out += _predictors(r)
    out += _pre_extension(r)
    out += _axis_coefficients(r)
    out += _spread(r)
    out += _axis_effects(r)
    out += _interactions(r)
    out += _confounds(r)
    out += _attention(r)
    out += format_extension(r)
    out += format_agreement(r.get("agreement"))
    out += format_carry(r.get("carry"))
    if r["failed"]:
        out += ["", "Failed runs: " + "; ".join(f"{f['run']}: {f['error']}" for f in r["failed"])]
    out += [f"note: {n}" for n in r["notes"]]
    return "\n".join(out)


def _runs(r: dict[str, Any]) -> list[str]:
    out = ["", "Runs by target (feature count; count model's fit and held-out prediction, its architecture left out)"]
    out += _table(
        ["run", "count", r["target"], "fit", "held out"],
        [
            [
                x["run"],
                str(x["feature_count"]),
                _n(x["target"], "{:.3f}"),
                _n(x["fit_count"], "{:.3f}"),
                _n(x["loo_count"], "{:.3f}"),
            ]
            for x in sorted(r["runs"], key=lambda x: -x["target"])
        ],
    )
    return out


def _predictors(r: dict[str, Any]) -> list[str]:
    out = ["", "Predictors of the target (sorted by R²)"]
    rows = []
    for name, p in r["predictors"].items():
        coef = p.get("coef") if p["kind"] != "axes" else None
        rows.append(
            [
                name,
                p["kind"] + (f"/{p['phase']}" if p.get("phase") else ""),
                str(p["n"]),
                _n(p.get("r2"), "{:.3f}"),
                _n(p.get("loo_r2"), "{:.3f}"),
                _n(coef),
                _ci(p.get("ci95")),
                _n(p.get("p"), "{:.2g}"),
            ]
        )
    out += _table(["predictor", "kind", "n", "R²", "held-out R²", "coef", "95% CI", "p"], rows)
    return out


def _pre_extension(r: dict[str, Any]) -> list[str]:
    if not r.get("pre_extension"):
        return []
    out = [
        "",
        "Before extension: how well each pre-extension measurement predicts the post-extension target "
        "(best held-out R² first; held out by architecture)",
    ]
    out += _table(
        ["pre-extension predictor", "n", "R²", "held-out R²", "coef", "95% CI"],
        [
            [x["predictor"], str(x["n"]), _n(x["r2"], "{:.3f}"), _n(x["loo_r2"], "{:.3f}"), _n(x["coef"]), _ci(x["ci95"])]
            for x in r["pre_extension"]
        ],
    )
    return out


def _axis_coefficients(r: dict[str, Any]) -> list[str]:
    """The four-axis models' coefficients (not shown when the design is not factorial)."""
    out: list[str] = []
    for name in ("four_axes", "four_axes_kv_ratio"):
        p = r["predictors"][name]
        if p.get("coefs") and not r.get("factorial", True):
            out += ["", f"{name}: {NOT_FACTORIAL} (coefficients not shown)"]
        elif p.get("coefs"):
            out += ["", f"{name}: coefficients (intercept {_n(p['intercept'])})"]
            out += _table(
                ["term", "coef", "se", "95% CI", "p"],
                [[t, _n(v["coef"]), _n(v["se"], "{:.3f}"), _ci(v["ci95"]), _n(v["p"], "{:.2g}")] for t, v in p["coefs"].items()],
            )
    return out


def _spread(r: dict[str, Any]) -> list[str]:
    s = r["spread"]
    return [
        "",
        f"Seed sd: {_n(s['seed_sd'], '{:.3f}')} (df {s['seed_df']}, {s['replicated_configs']} replicated configs)"
        + (f"; init sd: {_n(s.get('init_sd'), '{:.3f}')} (df {s.get('init_df')})" if "init_sd" in s else ""),
    ]


def _axis_effects(r: dict[str, Any]) -> list[str]:
    if not r["axis_effects"]:
        return []
    out = ["", "Matched-pair effects by axis (flag * = |effect| < seed sd)"]
    out += _table(
        ["axis", "from → to", "n", "mean", "sd", "min", "max", "flag"],
        [
            [
                e["axis"],
                f"{e['from']} → {e['to']}",
                str(e["n"]),
                _n(e["mean"]),
                _n(e["sd"], "{:.3f}"),
                _n(e["min"]),
                _n(e["max"]),
                "*" if e["below_seed_sd"] else "",
            ]
            for e in r["axis_effects"]
        ],
    )
    return out


def _interactions(r: dict[str, Any]) -> list[str]:
    """Matched-pair interactions, and the regression's swa×gqa term."""
    out: list[str] = []
    if r["interactions"]:
        out += ["", "Interactions: effect of A with vs without B (from matched pairs)"]
        out += _table(
            ["A", "B", "with B", "n", "without B", "n", "difference", "flag"],
            [
                [
                    i["effect_of"] + (" (paper)" if i["stressed"] else ""),
                    i["given"],
                    _n(i["with"]),
                    str(i["n_with"]),
                    _n(i["without"]),
                    str(i["n_without"]),
                    _n(i["difference"]),
                    "*" if i["below_seed_sd"] else "",
                ]
                for i in r["interactions"]
            ],
        )
    reg = (r["interaction_model"].get("coefs") or {}).get("swa_x_gqa")
    if reg:
        out.append(f"regression swa×gqa term: {_n(reg['coef'])} {_ci(reg['ci95'])} p={_n(reg['p'], '{:.2g}')}")
    return out


def _confounds(r: dict[str, Any]) -> list[str]:
    c = r["confounds"]
    if not c:
        return []
    out = ["", f"Confounds ({', '.join(c['covariates'])}): does the count effect survive?"]
    out += _table(
        ["model", "coef", "95% CI", "p", "R²"],
        [
            [k, _n(c[k]["coef"]), _ci(c[k]["ci95"]), _n(c[k]["p"], "{:.2g}"), _n(c[k]["r2"], "{:.3f}")]
            for k in ("without", "with")
        ],
    )
    out.append(
        f"survives: {'yes' if c['survives'] else 'no'}; R² of count on the residualised target: {_n(c['residualised_r2'], '{:.3f}')}"
    )
    return out


def _attention(r: dict[str, Any]) -> list[str]:
    a = r["attention"]
    if not a:
        return []
    out = [""]
    if a.get("sink_vs_target"):
        out.append(f"attention sink ({a['sink_column']}) vs target: R² {_n(a['sink_vs_target'].get('r2'), '{:.3f}')}")
    if a.get("entropy_vs_target"):
        out.append(f"attention entropy ({a['entropy_column']}) vs target: R² {_n(a['entropy_vs_target'].get('r2'), '{:.3f}')}")
    return out


def format_extension(r: dict[str, Any]) -> list[str]:
    """The "Extension-only effects", "Did not master before extension" and "Treatment" sections (empty when
    the table has no mastery or recipe columns)."""
    return [*_mastery(r.get("mastery")), *_extension_effects(r.get("extension_effects")), *_remedy(r)]


def _mastery(m: dict[str, Any] | None) -> list[str]:
    if not m:
        return []
    out = ["", f"Mastery before extension ({m['metric']} ≥ {m['threshold']} at each arm's own pretraining length)"]
    out += _table(
        ["arm", "n", "mastery_acc", "95% CI", "mastered", "95% CI (Wilson)"],
        [
            [
                a["arm"],
                str(a["n"]),
                _n(a["mean"], "{:.3f}"),
                _ci(a["ci95"]),
                f"{a['n_mastered']}/{a['n_judged']}",
                _ci(a["mastered_ci95"]),
            ]
            for a in m["arms"]
        ],
    )
    return out


def _extension_effects(e: dict[str, Any] | None) -> list[str]:
    if not e:
        return []
    out = [
        "",
        f"Extension-only effects on {e['target']} (per axis, paired by seed; own length = {e.get('own_length_from')} "
        "before extension; DiD = (post gap) − (gap on the same column before extension, else at own length) per seed)",
    ]
    rows = []
    rung = split_rung(e["target"])[1]  # the text shows the target's rung (or ladder mean); the csv has all
    for a in e["axes"]:
        name = f"{a['axis']} {a['from']} → {a['to']}" + (f" ({a['arm']})" if a.get("arm") else "")
        pre = _eff(a["pre"])
        rows.append([name, "own length, before", pre[0], pre[1], pre[2], "", "", "", pre[4]])
        for x in a["effects"]:
            if x["rung"] != rung:
                continue
            where = f"@{x['length']}" + (f"{RUNG_SEP}{x['rung']}" if x["rung"] else "") + (" *" if x["is_target"] else "")
            post, did = _eff(x["post"]), _eff(x["did"])
            rows.append([name, where, post[0], post[1], post[2], did[0], did[1], did[2], post[4]])
        if a["dropped_seeds"]:
            rows.append([name, "dropped seeds", ", ".join(map(str, a["dropped_seeds"])), "", "", "", "", "", ""])
    out += _table(["axis", "at", "effect", "95% CI", "p", "extension-only (DiD)", "95% CI", "p", "n"], rows)
    out.append("(* the target column; every rung of the ladder: tables/extension_effects.csv in the report)")
    if e["not_mastered"]:
        out += ["", "Did not master before extension: their long-context numbers measure pretraining, not extension"]
        out += _table(
            ["run", "arm", "mastery_acc", "min bucket"],
            [
                [x["run"], x["arm"], _n(x["mastery_acc"], "{:.3f}"), _n(x["mastery_min_bucket"], "{:.3f}")]
                for x in e["not_mastered"]
            ],
        )
    return out


def _remedy(r: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for rec in r.get("remedy") or []:
        untreated = rec.get("column_untreated", r["target"])
        out += ["", f"Treatment: recipe {rec['recipe']!r} ({rec['column']} − {untreated}, paired by run)"]
        rows = []
        for a in rec["arms"]:
            rows.append([a["arm"], "treated − untreated", *_eff(a["paired"])])
            if "gap_primary" in a:
                rows.append([a["arm"], "gap to baseline, both untreated", *_eff(a["gap_primary"])])
                if a.get("base_treated", True):
                    rows.append([a["arm"], "gap to baseline, both treated", *_eff(a["gap_recipe"])])
                share = a.get("closed_fraction")
                rows.append([a["arm"], "share of the gap closed", _n(share, "{:.2f}"), a.get("closed_note") or "", "", "", ""])
        out += _table(["arm", "difference", "mean", "95% CI", "p", "seed sd", "n"], rows)
    return out


def _with_ci(v: float | None, ci: Sequence[float | None] | None) -> str:
    """A rank statistic with its interval, two decimals."""
    if v is None:
        return "—"
    return f"{v:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci and ci[0] is not None else "")


def format_agreement(a: dict[str, Any] | None) -> list[str]:
    """Rank agreement of the pool, the feature count and the short-context predictor with each paper column."""
    if not a:
        return []
    out = [
        "",
        f"Rank agreement with the paper's 7B scores (per architecture; 95% bootstrap intervals over architectures and seeds; "
        f"short-context predictor: {a.get('short_context') or 'none'})",
    ]
    rows = []
    for col, entry in a["columns"].items():
        for who in ("pool", "feature_count", "short_context"):
            x = entry.get(who)
            if x:
                rows.append(
                    [
                        col,
                        target_label(a) if who == "pool" else who,
                        str(x["n_archs"]),
                        _with_ci(x["rho"], x["rho_ci95"]),
                        _with_ci(x["tau"], x["tau_ci95"]),
                        _with_ci(x["pairwise"], x["pairwise_ci95"]),
                    ]
                )
    out += _table(["paper column", "ranked by", "archs", "Spearman ρ", "Kendall τ", "pairwise accuracy"], rows)
    beyond = []
    for col, entry in a["columns"].items():
        b, c = entry.get("beyond_count") or {}, entry.get("ceiling") or {}
        if b:
            p = b.get("within_p")
            beyond.append(
                [
                    col,
                    _with_ci(b["partial_rho"], b["partial_rho_ci95"]),
                    _with_ci(b["within_pairwise"], b["within_pairwise_ci95"]) + f" of {b['within_pairs']}",
                    "—" if p is None else f"{p:.3f}",
                    _with_ci(c.get("ceiling"), c.get("ceiling_ci95")) if c else "—",
                ]
            )
    if beyond:
        out += [
            "",
            f"Beyond the feature count ({target_label(a)}): Spearman ρ given the count; pairs of equal count ordered as the "
            "paper (pool means shuffled within each count: one-sided permutation p); the paper's noise ceiling "
            "(√(1 − σ²/var), σ from its replicate runs)",
        ]
        out += _table(["paper column", "ρ given count", "within-count pairs", "permutation p", "noise ceiling"], beyond)
    if a.get("not_mastered"):
        out.append("left out (did not master their own length): " + ", ".join(a["not_mastered"]))
    return out


def format_carry(c: dict[str, Any] | None) -> list[str]:
    """The transfer score of each group of single-feature arms, and its cells (docs/results/transfer/rule.md)."""
    if not c:
        return []
    lengths = "/".join(str(n) for n in c["lengths"])
    out = [
        "",
        f"Transfer score: the single-feature arms' effects on {c['measure']} at {lengths} tokens against the paper's "
        "matched pairs at HELMET 8K/16K/32K/64K, each standardised by the spread between its architectures at that "
        "length; the score is the cosine of the two profiles (95% interval: the pool's seeds resampled, the paper's "
        "scores perturbed by its run-to-run noise)",
    ]
    for g in c["groups"]:
        group = ", ".join(str(x) for x in g["group"]) or "all runs"
        score = "—" if g["score"] is None else _with_ci(g["score"], g["ci95"])
        out.append(f"group [{group}]: {len(g['archs'])} architectures, seeds {g['seeds']}: transfer score {score}")
        rows = []
        for feature in dict.fromkeys(x["feature"] for x in g["cells"]):
            cells = [x for x in g["cells"] if x["feature"] == feature]
            rows.append(
                [FEATURE_NAMES.get(feature, feature)]
                + [_z(x["z"]) + " / " + _z(x["paper_z"]) for x in cells]
                + [_effect_ci(cells[-1])]
            )
        heads = [f"×{x['multiple']} (pool / paper)" for x in g["cells"][:4]]
        out += _table(["feature", *heads, f"effect at {c['lengths'][-1]} (95% CI, seeds pooled)"], rows)
        resolved = g.get("resolved_8x") or []
        out.append(
            f"resolved in the paper's direction at ×8: {len(resolved)} of 4"
            + (f" ({', '.join(FEATURE_NAMES[f] for f in resolved)})" if resolved else "")
        )
        if g.get("not_mastered"):
            out.append("left out (did not master their own length): " + ", ".join(g["not_mastered"]))
    return out


def _z(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}"


def _effect_ci(cell: dict[str, Any]) -> str:
    lo, hi = cell["ci95"]
    if cell["effect"] is None:
        return "—"
    return f"{cell['effect']:+.3f}" + ("" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]")
