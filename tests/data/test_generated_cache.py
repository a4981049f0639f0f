"""The cross-run cache of generated task documents: the same bytes with and without it, reads past
the cached prefix, resumes, corrupt and unwritable caches, and keys that change with what the
documents depend on."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from archpool.data.generated import GeneratedCache, GeneratedPrefix
from archpool.data.sources import GeneratorSource
from archpool.data.streams import GeneratedStream, PretrainStream
from archpool.tasks import training_documents_key


class CountingSource:
    """Token documents of varied lengths (some scored tokens), counting how many it yields."""

    name = "counting"

    def __init__(self, cache_key: str | None = "k1"):
        self.cache_key = cache_key
        self.made = 0

    def documents(self, seed: int):
        rng = np.random.default_rng(seed)
        while True:
            n = int(rng.integers(3, 40))
            self.made += 1
            yield SimpleNamespace(ids=rng.integers(5, 200, n).tolist(), scored=(rng.random(n) < 0.3).tolist())


TOKENIZER = SimpleNamespace(eos_id=1)


def stream(tmp_path, source, seed: int = 3) -> GeneratedStream:
    cache = GeneratedCache(tmp_path / "generated", source.cache_key, "tok") if source.cache_key else None
    return GeneratedStream(source, TOKENIZER, seed, stream_id=2, cache=cache)


def reads(s: GeneratedStream, spans) -> list[tuple[np.ndarray, ...]]:
    return [s.read(a, n) for a, n in spans]


def equal(a, b) -> bool:
    return all(np.array_equal(x, y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


SPANS = [(0, 100), (100, 37), (137, 500), (637, 2000), (2637, 1), (2638, 900)]


def test_cached_reads_are_the_bytes_of_generated_ones_and_skip_the_generator(tmp_path):
    want = reads(stream(tmp_path, CountingSource(None)), SPANS)  # no cache at all
    cold_src = CountingSource()
    cold = stream(tmp_path, cold_src)
    assert equal(reads(cold, SPANS), want)
    cold.flush()
    assert GeneratedCache(tmp_path / "generated", "k1", "tok").cached_tokens(3) >= 3538
    warm_src = CountingSource()
    assert equal(reads(stream(tmp_path, warm_src), SPANS), want)
    assert warm_src.made == 0  # every read came from the cache


def test_reads_past_the_cached_prefix_and_behind_the_buffer_stay_exact(tmp_path):
    want = reads(stream(tmp_path, CountingSource(None)), SPANS + [(50, 3000), (5000, 700)])
    short = stream(tmp_path, CountingSource())
    short.read(0, 600)
    short.flush()  # a prefix of about 600 tokens
    src = CountingSource()
    got = reads(stream(tmp_path, src), SPANS + [(50, 3000), (5000, 700)])  # past it, then behind (a reset), then on
    assert equal(got, want)
    assert src.made > 0
    # the longer recording replaced the short prefix (rewritten as it doubled), never the other way
    assert GeneratedCache(tmp_path / "generated", "k1", "tok").cached_tokens(3) > 600


def test_a_shorter_recording_never_replaces_a_longer_prefix(tmp_path):
    long = stream(tmp_path, CountingSource())
    long.read(0, 4000)
    long.flush()
    cache = GeneratedCache(tmp_path / "generated", "k1", "tok")
    n = cache.cached_tokens(3)
    other = GeneratedCache(tmp_path / "generated", "k1", "tok")
    assert not other.save(3, GeneratedPrefix(np.ones(10, np.int64), np.array([10]), np.zeros(10, bool)))
    assert cache.cached_tokens(3) == n


def test_seeds_keys_and_tokenizers_do_not_share_a_prefix(tmp_path):
    a = GeneratedCache(tmp_path, "k1", "tok")
    assert a.path(3) != a.path(4)
    assert a.path(3) != GeneratedCache(tmp_path, "k2", "tok").path(3)
    assert a.path(3) != GeneratedCache(tmp_path, "k1", "other").path(3)
    base = training_documents_key(["mqar"], (127, 127), {"mqar": {"pair_every": 4}})
    assert base == training_documents_key(["mqar"], (127, 127), {"mqar": {"pair_every": 4}})
    assert base != training_documents_key(["mqar"], (127, 127), {"mqar": {"pair_every": 8}})
    assert base != training_documents_key(["mqar"], (127, 255), {"mqar": {"pair_every": 4}})
    assert base != training_documents_key(["mqar", "kv_recall"], (127, 127), {"mqar": {"pair_every": 4}})


def test_corrupt_cache_files_are_ignored_and_rewritten(tmp_path):
    want = reads(stream(tmp_path, CountingSource(None)), SPANS)
    cache = GeneratedCache(tmp_path / "generated", "k1", "tok")
    cache.directory.mkdir(parents=True)
    cache.path(3).write_bytes(b"not a zip file")
    s = stream(tmp_path, CountingSource())
    assert equal(reads(s, SPANS), want)
    s.flush()
    assert cache.load(3) is not None
    # a well-formed file whose arrays disagree is refused too
    np.savez(cache.path(3), toks=np.ones(5, np.int32), ends=np.array([3, 9]), scored=np.zeros(5, bool))
    assert cache.load(3) is None
    assert equal(reads(stream(tmp_path, CountingSource()), SPANS), want)


def test_an_unwritable_cache_warns_once_and_training_data_is_unchanged(tmp_path):
    want = reads(stream(tmp_path, CountingSource(None)), SPANS)
    (tmp_path / "a-file").write_text("")  # the cache directory cannot be made under a file, even as root
    cache = GeneratedCache(tmp_path / "a-file" / "generated", "k1", "tok")
    s = GeneratedStream(CountingSource(), TOKENIZER, 3, stream_id=2, cache=cache)
    with pytest.warns(UserWarning, match="not cached") as caught:
        got = reads(s, SPANS)
        s.flush()
    assert equal(got, want)
    assert not cache.writable and len(caught) == 1


def test_pretrain_batches_are_identical_with_a_warm_cache(tiny_store):
    made = []

    def docs(seed):
        rng = np.random.default_rng(seed)
        while True:
            made.append(seed)
            n = int(rng.integers(10, 31))
            yield SimpleNamespace(ids=rng.integers(10, 200, n).tolist(), scored=[True] * n)

    def batches(key):
        extra = [(GeneratorSource("task", docs, cache_key=key), 0.5)]
        s = PretrainStream(tiny_store, 32, 8, seed=4, extra=extra, mix_unit=32, doc_ids=True)
        out = [next(s) for _ in range(20)]
        s.flush()
        return out

    plain = batches(None)
    cold = batches("task-v1")
    made.clear()
    warm = batches("task-v1")
    assert not made  # the second run generated nothing
    for a, b, c in zip(plain, cold, warm, strict=True):
        assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a)
    assert any(p.name.endswith("-1004.npz") for p in (tiny_store.path / "generated").iterdir())


def test_past_a_partial_prefix_the_source_continues_from_its_own_skip(tmp_path):
    class SkippingSource(CountingSource):
        """Documents that can start at any index without building the ones before it."""

        def documents(self, seed: int):
            return self.documents_from(seed, 0)

        def documents_from(self, seed: int, start: int):
            i = start
            while True:
                rng = np.random.default_rng([seed, i])
                n = int(rng.integers(3, 40))
                self.made += 1
                yield SimpleNamespace(ids=rng.integers(5, 200, n).tolist(), scored=(rng.random(n) < 0.3).tolist())
                i += 1

    want = reads(stream(tmp_path, SkippingSource(None)), SPANS)
    first = stream(tmp_path, SkippingSource())
    first.read(0, 600)
    first.flush()
    n_cached = len(GeneratedCache(tmp_path / "generated", "k1", "tok").load(3).ends)
    src = SkippingSource()
    assert equal(reads(stream(tmp_path, src), SPANS), want)
    total_docs = len(np.unique(np.concatenate([r[1] for r in want])))
    assert src.made <= total_docs - n_cached + 2  # only the documents past the prefix were made
