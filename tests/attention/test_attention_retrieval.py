"""Needle construction, greedy decoding with top-1 attention, and head masking."""

import torch

from archpool.attention.capture import DecoderProbe
from archpool.attention.retrieval import DEPTHS, decode_with_top1, make_trials, masked_heads, retrieval_heads
from archpool.model.config import ModelConfig
from archpool.model.model import Decoder


def tiny(**kw):
    return Decoder(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, **kw), seed=5).eval()


def test_trials_plant_the_value_at_each_depth_and_end_with_the_key():
    hay = list(range(10, 60)) * 4
    trials = make_trials(hay, [40, 64], exclude=[0, 1], seed=1)
    assert len(trials) == 2 * len(DEPTHS) and DEPTHS == [0, 11, 22, 33, 44, 56, 67, 78, 89, 100]
    for t in trials:
        lo, hi = t.span
        assert len(t.prompt) == t.length and t.prompt[lo:hi] == t.answer and len(t.answer) == 6
        key = t.prompt[-3:]
        assert t.prompt[lo - 3 : lo] == key and not set(key) & set(t.answer)
    shallow, deep = trials[0], trials[9]
    assert shallow.span[0] == 3 and deep.span[1] == 40 - 3


def test_greedy_decoding_with_the_cache_matches_full_recomputation():
    model = tiny(n_kv_heads=2, swa_pattern=["sliding", "full"], window=6)
    prompt = torch.randint(2, 64, (20,)).tolist()
    gen, top1 = decode_with_top1(DecoderProbe(model), prompt, 4)
    ids = list(prompt)
    for step in range(4):
        with torch.no_grad():
            logits, probs = model.forward_with_attentions(torch.tensor([ids]))
        assert int(logits[0, -1].argmax()) == gen[step]
        assert torch.equal(torch.stack([p[0, :, -1].argmax(-1) for p in probs]), top1[step])
        ids.append(gen[step])


def test_masking_every_head_cuts_the_context_and_masking_is_undone_after():
    model = tiny()
    probe = DecoderProbe(model)
    a, b = torch.randint(2, 64, (1, 16)), torch.randint(2, 64, (1, 16))
    b[0, -1] = a[0, -1]
    with torch.no_grad():
        base = model(a)[0, -1]
        assert not torch.allclose(base, model(b)[0, -1])  # the context matters ...
        with masked_heads(probe, [(layer, h) for layer in range(2) for h in range(4)]):
            assert torch.allclose(model(a)[0, -1], model(b)[0, -1], atol=1e-6)  # ... until every head is masked
        with masked_heads(probe, [(0, 1)]):
            assert not torch.allclose(model(a)[0, -1], base)
        assert torch.equal(model(a)[0, -1], base)


def test_retrieval_heads_reports_shapes_and_the_ablation():
    model = tiny()
    trials = make_trials(list(range(2, 64)) * 3, [32], seed=0)
    r = retrieval_heads(DecoderProbe(model), trials, top_k=3, mask_k=2)
    assert len(r["scores"]) == 2 and len(r["scores"][0]) == 4 and len(r["top"]) == 3
    assert r["ablation"]["k"] == 2 and not set(map(tuple, r["ablation"]["heads_top"])) & set(
        map(tuple, r["ablation"]["heads_random"])
    )
    assert r["n_trials"] == 10 and 0 <= r["accuracy"] <= 1


def test_a_copy_head_scores_one_and_failed_trials_do_not_count(monkeypatch):
    from archpool.attention import retrieval

    trials = make_trials(list(range(2, 64)) * 3, [32], seed=0)
    L, H = 2, 4

    def fake_decode(probe, prompt, steps):
        t = next(t for t in trials if t.prompt == list(prompt))
        top1 = torch.zeros(steps, L, H, dtype=torch.long)
        top1[:, 1, 3] = torch.arange(*t.span)  # head (1, 3) copies the value token by token
        if t.depth == 0:  # one failed trial: the response misses the needle entirely
            return [0] * steps, top1
        return list(t.answer), top1

    monkeypatch.setattr(retrieval, "decode_with_top1", fake_decode)
    r = retrieval_heads(DecoderProbe(tiny()), trials, top_k=2, mask_k=0)
    assert r["n_successful"] == 9 and r["accuracy"] == 0.9
    assert r["scores"][1][3] == 1.0 and r["n_heads_above"] == 1
    assert r["top"][0] == {"layer": 1, "head": 3, "score": 1.0} and "ablation" not in r
