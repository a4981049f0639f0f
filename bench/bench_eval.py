"""Eval bench + tiny-model signal check: evaluation time against training time, and whether a tiny model learns kv_recall.

1. Pretrain a demo-size decoder on CPU at context L0 with a synthetic share (kv_recall training
   documents from the ``train`` seed space) mixed into text, with a minimal loop (this script only).
2. Likelihood-mode kv_recall at L0 x1, x2, x4, x8 before extension; extend (RoPE theta x16, a short
   phase at 4 x L0 with the same mix); evaluate again.
3. Time the default evaluation suite (tiny + ruler + helmet, both modes) of the pretrained model and
   report it as a fraction of its training time.

    .venv/bin/python -m bench.bench_eval --steps 1500 --ext-steps 300 --out bench/results/eval_run
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch


def texts_for_bench(n_docs: int = 400) -> list[str]:
    from archpool.tasks.haystack import pseudo_sentences

    try:
        from archpool.data.corpus import DefaultCorpus, corpus_available

        if corpus_available():
            docs = []
            for d in DefaultCorpus().documents():
                docs.append(d.text)
                if len(docs) >= n_docs:
                    break
            return docs
    except Exception:
        pass
    return [" ".join(pseudo_sentences(random.Random(i), 40)) for i in range(n_docs)]


def make_rows(tok, texts, seq_len, n_rows, share, seed, task_len):
    from archpool.tasks import training_documents

    rng = random.Random(seed)
    n_syn = int(round(share * n_rows))
    syn = training_documents(["kv_recall"], n_syn, seed=seed, length_range=task_len, tokenizer=tok)
    text_ids = []
    for t in texts:
        text_ids += tok.encode(t) + [tok.eos_id]
    rows = []
    for d in syn:
        ids = (tok.encode(d) + [tok.eos_id])[: seq_len + 1]
        rows.append(ids + [tok.pad_id] * (seq_len + 1 - len(ids)))
    while len(rows) < n_rows:
        s = rng.randrange(0, len(text_ids) - seq_len - 1)
        rows.append(text_ids[s : s + seq_len + 1])
    rng.shuffle(rows)
    return torch.tensor(rows)


def train(model, rows, steps, batch, lr, pad_id, log):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    for step in range(steps):
        x = rows[torch.randint(0, len(rows), (batch,), generator=g)]
        inp, tgt = x[:, :-1], x[:, 1:].clone()
        tgt[tgt == pad_id] = -100
        cur = lr * min(1.0, (step + 1) / 50) * max(0.05, 1 - step / steps)
        for grp in opt.param_groups:
            grp["lr"] = cur
        loss = torch.nn.functional.cross_entropy(model(inp).flatten(0, 1), tgt.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 200 == 0 or step == steps - 1:
            log(f"step {step} loss {loss.item():.3f} ({time.perf_counter() - t0:.0f}s)")
    model.eval()
    return time.perf_counter() - t0


def recall_curve(model, tok, lengths, n, seed=7):
    from archpool.eval.lm import lm_from_decoder
    from archpool.eval.runner import run_task

    lm = lm_from_decoder(model)
    out = {}
    for L in lengths:
        r = run_task(lm, tok, "kv_recall", L, ["ll"], n=n, seed=seed)["ll"]
        out[L] = {"acc": r["score"], "chance": r["chance"], "gold_logprob": r["gold_logprob_mean"], "n": r["n"]}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--ext-steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--share", type=float, default=0.6)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--n", type=int, default=100, help="kv_recall samples per length")
    ap.add_argument("--suite-n", type=int, default=5, help="samples per task x length for the timed default suite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/eval_run")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "log.txt", "w")  # noqa: SIM115 - the benchmark's log, open for its whole run

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from archpool.eval.api import EvalRequest, evaluate
    from archpool.eval.lm import lm_from_decoder
    from archpool.eval.target import Target
    from archpool.model import Decoder, ModelConfig
    from archpool.model.config import RopeConfig
    from archpool.tasks import training_documents
    from archpool.tokenizer import train_tokenizer

    L0 = args.ctx
    texts = texts_for_bench()
    tok_corpus = texts[:200] + list(
        training_documents(["kv_recall"], 300, seed=99, length_range=(32, L0), tokenizer=None or _ByteTok())
    )
    tok = train_tokenizer(tok_corpus, 512)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=4, max_seq_len=L0, rope={"theta": 10_000.0})
    torch.manual_seed(args.seed)
    model = Decoder(cfg, seed=args.seed)
    log(f"model {model.num_params() / 1e6:.2f}M params, ctx {L0}, vocab {tok.vocab_size}")
    rows = make_rows(tok, texts, L0, args.steps * args.batch // 4, args.share, args.seed, (24, L0))
    t_train = train(model, rows, args.steps, args.batch, args.lr, tok.pad_id, log)
    tokens = args.steps * args.batch * L0
    log(f"pretrain {t_train:.1f}s, {tokens / 1e6:.2f}M tokens")
    lengths = [L0, 2 * L0, 4 * L0, 8 * L0]
    before = recall_curve(model, tok, lengths, args.n)
    log(f"before extension: {json.dumps(before)}")

    # timed default suite on the pretrained model
    target = Target(
        "checkpoint", out, out, lm_from_decoder(model, name="bench"), tok, "bench-" + str(args.seed), tok.hash, L0, model
    )
    t0 = time.perf_counter()
    request = EvalRequest(
        suites=["tiny", "ruler", "helmet"], lengths=lengths, modes=["gen", "ll"], n_samples=args.suite_n, out_dir=out / "suite"
    )
    res = evaluate(target, request, texts=texts[:50], progress=False)
    t_eval = time.perf_counter() - t0
    log(
        f"default suite (tiny+ruler+helmet, gen+ll, {args.suite_n} samples, lengths {lengths}): {t_eval:.1f}s "
        f"= {t_eval / t_train:.2f} x training time"
    )

    # extension: theta x16, 4 x L0, same mix
    ext_len = 4 * L0
    model.set_rope(RopeConfig(theta=cfg.rope.theta * 16))
    ext_rows = make_rows(tok, texts, ext_len, args.ext_steps * 8, args.share, args.seed + 1, (24, ext_len))
    t_ext = train(model, ext_rows, args.ext_steps, max(4, args.batch // 4), args.lr / 3, tok.pad_id, log)
    after = recall_curve(model, tok, lengths, args.n)
    log(f"extension {t_ext:.1f}s; after extension: {json.dumps(after)}")
    summary = {
        "args": vars(args),
        "params": model.num_params(),
        "train_s": t_train,
        "ext_s": t_ext,
        "eval_suite_s": t_eval,
        "eval_fraction_of_training": t_eval / t_train,
        "before": before,
        "after": after,
        "suite_aggregate": res["aggregate"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    log(json.dumps({k: summary[k] for k in ("train_s", "eval_suite_s", "eval_fraction_of_training")}))
    logf.close()
    return summary


class _ByteTok:
    """Stand-in for tokenizer-aware vocab choice before the BPE exists (all candidates allowed)."""

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(ids).decode(errors="replace")


NAME = "eval"
DESCRIPTION = "evaluation time of the default suite against training time, and a tiny model's kv_recall signal"
FULL = ["--steps", "1500", "--ext-steps", "300", "--n", "100", "--suite-n", "5"]
QUICK = ["--steps", "4", "--ext-steps", "2", "--batch", "4", "--n", "2", "--suite-n", "1"]


def run(quick: bool) -> dict:
    """The benchmark's run directory (log, suite results) goes to a temporary directory."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return main([*(QUICK if quick else FULL), "--out", tmp])


if __name__ == "__main__":
    main()
