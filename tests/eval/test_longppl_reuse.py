"""LongPPL with the model as its own evaluator: each document's full NLL is computed once, same numbers."""

from __future__ import annotations

import copy

import torch

from archpool.eval.lm import lm_from_decoder
from archpool.eval.longppl import run_longppl
from archpool.model import Decoder, ModelConfig


class Counting:
    """An LM that counts full-document forwards (rows of the longest length)."""

    def __init__(self, lm, full_len: int):
        self.lm, self.full_len, self.full_calls = lm, full_len, 0
        self.max_batch = lm.max_batch

    def token_nll(self, ids):
        ids = torch.as_tensor(ids)
        if ids.shape[-1] == self.full_len:
            self.full_calls += ids.shape[0] if ids.dim() == 2 else 1
        return self.lm.token_nll(ids)


def test_self_evaluator_reuses_document_nll_with_identical_numbers():
    torch.manual_seed(0)
    model = Decoder(ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=2, max_seq_len=64), seed=0)
    docs = [torch.randint(0, 50, (40,)) for _ in range(3)]
    kw = dict(lengths=[40], K=8, d=4, alpha=-10.0, beta=-100.0, evaluator_hash="e", tokenizer_hash="t")
    own = Counting(lm_from_decoder(model, prefill_chunk=16, max_batch=2), 40)
    other = Counting(lm_from_decoder(copy.deepcopy(model), prefill_chunk=16, max_batch=2), 40)
    target = Counting(lm_from_decoder(model, prefill_chunk=16, max_batch=2), 40)
    reused = run_longppl(own, own, docs, **kw)
    separate = run_longppl(target, other, docs, **kw)
    assert reused == separate
    assert reused[0]["n_key_token"] > 0
    # separate models: perplexity (3 rows) + key choice (3) + LongPPL (3); one model shares its per-document pass
    assert target.full_calls + other.full_calls == 9
    assert own.full_calls == 6
