"""Encoding throughput of the data stage on this machine: MB/s of UTF-8 text, tokens/s.

    .venv/bin/python -m bench.bench_tokenize [--mb 16] [--vocab 4096]

Reads the first ``--mb`` MB of the default corpus (hash-ranked sample, as ``prepare`` does), trains
the tokenizer once, then times: whole documents with ``encode_batch`` (HF's own thread pool), the
exact pre-token split (``encode_documents``) in one process, and the process pool of ``prepare``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=16)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args(argv)
    from archpool.data.corpus import DefaultCorpus
    from archpool.data.store import _encode, close_workers
    from archpool.tokenizer import train_tokenizer

    docs = sorted((hashlib.sha256(d.text.encode()).digest()[8:16], d.text) for d in DefaultCorpus().documents())
    texts, n = [], 0
    for _, t in docs:
        if n >= args.mb * 1e6:
            break
        texts.append(t)
        n += len(t.encode())
    mb = n / 1e6
    print(f"{len(texts)} documents, {mb:.1f} MB, {os.cpu_count()} CPUs")
    t = time.perf_counter()
    tok = train_tokenizer(texts[: max(1, len(texts) // 2)], args.vocab)
    print(f"train BPE {args.vocab} on {mb / 2:.1f} MB: {time.perf_counter() - t:.1f} s")

    rates: dict[str, dict[str, float]] = {}

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        ntok = sum(len(x) for x in out)
        print(f"{name:<44} {mb / dt:6.2f} MB/s  {ntok / dt / 1e6:5.2f} M tok/s  ({dt:.1f} s)")
        rates[name] = {"mb_per_s": mb / dt, "m_tokens_per_s": ntok / dt / 1e6, "seconds": dt}
        return [list(map(int, x)) for x in out]

    a = timed("encode_batch, whole docs (HF threads)", lambda: tok.encode_batch(texts))
    b = timed("encode_documents, exact split (HF threads)", lambda: tok.encode_documents(texts))
    _encode(tok, texts[:4], 2)  # start the pool outside the timing
    c = timed("process pool x2, exact split (prepare)", lambda: _encode(tok, texts, 2))
    close_workers()
    assert a == b == c, "encodings differ"
    print("all three encodings identical")
    return {"documents": len(texts), "mb": mb, "vocab": args.vocab, "methods": rates}


NAME = "tokenize"
DESCRIPTION = "encoding throughput of the data stage on the embedded corpus: MB/s and tokens/s, three methods"
FULL = ["--mb", "16"]
QUICK = ["--mb", "0.3", "--vocab", "512"]


if __name__ == "__main__":
    main()
