import json
from pathlib import Path

import numpy as np
import pytest

from archpool.data.store import SPLITS, Store, prepare, split_long, store_path
from archpool.data.streams import PretrainStream
from archpool.errors import DataError
from tests.helpers.corpus import make_docs, tiny_config

QUIET = dict(progress=False, log=lambda *a: None)


def _files(store):
    return {p.name: p.read_bytes() for p in sorted(store.path.iterdir()) if p.name != "manifest.json"}


def test_two_independent_preparations_are_byte_identical(docs_dir, tmp_path):
    a = prepare(tiny_config(docs_dir, tmp_path / "c1"), **QUIET)
    b = prepare(tiny_config(docs_dir, tmp_path / "c2", workers=2), **QUIET)  # process pool this time
    assert a.path.name == b.path.name  # same key
    fa, fb = _files(a), _files(b)
    assert set(fa) == {"index.npy", "tokenizer.json", "tokens-00000.bin"}
    assert fa == fb
    assert a.tokenizer_hash == b.tokenizer_hash
    sa = PretrainStream(a, 32, 4, seed=3, doc_ids=True)
    sb = PretrainStream(b, 32, 4, seed=3, doc_ids=True)
    for _ in range(5):
        x, y = next(sa), next(sb)
        assert all(np.array_equal(x[k], y[k]) for k in x)


def test_store_reuse_and_a_changed_input_makes_a_new_store(docs_dir, tmp_path):
    cfg = tiny_config(docs_dir, tmp_path / "c")
    a = prepare(cfg, **QUIET)
    stamp = (a.path / "manifest.json").stat().st_mtime_ns
    msgs = []
    again = prepare(cfg, progress=False, log=msgs.append)
    assert again.path == a.path and "reusing" in msgs[0]
    assert (a.path / "manifest.json").stat().st_mtime_ns == stamp
    assert store_path(cfg) == a.path
    (docs_dir / "doc001.txt").write_text("A changed document with new words entirely.\n")
    b = prepare(cfg, **QUIET)
    assert b.path != a.path
    assert not list((tmp_path / "c" / "data").glob(".tmp-*"))  # no leftovers from the atomic build


def test_manifest_records_files_hashes_tokenizer_and_counts(tiny_store, docs_dir):
    m = tiny_store.manifest
    files = m["sources"][0]["files"]
    assert len(files) == 60 and all(len(f["sha256"]) == 64 for f in files)
    assert m["tokenizer_hash"] == tiny_store.tokenizer.hash
    assert m["counts"]["docs"] == len(tiny_store.index) == 60
    assert m["counts"]["tokens"] == int(tiny_store.lengths.sum())
    assert sum(m["counts"][s]["docs"] for s in SPLITS) == 60
    assert m["dtype"] == "<u2" and m["timing"]["encode_MB_per_s"] > 0
    # the stored tokens are the tokenizer's encoding of each document
    texts = sorted((p.read_text() for p in docs_dir.iterdir()), key=lambda t: int(t.split(".")[0].split()[1]))
    order = sorted(docs_dir.iterdir())
    for i in (0, 7, 33):
        assert list(tiny_store.doc(i)) == tiny_store.tokenizer.encode(order[i].read_text())
    assert texts  # sanity


def test_held_out_documents_are_disjoint_from_training_and_long_ones_are_long(docs_dir, tmp_path):
    # duplicate documents across files must land in one split only
    for i in range(10):
        (docs_dir / f"dup{i}.txt").write_text((docs_dir / f"doc{i:03d}.txt").read_text())
    s = prepare(tiny_config(docs_dir, tmp_path / "c"), **QUIET)
    assert s.manifest["counts"]["duplicates_dropped"] == 10
    train = set(s.index["hash"][s.docs("train")])
    val = set(s.index["hash"][s.docs("val_short", "val_long")])
    assert val and train and not (train & val)
    assert (s.lengths[s.docs("val_long")] >= 600).all()
    assert (s.lengths[s.docs("val_short")] < 600).all()


def test_validation_source_is_held_out_entirely(docs_dir, tmp_path):
    val_dir = tmp_path / "val"
    val_dir.mkdir()
    for i, t in enumerate(make_docs(5, seed=9)):
        (val_dir / f"v{i}.txt").write_text(t)
    cfg = tiny_config(
        docs_dir,
        tmp_path / "c",
        holdout_fraction=0.0,
        long_holdout_fraction=0.0,
        sources=[{"kind": "files", "path": str(docs_dir)}, {"kind": "files", "path": str(val_dir), "split": "validation"}],
    )
    s = prepare(cfg, **QUIET)
    assert set(s.index["source"][s.docs("val_short", "val_long")]) == {1}
    assert set(s.index["source"][s.docs("train")]) == {0}


