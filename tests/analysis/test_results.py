"""The typed results the analysis hands the report: each one's fields read off the analysis record and
``to_dict()`` giving that record back (analysis.json), on a small generated table."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, asdict

import pytest

from archpool.analysis.report_data import analysis_json, report_data
from archpool.analysis.results import PairEffect, Predictor, ReportData
from archpool.analysis.summary import analyze, to_json


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> ReportData:
    from tests.helpers.results import make_table

    csv = tmp_path_factory.mktemp("results") / "results.csv"
    make_table(seeds=2, noise=0.5, swa_gqa=-4.0, rng_seed=3).to_csv(csv, index=False)
    return report_data(csv, "helmet")


def test_predictors_are_typed_from_the_fits_in_order(data):
    r = data.analysis
    assert [p.name for p in data.predictors] == list(r["predictors"])
    count = next(p for p in data.predictors if p.name == "feature_count")
    fit = r["predictors"]["feature_count"]
    assert (count.kind, count.phase, count.n, count.r2, count.loo_r2) == ("count", "", fit["n"], fit["r2"], fit["loo_r2"])
    assert count.coef == pytest.approx(
        -6.0, abs=0.5
    )  # −5 per feature, −4 more for SWA with GQA and count.ci95 == tuple(fit["ci95"])
    assert count.coef == fit["coef"] and count.p == fit["p"] and count.known_before_extension
    base = next(p for p in data.predictors if p.name == "base_helmet_8k")
    assert (base.kind, base.phase, base.known_before_extension) == ("metric", "pre", True)
    for p in data.predictors:
        assert p.to_dict() == r["predictors"][p.name]
        assert list(p.to_dict()) == list(r["predictors"][p.name])  # the record's order: analysis.json is unchanged


def test_a_predictor_measured_after_extension_is_not_known_before_it():
    p = Predictor.from_dict("x", {"kind": "metric", "phase": "post", "n": 5, "r2": 0.5})
    assert not p.known_before_extension and p.ci95 == (None, None) and p.note == "" and p.n_groups is None
    assert p.to_dict() == {"kind": "metric", "phase": "post", "n": 5, "r2": 0.5}


def test_pair_effects_round_trip_with_their_labels(data):
    r = data.analysis
    assert [e.to_dict() for e in data.axis_effects] == r["axis_effects"]
    assert [e.to_dict() for e in data.feature_effects] == r["feature_effects"]
    assert {e.feature for e in data.feature_effects} == {"qk_norm", "gqa", "swa", "short_ctx"}
    swa = next(e for e in data.feature_effects if e.feature == "swa")
    assert swa.axis is None and swa.mean == pytest.approx(-7.0, abs=1.5)  # −5 alone, −9 with GQA: the pairs average
    by_axis = data.axis_effects[0]
    assert by_axis.feature is None and list(by_axis.to_dict())[:3] == ["axis", "from", "to"]
    e = PairEffect.from_dict({"axis": "swa", "from": "0", "to": "1", "n": 2, "mean": -1.0, "sd": 0.1, "min": -1.1, "max": -0.9, "seed_sd": 2.0, "below_seed_sd": True})  # fmt: skip
    assert (e.axis, e.from_, e.to, e.below_seed_sd) == ("swa", "0", "1", True)
    with pytest.raises(FrozenInstanceError):
        e.mean = 0.0  # type: ignore[misc]


def test_verdicts_and_transfer_cells_are_frozen_rows_of_their_tables(data):
    assert [v.feature for v in data.verdicts] == ["qk_norm", "gqa", "swa", "short_ctx"]
    rows = data.tables["verdict"].to_dict("records")
    for v, row in zip(data.verdicts, rows):
        assert v.to_dict() == asdict(v) and row["feature"] == v.feature and row["claim"] == v.claim
    assert data.transfer == ()  # no extension ladder in this table: no transfer cells, no transfer table
    assert "transfer" not in data.tables and data.rung_zero == ()


def test_to_dict_is_the_analysis_json_record(data):
    d = data.to_dict()
    plain = analyze(data.table, "helmet")
    assert list(d)[: len(plain)] == list(plain)
    assert list(d)[len(plain) :] == ["findings", "merged_columns", "verdict", "transfer"]
    assert json.loads(analysis_json(data)) == json.loads(
        to_json({**plain, "findings": data.findings, "merged_columns": data.aliases, "verdict": d["verdict"], "transfer": []})
    )
    assert data.target == "helmet" and data.min_effect == plain["inference"]["min_effect"]


def test_the_tables_are_data_the_report_lays_out(data):
    t = data.tables
    assert {"verdict", "findings", "runs", "predictors", "axis_effects", "feature_effects", "architectures"} <= set(t)
    assert list(t["predictors"]["predictor"]) == [p.name for p in data.predictors]
    known = t["predictors_before_extension"]
    assert set(known["predictor"]) == {p.name for p in data.predictors if p.known_before_extension}
    assert known["p_holm"].dropna().ge(known["p"].dropna()).all()  # Holm never lowers a p-value
    arch = t["architectures"]
    assert arch["runs"].eq(2).all() and len(arch) == 16
