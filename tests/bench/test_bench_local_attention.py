"""The op benchmark's ideal (pairs the mask allows) and its document generator, against the dense mask."""

import pytest
import torch

from archpool.model.kernels.local import LocalMask

BENCH_SCRIPT = "bench_local_attention"


@pytest.mark.parametrize("window,with_docs", [(None, False), (7, False), (None, True), (7, True)])
def test_pairs_count_the_dense_mask(bench, window, with_docs):
    T = 90
    doc_ids = bench.document_ids(T, 16, seed=1) if with_docs else None
    mask = LocalMask(window, doc_ids).dense(T, T, torch.device("cpu"))
    assert bench.pairs(T, window, doc_ids) == int(mask.sum())


def test_documents_are_contiguous_and_sized_around_the_mean(bench):
    ids = bench.document_ids(4000, 100, seed=2)[0]
    assert ids.shape == (4000,) and bool((ids[1:] - ids[:-1] >= 0).all())
    lengths = torch.unique_consecutive(ids, return_counts=True)[1][:-1]  # the last one is cut at T
    assert int(lengths.min()) >= 25 and int(lengths.max()) <= 175


def test_op_row_times_full_and_local(bench):
    row = bench.op_row(600, 64, None, bench.OpInputs(2, 8, "float32"), 1)
    assert len(row["full_s"]) == len(row["local_s"]) == len(row["round_speedups"]) == 1
    assert row["ideal"] == pytest.approx(bench.pairs(600, None) / bench.pairs(600, 64))
    assert "| 600 |" in bench.op_table([row], "t")


def test_op_inputs_in_the_models_layout(bench):
    q, k, v = bench.OpInputs(2, 8, "float32", layout="bthd").make(50)
    assert q.shape == (1, 2, 50, 8) and q.stride() == (800, 8, 16, 1) and q.requires_grad
