"""MQAR generator: layout, answers, distances, chains beyond a window, and the text round trip."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.errors import ConfigError
from archpool.tasks import dense_documents, is_dense, task_config, training_documents
from archpool.tasks.mqar import MqarConfig, TaskVocab, make_document

VOCAB = TaskVocab.from_ids(list(range(10, 400)), n_keys=64, n_values=32, n_hops=32, n_filler=64)
COMPOSITE = TaskVocab.composite_from_ids(list(range(1000, 1369)), list(range(10, 100)), n_keys=32, n_values=8)


def _check_composite(doc, length: int, vocab: TaskVocab = COMPOSITE) -> None:
    """Composite bindings: the query token's one binding token holds (query, gold) at the distance."""
    ids = doc.ids
    assert len(ids) == length
    for a in doc.answers:
        assert ids[a.pos + 1] == a.gold
        q = ids[a.pos]
        binding = vocab.pair(q, a.gold) if a.hop == 1 else vocab.hop_pair(q, a.gold)
        where = [j for j in range(a.pos) if ids[j] == binding]
        assert len(where) == 1 and a.pos - where[0] == a.distance
        family = vocab.pairs if a.hop == 1 else vocab.hop_pairs
        width = len(vocab.values) if a.hop == 1 else len(vocab.hops)
        row = (vocab.keys if a.hop == 1 else vocab.values).index(q)
        same_key = set(family[row * width : (row + 1) * width])
        assert sum(1 for t in ids[: a.pos] if t in same_key) == 1, "one binding per key"


def _check(doc, length: int, vocab: TaskVocab = VOCAB) -> None:
    """Every answer is right by construction: the gold token follows the scored position, and the
    nearest earlier occurrence of the query token binds it to the gold at the stated distance."""
    ids = doc.ids
    assert len(ids) == length
    for a in doc.answers:
        assert ids[a.pos + 1] == a.gold
        q = ids[a.pos]
        earlier = [j for j in range(a.pos) if ids[j] == q and (a.hop == 1 or ids[j + 1] in vocab.hops)]
        assert earlier, "the queried key has a binding"
        b = earlier[-1] if a.hop == 1 else earlier[0]
        assert ids[b + 1] == a.gold, "the binding holds the gold value"
        assert a.pos - b == a.distance
        if a.hop == 1:
            assert q in vocab.keys and a.gold in vocab.values
            assert sum(1 for j in range(a.pos) if ids[j] == q) == 1, "keys are bound once per document"
        else:
            assert q in vocab.values and a.gold in vocab.hops


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(8, 600),
    seed=st.integers(0, 2**32),
    pair_every=st.integers(2, 16),
    distance=st.sampled_from(["uniform", "powerlaw"]),
)
def test_documents_are_exact_and_answers_correct(length, seed, pair_every, distance):
    doc = make_document(random.Random(seed), length, VOCAB, MqarConfig(pair_every=pair_every, distance=distance))
    _check(doc, length)
    assert doc.answers, "at least one scored answer"
    flags = doc.scored
    assert sum(flags) == len(doc.answers) and all(flags[a.pos + 1] for a in doc.answers)


@settings(max_examples=40, deadline=None)
@given(length=st.integers(8, 600), seed=st.integers(0, 2**32), chains=st.sampled_from([0.0, 0.5, 1.0]))
def test_composite_bindings_are_one_token_and_answers_correct(length, seed, chains):
    doc = make_document(random.Random(seed), length, COMPOSITE, MqarConfig(chains=chains, pair_every=8))
    _check_composite(doc, length)
    assert doc.answers


def test_composite_vocab_needs_enough_task_tokens():
    with pytest.raises(ConfigError, match="data.task_tokens"):
        TaskVocab.composite_from_ids(list(range(100)), [1, 2, 3], n_keys=32, n_values=8)


