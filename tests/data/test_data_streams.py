import numpy as np
import pytest
import torch

from archpool.data.sources import GeneratorSource, TextListSource
from archpool.data.streams import (
    DocStream,
    ExtensionStream,
    PretrainStream,
    validation_sequences,
    validation_set,
    validation_texts,
)
from archpool.errors import ConfigError, DataError


def take(stream, n):
    return [next(stream) for _ in range(n)]


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_batches_have_shifted_labels_and_eos_between_documents(tiny_store):
    s = PretrainStream(tiny_store, 64, 4, seed=0, doc_ids=True)
    b = next(s)
    assert b["input_ids"].shape == b["labels"].shape == b["doc_ids"].shape == (4, 64)
    assert b["input_ids"].dtype == torch.long
    assert torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1])
    # the raw stream is the documents in seeded order, each followed by one EOS
    ds = DocStream(tiny_store, tiny_store.docs("train"), seed=0)
    order = np.random.default_rng([0, 0]).permutation(len(ds.docs))
    first = np.asarray(tiny_store.doc(int(ds.docs[order[0]])))
    toks, ids, _ = ds.read(0, len(first) + 3)
    assert np.array_equal(toks[: len(first)], first) and toks[len(first)] == tiny_store.eos_id
    assert (ids[: len(first) + 1] == ids[0]).all() and ids[len(first) + 1] != ids[0]


def test_doc_ids_change_exactly_after_each_eos(tiny_store):
    b = next(PretrainStream(tiny_store, 256, 2, seed=1, doc_ids=True))
    for row, ids in zip(b["input_ids"], b["doc_ids"]):
        changes = torch.nonzero(ids[1:] != ids[:-1]).flatten()
        eos = torch.nonzero(row[:-1] == tiny_store.eos_id).flatten()
        assert torch.equal(changes, eos)


def test_resumed_stream_equals_the_uninterrupted_one(tiny_store):
    full = take(PretrainStream(tiny_store, 48, 4, seed=7, doc_ids=True), 40)  # several epochs
    first = PretrainStream(tiny_store, 48, 4, seed=7, doc_ids=True)
    take(first, 13)
    state = first.state()
    assert state["tokens"] == 13 * 4 * 48
    resumed = PretrainStream.resume(tiny_store, state, doc_ids=True)
    rest = take(resumed, 27)
    assert all(same(a, b) for a, b in zip(full[13:], rest))
    assert not same(full[0], full[1])


def test_two_ranks_partition_the_single_process_stream(tiny_store):
    single = take(PretrainStream(tiny_store, 32, 6, seed=2, doc_ids=True), 6)
    r0 = take(PretrainStream(tiny_store, 32, 6, seed=2, rank=0, world_size=2, doc_ids=True), 6)
    r1 = take(PretrainStream(tiny_store, 32, 6, seed=2, rank=1, world_size=2, doc_ids=True), 6)
    for s, a, b in zip(single, r0, r1):
        assert a["input_ids"].shape == (3, 32)
        assert torch.equal(torch.cat([a["input_ids"], b["input_ids"]]), s["input_ids"])
        assert torch.equal(torch.cat([a["doc_ids"], b["doc_ids"]]), s["doc_ids"])
    # resume with another world size continues the same global stream
    st = PretrainStream(tiny_store, 32, 6, seed=2)
    take(st, 3)
    rr = PretrainStream.resume(tiny_store, st.state(), rank=1, world_size=3)
    assert torch.equal(next(rr)["input_ids"], single[3]["input_ids"][2:4])


def test_short_and_long_context_members_see_the_same_tokens(tiny_store):
    """The paper's 4K-vs-8K pair, scaled: same data config, contexts 64 and 128."""
    short = take(PretrainStream(tiny_store, 64, 4, seed=11), 10)
    long = take(PretrainStream(tiny_store, 128, 2, seed=11), 10)
    flat_short = torch.cat([b["input_ids"].reshape(-1) for b in short])
    flat_long = torch.cat([b["input_ids"].reshape(-1) for b in long])
    assert len(flat_short) == len(flat_long) == 2560
    assert torch.equal(flat_short, flat_long)


def test_different_seeds_give_different_orders(tiny_store):
    a = next(PretrainStream(tiny_store, 64, 2, seed=0))
    b = next(PretrainStream(tiny_store, 64, 2, seed=1))
    assert not torch.equal(a["input_ids"], b["input_ids"])


def test_bad_stream_arguments_name_the_field(tiny_store):
    with pytest.raises(ConfigError, match="^batch_size"):
        PretrainStream(tiny_store, 32, 5, world_size=2)
    with pytest.raises(ConfigError, match="^start_tokens"):
        PretrainStream(tiny_store, 32, 4, start_tokens=33)
    with pytest.raises(ConfigError, match="^rank"):
        PretrainStream(tiny_store, 32, 4, rank=2, world_size=2)
    state = PretrainStream(tiny_store, 32, 4).state()
    with pytest.raises(DataError, match="not 'extension'"):
        ExtensionStream.resume(tiny_store, state)


