"""Harness runs keep their finished cells as they finish: lm-eval's RULER and HELMET's data, run by a pool's
eval node (archpool.pool.stages.eval), write each cell into the node's ``cells/`` cache when it is scored, so a
node stopped midway resumes without scoring a finished cell again, reporting each cell as it goes."""

from __future__ import annotations

import types

import pytest

from tests.eval.test_cache_whole_model import HELMET_LENGTH, LENGTH, _llama


class Stop(Exception):
    """Stands for the kill."""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tests.helpers.tokenizers import pseudo_bpe, pseudo_texts

    return _llama(tmp_path_factory.mktemp("cells") / "model", pseudo_bpe(pseudo_texts()))


def _ctx(out_dir, logs: list[str]):
    """What the eval stage's helpers read of a stage context: its directory, its log and its pool's directory."""
    return types.SimpleNamespace(out_dir=out_dir, log=logs.append, pool=types.SimpleNamespace(base_dir=out_dir))


def _stop_after(monkeypatch, obj, name: str, n: int) -> list[int]:
    calls: list[int] = []
    real = getattr(obj, name)

    def wrapped(*a, **k):
        if len(calls) >= n:
            raise Stop
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(obj, name, wrapped)
    return calls


def test_a_stopped_lm_eval_node_resumes_at_its_first_unfinished_cell(model, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from archpool.eval import harness as H
    from archpool.pool.stages.eval import CELLS, harness_ruler

    settings = H.RulerSettings(tasks=["niah_single_1", "niah_multikey_2"], lengths=[LENGTH], limit=1)
    logs: list[str] = []
    with monkeypatch.context() as m:
        _stop_after(m, H, "run_lm_eval", 1)
        with pytest.raises(Stop):
            harness_ruler(_ctx(tmp_path, logs), settings, model, [LENGTH])
    assert len(list((tmp_path / CELLS).glob("harness_*.json"))) == 1  # the finished cell, kept
    assert logs == [f"lm-eval:ruler: cell 1/2 niah_single_1@{LENGTH}: scored 0.0"]
    calls = _stop_after(monkeypatch, H, "run_lm_eval", 99)
    res = harness_ruler(_ctx(tmp_path, logs), settings, model, [LENGTH])
    assert len(calls) == 1  # only the unfinished cell
    assert [c.get("cached", False) for c in res["cells"]] == [True, False]
    assert logs[1:] == [
        f"lm-eval:ruler: cell 1/2 niah_single_1@{LENGTH}: kept from an earlier run 0.0",
        f"lm-eval:ruler: cell 2/2 niah_multikey_2@{LENGTH}: scored 0.0",
    ]


def test_a_stopped_helmet_data_node_resumes_at_its_first_unfinished_cell(model, tmp_path, monkeypatch):
    from archpool.eval import helmet_data as H
    from archpool.pool.stages.eval import helmet_data
    from tests.eval.test_helmet_data import make_data

    make_data(tmp_path, length=HELMET_LENGTH)
    settings = H.HelmetDataSettings(path="data", categories=["recall"], lengths=[HELMET_LENGTH], limit=1, shots=1)
    n_cells = len(H.datasets_of("recall"))
    logs: list[str] = []
    with monkeypatch.context() as m:
        _stop_after(m, H, "_cell", 2)
        with pytest.raises(Stop):
            helmet_data(_ctx(tmp_path, logs), settings, model, [HELMET_LENGTH])
    assert len(logs) == 2 and all("scored" in line for line in logs)
    cells = _stop_after(monkeypatch, H, "_cell", 99)
    res = helmet_data(_ctx(tmp_path, logs), settings, model, [HELMET_LENGTH])
    assert len(cells) == n_cells - 2
    assert sum(bool(c.get("cached")) for c in res["cells"]) == 2
    assert sum("kept from an earlier run" in line for line in logs[2:]) == 2