def test_distances_are_spread_uniformly_over_the_context():
    L = 512
    ds = [a.distance for s in range(200) for a in make_document(random.Random(s), L, VOCAB).answers]
    assert min(ds) <= 8 and max(ds) >= L - 16
    quarters = [sum(lo <= d < lo + L // 4 for d in ds) / len(ds) for lo in range(0, L, L // 4)]
    assert all(0.17 < q < 0.33 for q in quarters), quarters  # uniform: ~0.25 each


def test_min_and_max_distance_are_honoured():
    for s in range(50):
        doc = make_document(random.Random(s), 256, VOCAB, MqarConfig(min_distance=100, max_distance=180))
        assert doc.answers and all(100 <= a.distance <= 181 for a in doc.answers)


@pytest.mark.parametrize("window", [16, 64])
def test_chain_hops_are_forced_beyond_the_window(window):
    n_chains = 0
    for s in range(40):
        doc = make_document(random.Random(s), 256, VOCAB, MqarConfig(chains=1.0, min_distance=window + 1, pair_every=32))
        _check(doc, 256)
        for a in doc.answers:
            assert a.distance > window
        hops = {}
        for a in doc.answers:
            if a.chain >= 0:  # (a chain that does not fit becomes a plain query)
                hops.setdefault(a.chain, []).append(a)
        for chain in hops.values():
            assert sorted(a.hop for a in chain) == [1, 2]
            h1, h2 = sorted(chain, key=lambda a: a.hop)
            assert h2.pos == h1.pos + 1 and doc.ids[h1.pos - 1] == VOCAB.marker
            assert doc.ids[h2.pos] == h1.gold, "hop 2's query is hop 1's answer"
        n_chains += len(hops)
    assert n_chains >= 40


def test_bad_parameters_name_the_field():
    with pytest.raises(ConfigError, match="mqar.distance"):
        MqarConfig(distance="gaussian")
    with pytest.raises(ConfigError, match="mqar.colour"):
        MqarConfig.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match="mqar.max_distance"):
        MqarConfig(min_distance=10, max_distance=5)
    with pytest.raises(ConfigError, match="disjoint"):
        TaskVocab((1, 2), (2, 3), (4, 5), (6, 7), 8)


def test_task_tokens_give_composite_documents(tiny_tokenizer):
    tok = tiny_tokenizer.with_task_tokens(369)
    assert len(tok.task_ids) == 369 and tok.vocab_size == tiny_tokenizer.vocab_size + 369
    docs = dense_documents("mqar_chain", tok, 256, 3, seed=0, config=MqarConfig(chains=1.0, min_distance=65, pair_every=32))
    reserved = set(tok.task_ids)
    for d in docs:
        assert any(t in reserved for t in d.ids)
        assert all(a.distance >= 65 for a in d.answers)


def test_registered_and_round_trips_through_the_tokenizer(tiny_tokenizer):
    assert is_dense("mqar") and is_dense("mqar_chain") and not is_dense("kv_recall")
    docs = dense_documents("mqar", tiny_tokenizer, 128, 4, seed=1, config=MqarConfig(n_keys=24, n_values=16))
    again = dense_documents("mqar", tiny_tokenizer, 128, 4, seed=1, config=MqarConfig(n_keys=24, n_values=16))
    assert [d.ids for d in docs] == [d.ids for d in again]
    for d in docs:
        assert tiny_tokenizer.encode(tiny_tokenizer.decode(d.ids)) == d.ids
    train = training_documents(["mqar"], 3, 0, (64, 64), tiny_tokenizer, {"mqar": MqarConfig(n_keys=24, n_values=16)})
    tdocs = list(train)
    assert len(tdocs) == 3 and all(len(d.ids) == 64 for d in tdocs)
    assert not set(map(tuple, (d.ids for d in tdocs))) & set(map(tuple, (d.ids for d in docs)))
    with pytest.raises(ConfigError, match="tasks.mqar.n_keys"):
        task_config("mqar", {"n_keys": 1})


def test_documents_are_byte_identical_to_the_recorded_generator():
    """The demo's numbers rest on these exact documents: a faster generator must draw the same ones
    (digest recorded from the generator as of the demo run, commit c0344f3)."""
    import hashlib

    h = hashlib.sha256()
    for seed in range(40):
        for vocab, params in (
            (VOCAB, MqarConfig(pair_every=4, chains=0.3)),
            (COMPOSITE, MqarConfig(pair_every=4, chains=0.2)),
            (VOCAB, MqarConfig(pair_every=8, distance="powerlaw", distractors=1)),
        ):
            d = make_document(random.Random(seed), 128 + 3 * seed, vocab, params)
            h.update(repr((d.ids, [tuple(vars(a).values()) for a in d.answers])).encode())
    assert h.hexdigest() == "e0a76c7831f6de67b9fdc48e4173b2e09ca6e2d88c2e5c27d50533c2a921a21d"


@pytest.mark.parametrize("names", [["mqar"], ["mqar", "kv_recall"]])
def test_training_documents_from_start_are_the_tail_of_the_whole_sequence(names, tiny_tokenizer, monkeypatch):
    import dataclasses
    import itertools

    import archpool.tasks as tasks

    params = {"mqar": MqarConfig(n_keys=24, n_values=16)}

    def docs(**kw):
        out = list(training_documents(names, 14, 3, (64, 96), tiny_tokenizer, params, **kw))
        return [d if isinstance(d, str) else (d.ids, d.scored) for d in out]

    whole = docs()
    assert len(whole) == 14
    for start in (0, 1, 5, 13, 14):
        assert docs(start=start) == whole[start:]
    # all dense: the skipped documents are never built
    built = []
    real = tasks.mqar.make_document
    family = dataclasses.replace(tasks.mqar.FAMILY, make_document=lambda *a, **k: built.append(1) or real(*a, **k))
    monkeypatch.setitem(tasks.TASKS, "mqar", dataclasses.replace(tasks.TASKS["mqar"], family=family))
    list(itertools.islice(training_documents(["mqar"], None, 3, (64, 96), tiny_tokenizer, params, start=100), 2))
    assert len(built) == 2
