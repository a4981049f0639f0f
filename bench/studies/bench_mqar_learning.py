"""How fast a tiny decoder learns MQAR, by binding format: two-token ``k v`` bindings vs composite
``[k=v]`` tokens (docs/tiny-scale.md: the demo's baseline must master retrieval before anything is compared).

Pure MQAR sequences (no text), loss on the answers only, AdamW (0.9, 0.95, wd 0.1), warmup + cosine;
accuracy = argmax over the vocabulary at every answer of 64 held-out documents, every ``--every``
steps, overall and beyond half the context. One JSON line per evaluation.

    python -m bench.studies.bench_mqar_learning --format composite --steps 300
    python -m bench.studies.bench_mqar_learning --format tokens --steps 1500 --seq-len 64
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--format", choices=("tokens", "composite"), default="composite")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--init-std", type=float, default=0.08)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--pair-every", type=int, default=8)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)

    import torch

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder
    from archpool.tasks.mqar import MqarConfig, TaskVocab, make_document

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.format == "composite":  # 32 keys x 8 values, as the demo
        vocab = TaskVocab.composite_from_ids(list(range(600, 969)), list(range(100, 228)), n_keys=32, n_values=8)
        params = MqarConfig(n_keys=32, n_values=8, pair_every=a.pair_every)
    else:  # two-token bindings: 64 keys, 64 values (the two-token format docs/tiny-scale.md describes)
        vocab = TaskVocab.from_ids(list(range(100, 1000)), n_keys=64, n_values=64, n_hops=64, n_filler=128)
        params = MqarConfig(n_keys=64, n_values=64, pair_every=a.pair_every)
    cfg = ModelConfig(
        vocab_size=1024, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads, max_seq_len=a.seq_len, init_std=a.init_std
    )
    model = Decoder(cfg, seed=0)
    step_fn = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    rng = random.Random(1)

    def batch(r: random.Random, n: int, length: int):
        docs = [make_document(r, length, vocab, params) for _ in range(n)]
        x = torch.tensor([d.ids for d in docs])
        y = torch.full_like(x, -100)
        for i, d in enumerate(docs):
            for ans in d.answers:
                if ans.pos + 1 < length:
                    y[i, ans.pos] = ans.gold
        return x, y, docs

    held = batch(random.Random(12345), 64, a.seq_len)

    def evaluate() -> dict:
        x, _, docs = held
        with torch.no_grad():
            top = model(x).argmax(-1)
        rows = [(ans.distance, int(top[i, ans.pos]) == ans.gold) for i, d in enumerate(docs) for ans in d.answers]
        far = [ok for dist, ok in rows if dist > a.seq_len // 2]
        return {
            "acc": round(sum(ok for _, ok in rows) / len(rows), 4),
            "acc_far": round(sum(far) / max(1, len(far)), 4),
            "n": len(rows),
        }

    t0 = time.time()
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y, _ = batch(rng, a.batch, a.seq_len + 1)
        loss = step_fn(x[:, :-1], targets=y[:, :-1]) / (y[:, :-1] != -100).sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % a.every == 0 or step + 1 == a.steps:
            print(
                json.dumps(
                    {
                        "format": a.format,
                        "seq_len": a.seq_len,
                        "step": step + 1,
                        "s": round(time.time() - t0, 1),
                        "loss": round(loss.item(), 4),
                        **evaluate(),
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
