"""Every scoring rule against hand-computed cases (and NDCG against scikit-learn)."""

import math

import numpy as np
import pytest
import torch

from archpool.eval import metrics as M
from archpool.eval.longppl import longppl, select_key_tokens, short_context_nll


def test_string_match_all_counts_fraction_of_refs_case_insensitive():
    assert M.string_match_all("The numbers are 123 and 456.", ["123", "456"]) == 1.0
    assert M.string_match_all("only 123 here", ["123", "456", "789"]) == pytest.approx(1 / 3)
    assert M.string_match_all("ABCDE fghij", ["abcde", "FGHIJ"]) == 1.0
    assert M.string_match_all("nothing", ["x1"]) == 0.0


def test_string_match_part_is_any_ref():
    assert M.string_match_part("Paris, I think", ["London", "paris"]) == 1.0
    assert M.string_match_part("Rome", ["London", "Paris"]) == 0.0


def test_postprocess_replaces_control_characters():
    assert M.postprocess_pred("  a\tb\x01c  ") == "a\nb\nc"


def test_subem_normalises_and_parses_answer_prefix():
    assert M.substring_exact_match("Answer: The Eiffel Tower!", ["eiffel tower"]) == 1.0
    assert M.substring_exact_match("It is in Lyon.", ["Lyon"]) == 1.0
    assert M.substring_exact_match("Lyo", ["Lyon"]) == 0.0
    assert M.normalize_answer("The  Quick, brown a fox.") == "quick brown fox"


def test_exact_match_uses_first_line_or_label_prefix():
    assert M.exact_match(" 3\nsomething else", ["3"]) == 1.0
    assert M.exact_match("label: 4", ["4"]) == 1.0
    assert M.exact_match(" 34", ["3"]) == 0.0


def test_first_word_match():
    assert M.first_word_match(" 7 cat 3", ["7"]) == 1.0
    assert M.first_word_match("7.", ["7"]) == 1.0
    assert M.first_word_match(" 17", ["7"]) == 0.0
    assert M.first_word_match("", ["7"]) == 0.0


def test_parse_rankings_takes_longest_chain():
    r = M.parse_rankings("Ranking: [ID3] > [ID1] > ID2 and also 7 > 8")
    assert r == {"3": 3, "1": 2, "2": 1}
    assert M.parse_rankings("no ranking") == {}


def test_ndcg_hand_computed():
    qrels = {"a": 3, "b": 2, "c": 0, "d": 1}
    # ranking c > a > b: DCG = 0 + 3/log2(3) + 2/log2(4); IDCG = 3 + 2/log2(3) + 1/log2(4)
    dcg = 3 / math.log2(3) + 2 / 2
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    assert M.ndcg_at_k({"c": 3, "a": 2, "b": 1}, qrels) == pytest.approx(dcg / idcg)
    assert M.ndcg_at_k({"a": 4, "b": 3, "d": 2, "c": 1}, qrels) == pytest.approx(1.0)
    assert M.ndcg_at_k({}, qrels) == 0.0


def test_ndcg_matches_sklearn_on_full_rankings():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(3, 25))
        rel = rng.integers(0, 4, n)
        if rel.sum() == 0:
            rel[0] = 1
        perm = rng.permutation(n)
        scores = {str(i): float(n - r) for r, i in enumerate(perm)}
        qrels = {str(i): int(rel[i]) for i in range(n)}
        y_score = np.array([scores[str(i)] for i in range(n)])
        ref = ndcg_score(rel[None], y_score[None], k=10)
        assert M.ndcg_at_k(scores, qrels, 10) == pytest.approx(ref)


def test_generation_scoring_dispatch():
    assert M.score_generation("ndcg", "Ranking: 3 > 1", ["x"], {"qrels": {"3": 1, "1": 0}}) == 1.0
    assert M.score_generation("match_all", "  12\x01", ["12"]) == 1.0
    with pytest.raises(ValueError):
        M.score_generation("bleu", "x", ["x"])


def test_rank_of_gold_counts_ties_against_gold():
    assert M.rank_of_gold([-1.0, -2.0, -3.0]) == 0
    assert M.rank_of_gold([-2.0, -1.0, -3.0]) == 1
    assert M.rank_of_gold([-1.0, -1.0]) == 1


class StubLM:
    """NLL 0.5 everywhere on rows longer than K + d (full context); on short windows 3.0 for even
    target tokens: so key tokens (LSD 2.5 > 2, LCL -0.5 > -2) are exactly the even targets past K."""

    max_batch = 4

    def __init__(self, K, d):
        self.K, self.d = K, d

    def token_nll(self, x):
        x = torch.as_tensor(x)
        if x.dim() == 1:
            x = x[None]
        tgt = x[:, 1:]
        if x.shape[1] > self.K + self.d:
            return torch.full(tgt.shape, 0.5)
        return torch.where(tgt % 2 == 0, torch.tensor(3.0), torch.tensor(0.5))


def test_longppl_key_tokens_hand_case():
    K, d = 8, 2
    ids = torch.arange(1, 31)  # targets 2..30
    keys = select_key_tokens(StubLM(K, d), [ids], K, d)[0]
    expected = [j for j in range(len(ids) - 1) if j + 1 >= K and int(ids[j + 1]) % 2 == 0]
    assert keys == expected
    res = longppl(StubLM(K, d), [ids], [keys])
    assert res["n_key_token"] == len(expected)
    assert res["longppl"] == pytest.approx(math.exp(0.5))
    assert res["ppl"] == pytest.approx(math.exp(0.5))


def test_longppl_beta_rejects_badly_predicted_tokens():
    class Bad(StubLM):
        def token_nll(self, x):
            return super().token_nll(x) + 2.0  # full-context loss 2.5: LCL = -2.5 < beta = -2

    K, d = 8, 2
    assert select_key_tokens(Bad(K, d), [torch.arange(1, 31)], K, d)[0] == []


def test_short_context_windows_see_K_to_K_plus_d_minus_1_tokens():
    from archpool.eval.lm import lm_from_decoder
    from archpool.model import Decoder, ModelConfig

    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=2, max_seq_len=64))
    lm = lm_from_decoder(m, prefill_chunk=5, max_batch=3)
    K, d = 6, 3
    ids = torch.randint(0, 50, (23,))
    got = short_context_nll(lm, ids, K, d)
    starts = list(range(0, len(ids) - K, d))
    for t in range(1, len(ids)):
        if t < K:
            assert torch.isnan(got[t - 1])
            continue
        s = max(s for s in starts if s + K <= t)
        assert K <= t - s <= K + d - 1
        ctx = ids[s : t + 1][None]
        with torch.no_grad():
            ref = torch.nn.functional.cross_entropy(m(ctx)[0, -2:-1], ids[t : t + 1])
        assert float(got[t - 1]) == pytest.approx(float(ref), abs=1e-4)
