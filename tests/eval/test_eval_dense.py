"""Dense (MQAR) scoring: a windowed oracle gets exactly the answers within its window right, and the
distance buckets, chain accuracy, Wilson intervals and pool columns say so."""

from __future__ import annotations

import math

import pytest
import torch

from archpool.columns import dense_columns
from archpool.eval.dense import answer_rows, bucket_label, default_buckets, run_dense_task, score_rows, wilson
from archpool.eval.lm import LM
from archpool.tasks import dense_documents, task_config, task_vocab

WINDOW = 48


class WindowOracle:
    """Answers a query by looking back at most ``window`` tokens for its binding token (composite
    vocabulary); anything it cannot see, it answers with a filler token."""

    def __init__(self, vocab, vocab_size: int, window: int):
        self.v, self.vocab_size, self.window = vocab, vocab_size, window
        self.binding = {
            t: (vocab.keys[i // len(vocab.values)], vocab.values[i % len(vocab.values)]) for i, t in enumerate(vocab.pairs)
        }
        self.binding.update(
            {t: (vocab.values[i // len(vocab.hops)], vocab.hops[i % len(vocab.hops)]) for i, t in enumerate(vocab.hop_pairs)}
        )

    def new_state(self):
        return {"ids": torch.zeros(0, 0, dtype=torch.long)}

    def step(self, state, ids):
        state["ids"] = ids if state["ids"].numel() == 0 else torch.cat([state["ids"], ids], 1)
        full = state["ids"]
        B, T = ids.shape
        start = full.shape[1] - T
        logits = torch.zeros(B, T, self.vocab_size)
        for b in range(B):
            for t in range(T):
                pos = start + t
                q = int(full[b, pos])
                guess = self.v.filler[0]
                for j in range(pos - 1, max(-1, pos - self.window - 1), -1):
                    kv = self.binding.get(int(full[b, j]))
                    if kv and kv[0] == q:
                        guess = kv[1]
                        break
                logits[b, t, guess] = 10.0
        return logits

    def expand(self, state, n):
        raise NotImplementedError


def _oracle_lm(tokenizer, config, window=WINDOW):
    vocab = task_vocab(tokenizer, config)
    return LM(WindowOracle(vocab, tokenizer.vocab_size, window), max_batch=4, prefill_chunk=96)


@pytest.fixture(scope="module")
def tok(bpe):
    return bpe.with_task_tokens(369)


def test_buckets_show_exactly_the_oracles_window(tok):
    config = task_config("mqar", {"buckets": [WINDOW, 128]})
    lm = _oracle_lm(tok, config)
    r = run_dense_task(lm, tok, "mqar", 256, 12, seed=3, config=config)
    assert r["params"] == {k: v for k, v in config.to_dict().items() if k != "buckets"}
    b = r["result"]["buckets"]
    assert set(b) == {f"d<={WINDOW}", f"{WINDOW}<d<=128", "d>128"}
    assert b[f"d<={WINDOW}"]["acc"] == 1.0 and b[f"{WINDOW}<d<=128"]["acc"] == 0.0 and b["d>128"]["acc"] == 0.0
    n = sum(x["n"] for x in b.values())
    assert n == r["n"] >= 200  # every answer of every document is scored and binned once
    inside = b[f"d<={WINDOW}"]["n"]
    assert r["result"]["acc"] == pytest.approx(inside / n)
    # log-probs: the oracle's logit of 10 over a flat rest
    top = 10 - math.log(math.exp(10) + tok.vocab_size - 1)
    assert b[f"d<={WINDOW}"]["lp"] == pytest.approx(top, abs=1e-4)
    tails = r["result"]["tails"]
    assert set(tails) == {f"d>{WINDOW}", "d>128"} and tails[f"d>{WINDOW}"]["acc"] == 0.0
    assert tails[f"d>{WINDOW}"]["n"] == n - inside
    cols = dense_columns(r)
    assert cols[f"mqar_acc@256[d<={WINDOW}]"] == 1.0 and cols["mqar_acc@256[d>128]"] == 0.0
    assert cols[f"mqar_acc@256[d>{WINDOW}]"] == 0.0
    assert cols["mqar_acc@256"] == pytest.approx(inside / n, abs=1e-6)


def test_chains_need_both_hops_within_the_window(tok):
    config = task_config("mqar_chain", {"min_distance": 20, "max_distance": 60, "pair_every": 32})
    lm = _oracle_lm(tok, config)
    docs = dense_documents("mqar_chain", tok, 256, 8, seed=1, config=config)
    rows = answer_rows(lm, docs)
    res = score_rows(rows, 256, [WINDOW])
    expect = {}
    for r in rows:
        if r["chain"] >= 0:
            assert r["correct"] == (r["distance"] <= WINDOW)
            expect.setdefault((r["doc"], r["chain"]), []).append(r["distance"] <= WINDOW)
    want = sum(all(v) for v in expect.values()) / len(expect)
    assert res["chains"]["acc"] == pytest.approx(want) and 0 < want < 1
    assert res["chains"]["n"] == len(expect)
    assert dense_columns({"task": "mqar_chain", "length": 256, "result": res})["mqar_chain_chain@256"] == pytest.approx(
        want, abs=1e-6
    )


def test_wilson_interval_and_labels():
    from statsmodels.stats.proportion import proportion_confint

    assert wilson(45, 50) == pytest.approx(list(proportion_confint(45, 50, method="wilson")))
    assert wilson(0, 0) is None
    assert [bucket_label(None, 64), bucket_label(64, 128), bucket_label(128, None)] == ["d<=64", "64<d<=128", "d>128"]
    assert default_buckets(512) == [16, 32, 64, 128, 256]
