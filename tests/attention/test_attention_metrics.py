"""Attention statistics on attention matrices built by hand."""

import pytest
import torch

from archpool.attention.metrics import (
    RowStats,
    bucket_labels,
    copy_paste_scores,
    distance_bucket,
    importance_scores,
    row_entropy,
    sink_rate,
    token_recall,
)
from archpool.attention.rows import RowChunk


def sink_map(T):
    A = torch.zeros(T, T)
    A[:, 0] = 1.0
    return A


def uniform_map(T):
    return torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]


def chunk_of(A, q_rows=None):
    T = A.shape[-1]
    q = torch.arange(T) if q_rows is None else torch.as_tensor(q_rows)
    return RowChunk(slice(0, len(q)), q, torch.arange(T), A[q].reshape(1, 1, len(q), T).clone())


def test_head_on_first_token_has_alpha1_one_and_sink_rate_100():
    alpha = importance_scores(sink_map(64))
    assert alpha[0].item() == pytest.approx(1.0)
    assert torch.all(alpha[1:] == 0)
    assert sink_rate(alpha[0].reshape(1, 1, 1)) == 100.0


def test_sink_rate_is_the_share_of_heads_above_eps():
    heads = torch.stack([importance_scores(sink_map(16))[0], importance_scores(uniform_map(16))[0]])
    # uniform: alpha_1 = mean_i 1/i over 16 queries = H_16 / 16 ≈ 0.21 < 0.3
    assert heads[1].item() == pytest.approx(sum(1 / i for i in range(1, 17)) / 16)
    assert sink_rate(heads) == 50.0


def test_importance_score_divides_by_the_queries_that_see_the_key():
    A = uniform_map(4)
    # key 4 (1-indexed) is seen only by query 4, which gives it 1/4
    assert importance_scores(A)[3].item() == pytest.approx(0.25)


def test_uniform_head_has_entropy_log_i_and_normalised_entropy_one():
    T = 32
    A = uniform_map(T)
    h = row_entropy(A)
    assert torch.allclose(h, torch.log(torch.arange(1, T + 1).float()), atol=1e-5)
    st = RowStats(1, 1, T)
    st.add(0, chunk_of(A), None)
    s = st.summary(["full_attention"])
    assert s["entropy_norm"] == pytest.approx(1.0, abs=1e-5)
    assert s["entropy"] == pytest.approx(float(torch.log(torch.arange(1, T + 1).double()).mean()), abs=1e-5)
    # without the first column the rest is still uniform: normalised by log(i - 1) it is 1 again
    assert s["entropy_sinkless_norm"] == pytest.approx(1.0, abs=1e-5)
    assert s["first_token_mass"] == pytest.approx(float((1 / torch.arange(1, T + 1).double()).mean()))


def test_sink_head_has_zero_entropy_and_full_first_token_mass():
    st = RowStats(1, 1, 16)
    st.add(0, chunk_of(sink_map(16), q_rows=range(8, 16)), None)
    s = st.summary(["full_attention"])
    assert s["first_token_mass"] == pytest.approx(1.0)
    assert s["entropy"] == pytest.approx(0.0, abs=1e-6)
    assert sum(s["distance"]["by_layer_type"]["full_attention"]["mass"]) == pytest.approx(0.0)


def test_sliding_window_entropy_is_normalised_by_the_window():
    T, W = 20, 4
    A = torch.zeros(T, T)
    for i in range(T):
        lo = max(0, i - W + 1)
        A[i, lo : i + 1] = 1.0 / (i + 1 - lo)
    st = RowStats(1, 1, T)
    st.add(0, chunk_of(A, q_rows=range(10, 20)), W)
    assert st.summary(["sliding_attention"])["entropy_norm"] == pytest.approx(1.0, abs=1e-5)


def test_distance_buckets_are_log_spaced_and_exclude_the_sink():
    q, k = torch.tensor([9]), torch.arange(10)
    b = distance_bucket(q, k, 5)
    # distances 9..0 -> buckets: 9->4 (8-15), 8->4, 7..4->3, 3,2->2, 1->1, 0->0
    assert b[0].tolist() == [4, 4, 3, 3, 3, 3, 2, 2, 1, 0]
    assert bucket_labels(5) == ["0", "1", "2-3", "4-7", "8-15"]
    A = torch.zeros(10, 10)
    A[9, 0], A[9, 8], A[9, 9] = 0.5, 0.25, 0.25  # sink, previous token, self
    st = RowStats(1, 1, 10)
    st.add(0, chunk_of(A, q_rows=[9]), None)
    d = st.summary(["full_attention"])["distance"]["by_layer_type"]["full_attention"]
    assert d["first_token_mass"] == pytest.approx(0.5)
    assert d["mass"][:2] == pytest.approx([0.25, 0.25]) and sum(d["mass"][2:]) == 0


def test_copy_head_on_planted_needle_scores_one():
    prompt = torch.tensor([5, 6, 7, 10, 11, 12, 13, 8, 9, 5, 6, 7])
    span = (3, 7)  # the value 10 11 12 13
    generated = torch.tensor([10, 11, 12, 13])
    L, H = 2, 3
    top1 = torch.zeros(4, L, H, dtype=torch.long)  # every head looks at token 0 ...
    top1[:, 1, 2] = torch.tensor([3, 4, 5, 6])  # ... except a copy head, always on the token it emits
    top1[:, 0, 1] = torch.tensor([3, 3, 3, 3])  # in the span but on the wrong token after step 1
    s = copy_paste_scores(top1, prompt, generated, span)
    assert s[1, 2].item() == 1.0
    assert s[0, 1].item() == 0.25
    assert s.sum().item() == 1.25


def test_token_recall_counts_multiset_overlap():
    assert token_recall([1, 2, 3, 4], [4, 3, 9, 9]) == 0.5
    assert token_recall([1, 1], [1]) == 0.5
