"""MQAR with ``rebind``: keys bound again after their query, so queries grow with the document and a
key's earlier bindings are hard distractors; ``answer_errors`` checks every answer against the ids."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archpool.errors import ConfigError
from archpool.tasks.mqar import Answer, Document, MqarConfig, TaskVocab, answer_errors, make_document

PLAIN = TaskVocab.from_ids(list(range(10, 400)), n_keys=64, n_values=32, n_hops=32, n_filler=64)
COMPOSITE = TaskVocab.composite_from_ids(list(range(1000, 1369)), list(range(10, 100)), n_keys=32, n_values=8)
SMALL = TaskVocab.composite_from_ids(list(range(1000, 1100)), list(range(10, 40)), n_keys=4, n_values=3)


def _bindings(doc: Document, vocab: TaskVocab) -> dict[int, list[tuple[int, int]]]:
    """Composite key bindings per key, in document order: (position, value)."""
    out: dict[int, list[tuple[int, int]]] = {}
    width = len(vocab.values)
    for j, t in enumerate(doc.ids):
        if t in vocab.pairs:
            i = vocab.pairs.index(t)
            out.setdefault(vocab.keys[i // width], []).append((j, vocab.values[i % width]))
    return out


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    length=st.integers(8, 1200),
    pair_every=st.integers(2, 16),
    rebind=st.booleans(),
    vocab=st.sampled_from(["plain", "composite", "small"]),
    chains=st.sampled_from([0.0, 0.3, 1.0]),
    distractors=st.sampled_from([0.0, 1.0]),
    distance=st.sampled_from(["uniform", "powerlaw"]),
)
def test_every_answer_is_the_most_recent_binding_of_its_key(
    seed, length, pair_every, rebind, vocab, chains, distractors, distance
):
    voc = {"plain": PLAIN, "composite": COMPOSITE, "small": SMALL}[vocab]
    params = MqarConfig(pair_every=pair_every, rebind=rebind, chains=chains, distractors=distractors, distance=distance)
    doc = make_document(random.Random(seed), length, voc, params)
    assert len(doc.ids) == length and doc.answers
    assert answer_errors(doc, voc) == []
    flags = doc.scored
    assert sum(flags) == len(doc.answers) and all(flags[a.pos + 1] for a in doc.answers)
    if voc.composite:
        for bound in _bindings(doc, voc).values():  # a rebinding changes the key's value
            assert all(a[1] != b[1] for a, b in zip(bound, bound[1:]))


def test_queries_grow_with_length_only_with_rebind():
    def mean_answers(length, rebind, **kw):
        docs = [make_document(random.Random(s), length, COMPOSITE, MqarConfig(rebind=rebind, **kw)) for s in range(20)]
        return statistics.mean(len(d.answers) for d in docs)

    n_keys = len(COMPOSITE.keys)
    assert mean_answers(1024, False) <= n_keys and mean_answers(2048, False) <= n_keys
    # uniform distances over the whole context: a key's timeline holds ~3 binding–query spans
    assert mean_answers(1024, True) > 1.3 * n_keys
    assert mean_answers(2048, True, distance="powerlaw") > 3 * n_keys
    assert mean_answers(2048, True, distance="powerlaw") > mean_answers(256, True, distance="powerlaw")
    # short distances: as many queries as the document asks for
    assert mean_answers(2048, True, max_distance=32) == 2048 // 8


def test_rebound_keys_are_hard_distractors():
    rebound = 0
    for s in range(20):
        doc = make_document(random.Random(s), 1024, COMPOSITE, MqarConfig(rebind=True, distractors=1.0))
        assert answer_errors(doc, COMPOSITE) == []
        for a in doc.answers:
            earlier = [b for b in _bindings(doc, COMPOSITE)[doc.ids[a.pos]] if b[0] < a.pos]
            assert earlier[-1] == (a.pos - a.distance, a.gold), "the answer is the most recent binding"
            rebound += len(earlier) > 1
    assert rebound > 100, "many queries have an earlier, different binding of their key before the answer's"


def test_plain_bindings_rebind_too():
    for s in range(10):
        doc = make_document(random.Random(s), 1024, PLAIN, MqarConfig(rebind=True, distance="powerlaw"))
        assert answer_errors(doc, PLAIN) == []
        keys = [doc.ids[a.pos] for a in doc.answers]
        assert len(keys) > len(set(keys)) and len(doc.answers) > len(PLAIN.keys)


def _hop_bindings(doc: Document, vocab: TaskVocab) -> dict[int, int]:
    """Composite hop bindings per chain middle value: how many."""
    out: dict[int, int] = {}
    for t in doc.ids:
        if t in vocab.hop_pairs:
            v = vocab.values[vocab.hop_pairs.index(t) // len(vocab.hops)]
            out[v] = out.get(v, 0) + 1
    return out


@pytest.mark.parametrize("chains", [0.05, 0.5])
def test_chain_keys_and_middle_values_are_never_rebound(chains):
    n = 0
    for s in range(20):
        doc = make_document(random.Random(s), 512, COMPOSITE, MqarConfig(rebind=True, chains=chains, pair_every=4))
        assert answer_errors(doc, COMPOSITE) == []
        bindings, hops = _bindings(doc, COMPOSITE), _hop_bindings(doc, COMPOSITE)
        mids = {a.gold for a in doc.answers if a.chain >= 0 and a.hop == 1}
        for a in doc.answers:
            if a.chain >= 0 and a.hop == 1:
                k, v = doc.ids[a.pos], a.gold
                assert len(bindings[k]) == 1, "a chain's key is bound once"
                assert hops[v] == 1, "a chain's middle value has one hop binding"
                others = [b for key, bs in bindings.items() if key != k for b in bs if b[1] == v]
                if len(mids) < len(COMPOSITE.values):  # (values run out when chains take them all)
                    assert not others, "while values are left, a chain's middle value is no other key's value"
                n += 1
    assert n >= 20


def test_without_rebind_documents_are_unchanged():
    for s in range(10):
        for voc in (PLAIN, COMPOSITE):
            a = make_document(random.Random(s), 300, voc, MqarConfig(chains=0.3, distractors=1.0))
            b = make_document(random.Random(s), 300, voc, MqarConfig(chains=0.3, distractors=1.0, rebind=False))
            assert a.ids == b.ids and [vars(x) for x in a.answers] == [vars(x) for x in b.answers]


def test_answer_errors_finds_wrong_answers():
    doc = make_document(random.Random(0), 256, COMPOSITE, MqarConfig(rebind=True))
    a = doc.answers[0]
    wrong_gold = next(v for v in COMPOSITE.values if v != a.gold)
    bad = Document(list(doc.ids), [Answer(a.pos, a.gold, a.distance + 2, a.hop, a.chain)])
    assert "distance" in answer_errors(bad, COMPOSITE)[0]
    ids = list(doc.ids)
    ids[a.pos + 1] = wrong_gold
    assert answer_errors(Document(ids, [Answer(a.pos, wrong_gold, a.distance, a.hop, a.chain)]), COMPOSITE)
    ids = list(doc.ids)
    ids[a.pos - a.distance] = COMPOSITE.filler[0]  # the binding is gone
    assert answer_errors(Document(ids, [a]), COMPOSITE)


def test_rebind_must_be_a_boolean():
    assert MqarConfig.from_dict({"rebind": True}).rebind is True and MqarConfig.from_dict(None).rebind is False
    with pytest.raises(ConfigError, match="mqar.rebind"):
        MqarConfig.from_dict({"rebind": "yes"})
