"""Dense key–value recall (``dense_kv``): documents, answers and distances under each law, and the family
registry every dense task goes through (training documents, evaluation documents, reserved tokens)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.errors import ConfigError
from archpool.tasks import (
    DENSE_SUFFIXES,
    SUITES,
    TASKS,
    DenseFamily,
    TaskConfig,
    TaskDef,
    dense_documents,
    dense_family,
    dense_params,
    is_dense,
    reserved_tokens_error,
    task_config,
    task_vocab,
    training_documents,
)
from archpool.tasks import dense_kv as K
from archpool.tasks.dense_kv import DenseKvConfig, draw_distance, make_document, min_length
from archpool.tasks.mqar import MqarConfig, TaskVocab, answer_errors

PLAIN = TaskVocab.from_ids(list(range(10, 400)), n_keys=64, n_values=32, n_hops=32, n_filler=64)
COMPOSITE = TaskVocab.composite_from_ids(list(range(1000, 1369)), list(range(10, 100)), n_keys=32, n_values=8)


def _docs(config: DenseKvConfig, length: int, n: int = 6, vocab: TaskVocab = COMPOSITE):
    return [make_document(random.Random(s), length, vocab, config) for s in range(n)]


def _check(doc, length: int, vocab: TaskVocab) -> None:
    assert len(doc.ids) == length
    assert answer_errors(doc, vocab) == []
    queried = [doc.ids[a.pos] for a in doc.answers]
    assert len(queried) == len(set(queried))  # every key is bound and queried once
    assert all(a.hop == 1 and a.chain == -1 and a.distance % 2 == 0 for a in doc.answers)
    assert doc.scored == [i - 1 in {a.pos for a in doc.answers} for i in range(length)]


@pytest.mark.parametrize("vocab", [PLAIN, COMPOSITE], ids=["plain", "composite"])
@pytest.mark.parametrize("law", ["uniform", "powerlaw", "fixed"])
@pytest.mark.parametrize("length", [64, 257, 1024])
def test_documents_fill_the_length_and_every_answer_is_its_keys_one_binding(vocab, law, length):
    config = DenseKvConfig(law=law, fixed_distance=40, n_keys=len(vocab.keys), n_values=len(vocab.values))
    docs = _docs(config, length, vocab=vocab)
    for doc in docs:
        _check(doc, length, vocab)
    n = sum(len(d.answers) for d in docs)
    assert n >= 0.8 * len(docs) * min(length // 8, len(vocab.keys))  # nearly every query finds room


def test_the_fixed_law_puts_every_query_at_its_distance_rounded_up_to_even():
    for d in (40, 41):
        docs = _docs(DenseKvConfig(law="fixed", fixed_distance=d), 512)
        assert {a.distance for doc in docs for a in doc.answers} == {d + d % 2}


def test_uniform_distances_stay_in_range_and_spread_over_it():
    config = DenseKvConfig(min_distance=20, max_distance=300, n_keys=32)
    ds = [a.distance for doc in _docs(config, 1024, 20) for a in doc.answers]
    assert min(ds) >= 20 and max(ds) <= 300
    assert 120 < statistics.mean(ds) < 200  # the placement favours long distances a little (longest first)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_power_law_draws_follow_their_cdf(alpha):
    """P(d <= x) of p(d) ∝ d^-alpha on [lo, hi + 1), floored: the draws match it within 0.02."""
    lo, hi, x, rng = 2, 500, 20, random.Random(0)
    config = DenseKvConfig(law="powerlaw", alpha=alpha)
    draws = [draw_distance(rng, lo, hi, config) for _ in range(20000)]
    assert min(draws) >= lo and max(draws) <= hi

    def mass(t: float) -> float:
        return math.log(t) if alpha == 1 else t ** (1 - alpha) / (1 - alpha)

    want = (mass(x + 1) - mass(lo)) / (mass(hi + 1) - mass(lo))
    assert abs(sum(d <= x for d in draws) / len(draws) - want) < 0.02


def test_a_steeper_law_gives_shorter_distances():
    def median(**kw):
        config = DenseKvConfig(n_keys=32, **kw)
        return statistics.median(a.distance for doc in _docs(config, 2048, 8) for a in doc.answers)

    assert median(law="powerlaw", alpha=2.0) < median(law="powerlaw", alpha=0.5) < median(law="uniform")


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(8, 600),
    law=st.sampled_from(["uniform", "powerlaw", "fixed"]),
    alpha=st.floats(0, 4),
    fixed=st.integers(2, 300),
    lo=st.integers(1, 200),
    span=st.integers(0, 400) | st.none(),
    seed=st.integers(0, 2**32),
)
def test_any_config_makes_valid_documents_or_refuses_the_length(length, law, alpha, fixed, lo, span, seed):
    config = DenseKvConfig(
        law=law, alpha=alpha, fixed_distance=fixed, min_distance=lo, max_distance=None if span is None else lo + span
    )
    if length < min_length(config):
        with pytest.raises(ConfigError, match="needs at least"):
            make_document(random.Random(seed), length, COMPOSITE, config)
        return
    doc = make_document(random.Random(seed), length, COMPOSITE, config)
    _check(doc, length, COMPOSITE)
    hi = min(config.max_distance or length, 2 * (length // 2 - 1))
    for a in doc.answers:
        if law == "fixed":
            assert a.distance == fixed + fixed % 2
        else:
            assert lo <= a.distance <= hi + 1


def test_the_config_is_typed_and_bounded_by_field():
    assert task_config("dense_kv") == DenseKvConfig()
    assert dense_params("dense_kv", {"buckets": [64], "law": "fixed"}) == {**DenseKvConfig(law="fixed").generator_params()}
    for params, field, words in [
        ({"law": "zipf"}, "p.law", "allowed: uniform, powerlaw, fixed"),
        ({"alpha": 5}, "p.alpha", "<= 4"),
        ({"fixed_distance": 1}, "p.fixed_distance", ">= 2"),
        ({"min_distance": 10, "max_distance": 5}, "p.max_distance", ">= min_distance=10"),
        ({"fixed_distanse": 8}, "p.fixed_distanse", "did you mean 'fixed_distance'"),
    ]:
        with pytest.raises(ConfigError) as e:
            task_config("dense_kv", params, "p")
        assert e.value.field == field and words in e.value.message, str(e.value)


def test_it_is_one_registered_dense_task_of_its_own_family():
    family = dense_family("dense_kv")
    assert family is K.FAMILY and family.config is DenseKvConfig and is_dense("dense_kv")
    assert "dense_kv" in SUITES["mqar"]  # the suite of the dense tasks
    assert TASKS["dense_kv"].make is make_document and TASKS["dense_kv"].metric == "dense"
    assert set(family.stats) <= set(DENSE_SUFFIXES) and "chain" not in family.stats
    with pytest.raises(ConfigError, match="not a dense task"):
        dense_family("kv_recall")


def test_a_family_entry_is_checked_when_it_is_made():
    @dataclasses.dataclass(frozen=True)
    class NoBuckets(TaskConfig):  # no scoring buckets field
        pass

    with pytest.raises(ConfigError, match="buckets"):
        dataclasses.replace(K.FAMILY, config=NoBuckets)
    with pytest.raises(ConfigError, match="stats"):
        dataclasses.replace(K.FAMILY, stats=("lp",))
    with pytest.raises(ConfigError, match="takes a DenseKvConfig"):
        TaskDef("x", make_document, "dense", 1, MqarConfig(), family=K.FAMILY)  # a config of another family
    with pytest.raises(ConfigError, match="only one has a dense family"):
        TaskDef("x", make_document, "dense", 1, DenseKvConfig())
    assert isinstance(K.FAMILY, DenseFamily)


def test_reserved_task_tokens_hold_the_composite_vocabulary():
    assert reserved_tokens_error("dense_kv", None, 369) is None
    assert "need 657 reserved task tokens" in reserved_tokens_error("dense_kv", {"n_keys": 64}, 369)
    assert reserved_tokens_error("dense_kv", {"n_keys": 64}, 0) is None


def test_evaluation_documents_are_reproducible_and_share_mqars_vocabulary(bpe):
    tok = bpe.with_task_tokens(369)
    config = task_config("dense_kv", {"law": "powerlaw", "alpha": 1.5})
    docs = dense_documents("dense_kv", tok, 300, 4, seed=5, config=config)
    assert [d.ids for d in docs] == [d.ids for d in dense_documents("dense_kv", tok, 300, 4, seed=5, config=config)]
    assert docs[0].ids != dense_documents("dense_kv", tok, 300, 4, seed=6, config=config)[0].ids
    vocab = task_vocab(tok, config)
    assert vocab is task_vocab(tok, MqarConfig())  # the same (n_keys, n_values): one vocabulary, cached once
    for d in docs:
        _check(d, 300, vocab)
    with pytest.raises(ConfigError, match="needs at least 66 tokens"):
        dense_documents("dense_kv", tok, 64, 1, config=task_config("dense_kv", {"law": "fixed", "fixed_distance": 64}))


def test_training_documents_are_raised_to_the_familys_shortest_length(tiny_tokenizer):
    config = task_config("dense_kv", {"law": "fixed", "fixed_distance": 100})
    docs = list(training_documents(["dense_kv", "mqar"], 10, 3, (20, 60), tiny_tokenizer, {"dense_kv": config}))
    kv, mqar = docs[0::2], docs[1::2]
    assert all(len(d.ids) == 102 and {a.distance for a in d.answers} == {100} for d in kv)
    assert all(20 <= len(d.ids) <= 60 for d in mqar)
    assert all(d.scored == [i - 1 in {a.pos for a in d.answers} for i in range(len(d.ids))] for d in docs)
    tail = list(training_documents(["dense_kv", "mqar"], 10, 3, (20, 60), tiny_tokenizer, {"dense_kv": config}, start=7))
    assert [d.ids for d in tail] == [d.ids for d in docs[7:]]


GOLDEN = [
    (PLAIN, 256, DenseKvConfig(n_keys=64, n_values=32), "uniform-plain"),
    (COMPOSITE, 512, DenseKvConfig(law="powerlaw", alpha=1.5, max_distance=300), "powerlaw-composite"),
    (COMPOSITE, 300, DenseKvConfig(law="fixed", fixed_distance=99, pair_every=4), "fixed-composite"),
]
DIGESTS = {"uniform-plain": "10e8918ea74b8886", "powerlaw-composite": "b36cb45c192f0e8a", "fixed-composite": "b30f600640e2c91e"}


@pytest.mark.parametrize(("vocab", "length", "config", "name"), GOLDEN)
def test_documents_are_pinned(vocab, length, config, name):
    """A change to the generator changes these digests: documents cached from it are made again
    (``training_documents_key``), and results scored on it are not comparable with earlier ones."""
    h = hashlib.sha256()
    for d in _docs(config, length, 5, vocab):
        h.update(json.dumps([d.ids, [[a.pos, a.gold, a.distance] for a in d.answers]]).encode())
    assert h.hexdigest()[:16] == DIGESTS[name]