def test_extension_mix_prefers_long_documents_and_keeps_a_share_of_short_data(tiny_store):
    ext = ExtensionStream(tiny_store, 512, 4, seed=0, short_share=0.3, doc_ids=True)
    assert (tiny_store.lengths[ext.long_docs] >= 512).all() and len(ext.long_docs) > 0
    long_only = ExtensionStream(tiny_store, 512, 4, seed=0, short_share=0.0, doc_ids=True)
    b = next(long_only)
    long_set = {tuple(tiny_store.doc(int(i))[:8]) for i in ext.long_docs}
    # every document start in a long-only batch is a long document
    for row in b["input_ids"]:
        eos = torch.nonzero(row == tiny_store.eos_id).flatten()
        for p in eos[:-1]:
            if p + 9 < len(row):
                assert tuple(row[p + 1 : p + 9].tolist()) in long_set
    # resumable like pretraining
    full = take(ExtensionStream(tiny_store, 512, 2, seed=5, short_share=0.3), 12)
    e = ExtensionStream(tiny_store, 512, 2, seed=5, short_share=0.3)
    take(e, 5)
    assert all(same(a, b) for a, b in zip(full[5:], take(ExtensionStream.resume(tiny_store, e.state()), 7)))


def test_extension_falls_back_when_no_document_is_long_enough(tiny_store):
    with pytest.warns(UserWarning, match="no document reaches"):
        e = ExtensionStream(tiny_store, 4096, 1, seed=0)
    assert e.long_min_tokens == 1024


def test_extra_source_is_mixed_at_its_share_deterministically_and_resumably(tiny_store):
    marker = "Synthetic task: find the key river-42 in the haystack."
    extra = [(TextListSource([marker, marker + " Again."], name="task"), 0.25)]
    a = take(PretrainStream(tiny_store, 32, 8, seed=4, extra=extra), 30)
    b = take(PretrainStream(tiny_store, 32, 8, seed=4, extra=extra), 30)
    assert all(same(x, y) for x, y in zip(a, b))
    ids = torch.cat([x["doc_ids"] for x in take(PretrainStream(tiny_store, 32, 8, seed=4, extra=extra, doc_ids=True), 30)])
    from_extra = ids[:, 0] >= (1 << 48)  # extra components' document ids are offset by component << 48
    assert torch.equal(from_extra, ids[:, -1] >= (1 << 48))  # a unit (here: a row) comes from one component
    assert 0.15 < from_extra.float().mean() < 0.35
    rows = torch.cat([x["input_ids"] for x in a])
    assert all(any(w in tiny_store.tokenizer.decode(r) for w in ("haystack", "Synthetic", "river-42")) for r in rows[from_extra])
    assert not any("river-42" in tiny_store.tokenizer.decode(r) for r in rows[~from_extra])
    s = PretrainStream(tiny_store, 32, 8, seed=4, extra=extra)
    take(s, 11)
    rest = take(PretrainStream.resume(tiny_store, s.state(), extra=extra), 19)
    assert all(same(x, y) for x, y in zip(a[11:], rest))


def test_token_documents_train_only_their_answers(tiny_store):
    """A token document (ids + per-token target flags, e.g. MQAR) enters the stream as is; only
    its flagged tokens are labels, every other label of its unit is -100; text keeps all labels."""
    from types import SimpleNamespace

    def docs(seed):
        i = 0
        while True:
            ids = [(7 + i + j) % 200 + 10 for j in range(31)]
            yield SimpleNamespace(ids=ids, scored=[j % 4 == 3 for j in range(31)])
            i += 1

    extra = [(GeneratorSource("mqar", docs), 0.5)]
    batches = take(PretrainStream(tiny_store, 32, 8, seed=2, extra=extra, mix_unit=32, doc_ids=True), 10)
    seen_task = seen_text = 0
    for b in batches:
        for x, y, d in zip(b["input_ids"], b["labels"], b["doc_ids"]):
            if d[0] >= (1 << 48):  # a task unit: 31 document tokens + EOS, aligned to the row
                seen_task += 1
                scored = [p for p in (y != -100).nonzero().flatten().tolist() if p < 31]  # label 31: the next unit's
                assert scored == [j - 1 for j in range(1, 31) if j % 4 == 3]  # label j-1 is token j; EOS unscored
                assert all(y[j] == x[j + 1] for j in scored)
            else:  # (its last label is the next unit's first token, which may be a task token)
                seen_text += 1
                assert (y[:-1] != -100).all()
    assert seen_task and seen_text


def test_extra_sources_must_leave_room_and_be_sources(tiny_store):
    gen = GeneratorSource("g", lambda seed: iter(lambda: "x y z", None))
    with pytest.raises(ConfigError, match="share"):
        PretrainStream(tiny_store, 32, 4, extra=[(gen, 1.0)])
    with pytest.raises(ConfigError, match="not a DocumentSource"):
        PretrainStream(tiny_store, 32, 4, extra=[("text", 0.1)])


def test_validation_sets_are_held_out_and_shaped(tiny_store):
    v = validation_set(tiny_store)
    assert v.short and v.long
    train = set(tiny_store.docs("train"))
    assert not (set(v.short_indices) | set(v.long_indices)) & train
    rows = validation_sequences(tiny_store, 64, "long")
    assert rows.shape[1] == 65 and rows.shape[0] == sum(len(d) >= 65 for d in v.long)
    assert torch.equal(rows[0], torch.as_tensor(v.long[0][:65].astype(np.int64)))
    n_short = (sum(len(d) + 1 for d in v.short) - 1) // 16
    short = validation_sequences(tiny_store, 16, "short", max_sequences=n_short + 5)
    assert short.shape == (n_short, 17) and n_short >= 1
    m = min(17, len(v.short[0]))
    assert torch.equal(short[0, :m], torch.as_tensor(v.short[0][:m].astype(np.int64)))
    texts = validation_texts(tiny_store, "long")
    assert texts[0].startswith("Document ")
    with pytest.raises(DataError, match="no held-out long"):
        validation_sequences(tiny_store, 100_000, "long")
