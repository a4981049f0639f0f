"""Positional oracle: a model that can only attend within a window retrieves needles inside it and
fails beyond it, in both scoring modes."""

import pytest
import torch

from archpool.eval.lm import LM
from archpool.eval.runner import run_task


class WindowRecallBackend:
    """An exact induction oracle restricted to a window: at each position it finds the latest earlier
    occurrence of the current token no more than ``window - 1`` positions back and predicts the token
    after it; with none in view, all logits are equal."""

    def __init__(self, vocab_size: int, window: int):
        self.vocab_size, self.window = vocab_size, window

    def new_state(self):
        return [[]]

    def expand(self, state, n):
        return [list(state[0]) for _ in range(n)]

    def step(self, state, ids):
        B, T = ids.shape
        logits = torch.zeros(B, T, self.vocab_size)
        for b in range(B):
            seq = state[b]
            for t in range(T):
                seq.append(int(ids[b, t]))
                p = len(seq) - 1
                for j in range(p - 1, max(-1, p - self.window), -1):
                    if seq[j] == seq[p]:
                        logits[b, t, seq[j + 1]] = 10.0
                        break
        return logits


@pytest.mark.parametrize("mode", ["gen", "ll"])
def test_window_oracle_succeeds_inside_window_and_fails_beyond(mode, wordtok):
    W = 40
    lm = LM(WindowRecallBackend(wordtok.vocab_size, W), prefill_chunk=16)
    inside, beyond = [], []
    for L in (96, 192, 384):
        res = run_task(lm, wordtok, "kv_recall", L, [mode], n=40, seed=0)[mode]
        for s in res["samples"]:
            # the pair sits within the block, up to ~10 tokens after the block start
            if s["needle_distance"] < W - 12:
                inside.append(s["score"])
            elif s["needle_distance"] > W + 12:
                beyond.append(s["score"])
    assert len(inside) >= 10 and len(beyond) >= 40
    assert sum(inside) / len(inside) == 1.0
    assert sum(beyond) / len(beyond) == 0.0


def test_score_falls_with_length_for_a_window_model(wordtok):
    lm = LM(WindowRecallBackend(wordtok.vocab_size, 48), prefill_chunk=32)
    scores = [run_task(lm, wordtok, "kv_recall", L, ["ll"], n=40, seed=0)["ll"]["score"] for L in (48, 96, 384)]
    assert scores[0] == 100.0 and scores[0] > scores[1] > scores[2]
