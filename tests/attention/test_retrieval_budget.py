"""A retrieval-head search bounded in time: with ``retrieval_budget_s`` the search runs its trials spread over
depths and lengths, starts none it does not expect to finish within its share of the budget (a third with the
masking ablation), runs the ablation on the trials it searched, reports every trial with the time spent and left,
and says it is incomplete; the analysis is then not cached, so the next one resumes the search from its journal
and, given the time, gives the unbounded search's result. A clock that ticks once per decode stands for time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from archpool.attention import retrieval
from archpool.attention.capture import DecoderProbe
from archpool.attention.retrieval import make_trials, retrieval_heads, search_order
from archpool.attention.settings import Settings
from archpool.attention.stage import TRIALS_SUFFIX, analyze_target, cache_dir
from archpool.errors import ConfigError
from tests.attention.test_attention_resume import SETTINGS, counting


class Ticks:
    """A clock that advances one second per decoded trial (``decode_with_top1`` and ``greedy`` calls)."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        for name in ("decode_with_top1", "greedy"):
            real = getattr(retrieval, name)

            def ticking(*a, _real=real, **k):
                self.now += 1.0
                return _real(*a, **k)

            monkeypatch.setattr(retrieval, name, ticking)

    def __call__(self) -> float:
        return self.now


def _model():
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    return Decoder(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64), seed=5).eval()


def test_the_search_order_spreads_every_prefix_over_depths_and_lengths():
    trials = make_trials(list(range(2, 64)) * 3, [32, 48], seed=0)
    order = search_order(trials)
    assert sorted(order) == list(range(len(trials)))
    firsts = [(trials[i].depth, trials[i].length) for i in order[:6]]
    assert firsts == [(0, 32), (0, 48), (100, 32), (100, 48), (44, 32), (44, 48)]  # first, last, the middle
    depths = [trials[i].depth for i in order[::2]]
    assert depths == [0, 100, 44, 22, 67, 11, 33, 56, 78, 89]  # each next the farthest from those run (ties: shallower)


def test_a_budget_ends_the_search_and_the_ablation_runs_on_the_searched_trials(monkeypatch):
    trials = make_trials(list(range(2, 64)) * 3, [32], seed=0)
    clock = Ticks(monkeypatch)
    lines: list[str] = []
    r = retrieval_heads(DecoderProbe(_model()), trials, mask_k=1, top_k=3, budget_s=12, clock=clock, log=lines.append)
    assert (r["complete"], r["n_trials"], r["n_planned"], r["budget_s"]) == (False, 4, 10, 12)  # a third: 4 s of search
    assert r["depths"] == [0, 22, 44, 100]  # the first four of the search order
    assert clock.now == 3 * 4  # 4 searched trials, and the two ablation arms on the same 4
    assert any("trial 1/10 (T=32, depth 0%)" in line and "spent" in line for line in lines)
    assert any("time budget" in line and "after 4 of 10 trials" in line for line in lines)
    assert sum("ablation" in line for line in lines) == 8
    unbounded = retrieval_heads(DecoderProbe(_model()), trials, mask_k=1, top_k=3, clock=clock)
    assert unbounded["complete"] and unbounded["n_trials"] == 10 and unbounded["budget_s"] is None


def test_without_the_ablation_the_whole_budget_is_the_searchs(monkeypatch):
    trials = make_trials(list(range(2, 64)) * 3, [32], seed=0)
    r = retrieval_heads(DecoderProbe(_model()), trials, mask_k=0, budget_s=6, clock=Ticks(monkeypatch))
    assert r["n_trials"] == 6 and "ablation" not in r


def test_an_incomplete_analysis_is_not_cached_and_the_next_one_completes_it(attn_run, attn_store, tmp_path, monkeypatch):
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "reference"))
    reference = analyze_target(attn_run, {**SETTINGS, "retrieval_budget_s": 10_000})  # plenty: a complete search
    assert reference["retrieval"]["complete"]
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    times = iter([0.0] + [1000.0] * 100)  # the first trial takes 1,000 s of a 900 s budget: the search stops after it
    monkeypatch.setattr(retrieval, "time", SimpleNamespace(monotonic=lambda: next(times)))
    first = analyze_target(attn_run, {**SETTINGS, "retrieval_budget_s": 900})
    assert not first["retrieval"]["complete"] and first["retrieval"]["n_trials"] == 1
    assert not list(cache_dir().glob("*.json")) and len(list(cache_dir().glob(f"*{TRIALS_SUFFIX}"))) == 1
    monkeypatch.undo()
    monkeypatch.setenv("ARCHPOOL_CACHE", str(tmp_path / "cache"))
    decodes = counting(monkeypatch, "decode_with_top1")
    done = analyze_target(attn_run, {**SETTINGS, "retrieval_budget_s": 10_000})
    assert len(decodes) == 10 - 1  # the kept trial is not decoded again
    assert done["retrieval"] == reference["retrieval"] and done["metrics"] == reference["metrics"]
    assert list(cache_dir().glob("*.json")) and not list(cache_dir().glob(f"*{TRIALS_SUFFIX}"))


@pytest.mark.parametrize("budget", [0, -5, True, "ten", 10**9])
def test_the_budget_is_checked_when_the_settings_are_read(budget):
    with pytest.raises(ConfigError) as e:
        Settings.from_dict({"retrieval_budget_s": budget})
    assert e.value.field == "attention.retrieval_budget_s"
