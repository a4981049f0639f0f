"""The page's sections after the verdict: per architecture, transfer to the paper, the untrained rung,
compounding, calibration, treatment, the statistics (details collapsed) and the runs left out, each as
``{"id", "title", "paragraphs", "figures", "tables"}`` for the template.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from archpool.analysis.results import ReportData
from archpool.report import scale, transfer
from archpool.report.context import ReportContext
from archpool.report.tables import present, remedy_table, transfer_table

CAPTIONS = {
    "verdict_effects": "Effect of each feature before extension (each arm's own length) and after it (the target), "
    "95% CI over seeds; grey band: ± one seed sd.",
    "accuracy_by_length": "Accuracy vs evaluation length per architecture (mean over seeds, 95% CI); solid: after "
    "extension, dashed: before; dotted vertical line: the pretraining context; dotted horizontal: chance.",
    "accuracy_by_distance": "Accuracy per key–query distance bucket after extension, per architecture (mean over seeds, "
    "95% CI); dotted: chance.",
    "extension_curves": "Accuracy after each extension budget of the ladder (0: the RoPE change alone), per "
    "architecture; dotted: chance.",
    "loss_curves": "Training loss per architecture, mean over seeds.",
    "attention": "Attention sink strength and entropy after extension, per architecture (mean, 95% CI over seeds).",
    "scores_by_run": "The target per run, sorted, coloured by feature count.",
    "target_vs_count": "Target vs feature count with the OLS fit (the paper's predictor); right: leave-one-out predictions.",
    "effects": "Matched-pair effects per axis (dots: pairs; bars: their mean) and interactions (effect of A with B "
    "on, red, vs off, blue); grey band: ± seed standard deviation; ★ marks the paper's stressed interaction, SWA "
    "with vs without GQA.",
    "predictor_r2": "In-sample and leave-one-architecture-out R² of the strongest predictors measured before extension "
    "or fixed by the design (the target's own metric after extension is left out).",
    "calibration": "The scored task's difficulty knob against the baseline at the target (mean over seeds, dots: "
    "seeds); shaded: the headroom window; open circles: a run did not master that variant at its own length; "
    "star: the point the rule picks; ring: the point the pool scores.",
}


def design_note(data: ReportData) -> str:
    if data.analysis.get("factorial", True):
        return (
            "The pool is a full factorial design: the four-axis regression and the matched pairs estimate the same "
            "effects; where they differ, the interactions below are the reason."
        )
    return (
        "The pool changes one axis at a time (not every combination), so a regression on the four axes together "
        "mixes effects with the combinations that happen to be present; the effects above come from matched "
        "pairs (runs that differ in exactly one axis, paired by seed), and the four-axis fit is shown only as a "
        "predictor (R²), without coefficients."
    )


def transfer_sections(data: ReportData) -> list[dict[str, Any]]:
    """The rank agreement with the paper (for a pool that carries its scores) and the transfer table."""
    out: list[dict[str, Any]] = []
    r = data.analysis
    if r.get("agreement"):
        out.append(
            {
                "id": "agreement",
                "title": "Transfer as one number: the paper's ranking",
                "paragraphs": scale.agreement_words(r["agreement"]),
                "figures": [],
                "tables": [present(scale.agreement_table(r["agreement"]))],
            }
        )
    if r.get("carry"):
        out.append(
            {
                "id": "carry",
                "title": "Does this answer carry? The transfer score of the single-feature arms",
                "paragraphs": scale.carry_words(r["carry"]),
                "figures": [],
                "tables": [present(scale.carry_table(r["carry"]))],
            }
        )
    cells = list(data.transfer)
    if cells:
        out.append(
            {
                "id": "transfer",
                "title": "Transfer to the paper",
                "paragraphs": [
                    "Each axis's effect after extension at 1×, 2×, 4× and 8× the pretraining context (the target's rung), "
                    "relative to the baseline's mean, beside the paper's 7B HELMET effect relative to its Llama 3 "
                    "replica. A cell reproduces or contradicts the paper's sign only when its test, Holm-corrected over "
                    "every cell of the table, rejects no effect and the effect is at least the smallest effect of interest "
                    f"(±{data.min_effect:g}). Otherwise it is at the ceiling when the baseline and the arm both "
                    "score within that of 1 (no difference can show); 'no effect larger than' it when the equivalence "
                    "test rejects one; smaller than the paper's when the equivalence test against the paper's relative "
                    "size rejects; and unresolved when none holds (the MDE says how large an effect could hide).",
                    *transfer.statements(cells),
                ],
                "figures": [],
                "tables": [present(transfer_table(cells))],
            }
        )
    return out


def scale_sections(tabs: dict[str, pd.DataFrame], figures: dict[str, str], context: ReportContext) -> list[dict[str, Any]]:
    """The untrained rung, compounding and the calibration of the scored task, where the pool has them."""
    out: list[dict[str, Any]] = []
    if "rung_zero" in tabs:
        out.append(
            {
                "id": "rung-zero",
                "title": "After the RoPE change alone (zero-shot extensibility)",
                "paragraphs": [
                    "The same target at the ladder's rung 0: the pretrained model with the extension's RoPE, before any "
                    "extension training. A finding of its own (how well an architecture extends zero-shot), tested as a "
                    "family over the axes and never mixed into the primary target."
                ],
                "figures": [],
                "tables": [present(tabs["rung_zero"])],
            }
        )
    if "compounding" in tabs:
        out.append(
            {
                "id": "compounding",
                "title": "Compounding: a pair of features against the sum of its parts",
                "paragraphs": [
                    "Per seed, the pair's effect minus the two single effects (pair − A − B + baseline), on the same "
                    "answers; Holm-corrected over the pairs, with the equivalence test against the smallest effect of "
                    f"interest. The paper: {scale.PAPER_COMPOUND}."
                ],
                "figures": [],
                "tables": [present(tabs["compounding"])],
            }
        )
    cal = context.calibration
    if cal:
        name = "calibration"
        out.append(
            {
                "id": "calibration",
                "title": "Calibration of the scored task",
                "paragraphs": scale.calibration_words(cal),
                "figures": [{"name": name, "b64": figures[name], "caption": CAPTIONS[name]}] if name in figures else [],
                "tables": [],
            }
        )
    return out


def sections(
    data: ReportData, tabs: dict[str, pd.DataFrame], figures: dict[str, str], context: ReportContext
) -> list[dict[str, Any]]:
    """Every section after the verdict and the main figures, in the page's order."""
    r, found = data.analysis, data.findings

    def fig(name: str) -> list[dict[str, str]]:
        return [{"name": name, "b64": figures[name], "caption": CAPTIONS[name]}] if name in figures else []

    out: list[dict[str, Any]] = []
    if "architectures" in tabs:
        out.append(
            {
                "id": "architectures",
                "title": "Per architecture",
                "paragraphs": [
                    "Mean over seeds with a 95% t-interval; mastery before extension at each architecture's own length; "
                    "the difference to the baseline, paired by seed, with its 95% interval from the same estimator as the "
                    "verdict's (seeds where either run did not master its own length left out)."
                ],
                "figures": [],
                "tables": [present(tabs["architectures"])],
            }
        )
    out += transfer_sections(data)
    out += scale_sections(tabs, figures, context)
    if r.get("remedy"):
        out.append(
            {
                "id": "remedy",
                "title": "Treatment",
                "paragraphs": [
                    "Each arm extended again with a second recipe (a treatment such as a lower softmax temperature): "
                    "its change, paired by seed, and its gap to the baseline with both untreated and with both treated "
                    "(mean [95% CI]), on "
                    + "; ".join(f"{rec['column']} against {rec.get('column_untreated', r['target'])}" for rec in r["remedy"])
                    + ". A treated arm is only compared with a treated baseline."
                ],
                "figures": [],
                "tables": [present(remedy_table(r["remedy"]))],
            }
        )
    if "not_mastered" in tabs:
        out.append(
            {
                "id": "not-mastered",
                "title": "Runs that did not master their own length",
                "paragraphs": [
                    "Their long-context numbers measure pretraining, not extension, so the effects above leave them out."
                ],
                "figures": [],
                "tables": [present(tabs["not_mastered"])],
            }
        )
    stats_tables = []
    if "pre_extension" in tabs:
        stats_tables.append(present(tabs["pre_extension"].head(10), "Best predictors measured before extension"))
    if "predictors_before_extension" in tabs:
        title = "Every predictor known before extension (p Holm-corrected over this table)"
        stats_tables.append(present(tabs["predictors_before_extension"], title, collapsed=True))
    if "coefficients" in tabs:
        stats_tables.append(present(tabs["coefficients"], "Regression coefficients", collapsed=True))
    if "interactions" in tabs:
        it = tabs["interactions"]
        it = it[(it.get("n_with", 1) > 0) & (it.get("n_without", 1) > 0)] if {"n_with", "n_without"} <= set(it.columns) else it
        if len(it):
            stats_tables.append(present(it, "Interactions (effect of A with and without B)", collapsed=True))
    for name, title in (
        ("axis_effects", "Matched-pair effects by axis"),
        ("pairs", "Every matched pair"),
        ("confounds", "Declared confounds"),
        ("findings", "Every metric the pool names, by axis"),
        ("mastery", "Mastery per architecture"),
        ("extension_effects", "Extension-only effects at every length and rung"),
    ):
        if name in tabs:
            flag = "below_seed_sd" if "below_seed_sd" in tabs[name] else None
            stats_tables.append(present(tabs[name], title, collapsed=True, flag=flag))
    paragraphs = [found["count_fit"]["sentence"]]
    if found.get("before_extension"):
        paragraphs.append(found["before_extension"])
    paragraphs.append(design_note(data))
    out.append(
        {
            "id": "statistics",
            "title": "What predicts the target, and how the statistics fit together",
            "paragraphs": paragraphs,
            "figures": fig("effects") + fig("target_vs_count") + fig("predictor_r2") + fig("scores_by_run"),
            "tables": stats_tables,
        }
    )
    if "excluded" in tabs:
        out.append(
            {
                "id": "excluded",
                "title": "Failed and excluded runs",
                "paragraphs": [],
                "figures": [],
                "tables": [present(tabs["excluded"])],
            }
        )
    return out