def test_caps_are_deterministic_and_respected(docs_dir, tmp_path):
    a = prepare(tiny_config(docs_dir, tmp_path / "c1", max_docs=20), **QUIET)
    b = prepare(tiny_config(docs_dir, tmp_path / "c2", max_docs=20), **QUIET)
    assert a.n_docs == 20 and np.array_equal(a.index, b.index)
    c = prepare(tiny_config(docs_dir, tmp_path / "c3", max_chars=20_000), **QUIET)
    assert c.manifest["counts"]["text_bytes"] <= 20_000


def test_huge_documents_are_split_at_paragraphs_into_pieces_of_one_parent(tmp_path):
    big = make_docs(1, long_words=6000)[0]
    (tmp_path / "big.txt").write_text(big)
    (tmp_path / "small.txt").write_text(make_docs(2, seed=1)[1])
    s = prepare(
        tiny_config(tmp_path / "*.txt", tmp_path / "c", max_doc_chars=5000, holdout_fraction=0.0, long_holdout_fraction=0.0),
        **QUIET,
    )
    assert s.n_docs > 5 and len(set(s.index["parent"])) == 2
    pieces = split_long(big, 5000)
    assert "".join(pieces) == big and all(len(p) <= 5000 for p in pieces)
    assert all(p.endswith("\n\n") or p.endswith(".\n") for p in pieces[:-1])


def test_large_vocabulary_is_stored_as_uint32(tmp_path, docs_dir):
    from tokenizers import Tokenizer as HF
    from tokenizers import models, pre_tokenizers

    vocab = {"<|bos|>": 0, "<|eos|>": 1, "<|pad|>": 2, "[UNK]": 3}
    words = sorted({w for t in (docs_dir / f"doc{i:03d}.txt" for i in range(60)) for w in t.read_text().split()})
    for w in words:
        vocab[w] = len(vocab)
    while len(vocab) < 70_000:
        vocab[f"filler{len(vocab)}"] = len(vocab)
    vocab["zzlast"] = len(vocab)
    hf = HF(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf.save(str(tmp_path / "tokenizer.json"))
    (docs_dir / "z.txt").write_text("zzlast zzlast\n")
    s = prepare(tiny_config(docs_dir, tmp_path / "c", tokenizer=str(tmp_path / "tokenizer.json")), **QUIET)
    assert s.dtype == np.dtype("<u4")
    assert s.manifest["tokenizer"]["kind"] == "given"
    z = int(np.flatnonzero(s.lengths == 2)[-1])
    assert list(s.doc(z)) == [70_000, 70_000]


def test_opening_something_else_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="not a prepared data store"):
        Store(tmp_path)


def test_store_refuses_a_run_with_another_tokenizer(tiny_store):
    tiny_store.require_tokenizer(tiny_store.tokenizer_hash)
    with pytest.raises(DataError, match="tokenizer hash"):
        tiny_store.require_tokenizer("f" * 64)
    # a tampered tokenizer.json no longer matches the manifest
    p = tiny_store.path / "tokenizer.json"
    j = json.loads(p.read_text())
    j["added_tokens"][0]["content"] = "<|other|>"
    p.write_text(json.dumps(j))
    with pytest.raises(DataError, match="differs from the recorded"):
        _ = Store(tiny_store.path).tokenizer


def test_a_runs_data_section_names_its_store_whatever_train_side_keys_it_holds(tiny_store, docs_dir, tmp_path):
    """One reader of a run's ``data:`` section for eval, attention and the trainer: train-side keys
    (``tasks``, ``short_share``, ``seed``) never hide the store (they used to make eval lose the tokenizer)."""
    from archpool.data.section import section_store_path

    cfg = tiny_config(docs_dir, tmp_path / "cache").to_dict()
    train_side = {"tasks": {"names": ["mqar"], "share": 0.5}, "short_share": 0.3, "seed": 3, "long_min_tokens": 64}
    assert section_store_path({**cfg, **train_side}) == tiny_store.path
    assert section_store_path({**cfg, **train_side, "store": "/elsewhere"}) == Path("/elsewhere")
    assert section_store_path({"synthetic": {}}) is None and section_store_path(None) is None
