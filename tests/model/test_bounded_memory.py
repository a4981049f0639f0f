"""Long inputs in memory linear in T: a forward, the evaluation's chunked prefill and the attention
statistics of a tiny model at 16384 tokens grow the peak RSS by less than a quarter (forward,
prefill) or half (statistics) of one T×T float32 matrix (1 GiB); a T×T boolean mask alone is a
quarter, and the tiny model's own activations at this length take about 100 MiB."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from archpool.attention.capture import probe_for
from archpool.attention.stats import long_stats
from archpool.eval.lm import LM
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder, KVCache
from archpool.runtime import peak_rss_mb, reset_peak_rss

T = 16384
CHUNK = LM.prefill_chunk  # queries per prefill step of the evaluation (full layers: a CHUNK × T mask)
CAP_MB = T * T * 4 / 4 / 2**20  # a quarter of one T×T float32 matrix: 256 MiB


def tiny(pattern: str) -> Decoder:
    cfg = ModelConfig.preset("olmo3", size="tiny", max_seq_len=128, window=64, swa_pattern=pattern)
    return Decoder(cfg, seed=0).eval()


def peak_growth_mb(fn) -> float:
    """Peak RSS growth while ``fn`` runs, after one warm-up call at a short length has run."""
    before = reset_peak_rss()
    if before is None:
        pytest.skip("peak RSS cannot be reset on this platform (/proc/self/clear_refs)")
    fn()
    return peak_rss_mb() - before


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("pattern", ["all", "olmo3"])
def test_long_forward_and_chunked_prefill_hold_no_t_by_t_tensor(pattern, ids):
    model = tiny(pattern)

    def run() -> None:
        with torch.no_grad():
            model(ids[:, :T], targets=ids[:, :T])  # training-path forward, fused head
            cache = KVCache(model.cfg.n_layers)
            for s in range(0, T, CHUNK):  # the evaluation's prefill: chunks over the cached keys
                model(ids[:, s : s + CHUNK], kv_cache=cache)

    with torch.no_grad():
        model(ids[:, :512], targets=ids[:, :512])  # one-time costs out of the measurement
    assert peak_growth_mb(run) < CAP_MB


def test_long_attention_statistics_hold_no_t_by_t_tensor(ids):
    probe = probe_for(tiny("olmo3"))
    long_stats(probe, [np.asarray(ids[0, :256])], queries=16)
    # rows of scores in chunks (archpool.attention.rows) and the distance profile: ~250 MiB at T, linear
    assert peak_growth_mb(lambda: long_stats(probe, [np.asarray(ids[0])], queries=64)) < 2 * CAP_MB  # half a T×T
