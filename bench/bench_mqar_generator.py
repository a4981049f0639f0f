"""MQAR document generation: this checkout's generator against a recorded one (a git revision), side by
side in one process, on the demo's task settings; the documents must be identical.

    .venv/bin/python bench/bench_mqar_generator.py --against c0344f3 --docs 400 --repeats 5

Also times the demo's pretraining stream (80% MQAR, 4,096-token batches at 128) with this checkout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_reference(rev: str):
    """The generator module as it was at ``rev`` (importable on its own: it imports archpool's errors only)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:archpool/tasks/mqar.py"], cwd=REPO, capture_output=True, text=True, check=True
    )
    path = Path(tempfile.mkdtemp()) / f"mqar_{rev}.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location(f"mqar_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ms_per_doc(module, vocab, params, n: int, length: int) -> float:
    t = time.perf_counter()
    for s in range(n):
        module.make_document(random.Random(s), length, vocab, params)
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="c0344f3", help="git revision of the reference generator")
    p.add_argument("--docs", type=int, default=400)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    from archpool.data.store import prepare
    from archpool.pool.spec import load_pool
    from archpool.tasks import dense_params, mqar, task_vocab
    from archpool.train.data_stage import build_stream

    pool = load_pool("demo")
    section = pool.data
    store = prepare(section.data, progress=False, log=lambda *a, **k: None)
    params = dense_params("mqar", section.tasks.params.get("mqar"))
    vocab = task_vocab(store.tokenizer, params)
    ref = load_reference(args.against)
    ref_vocab = vocab  # the generators read the vocabulary's fields only

    same = 0
    for s in range(args.docs):
        for length in (128, 512):
            a = ref.make_document(random.Random(s), length, ref_vocab, params)
            b = mqar.make_document(random.Random(s), length, vocab, params)
            assert a.ids == b.ids and [vars(x) for x in a.answers] == [vars(x) for x in b.answers], (s, length)
            same += 1

    rows = {"reference": [], "current": []}
    for _ in range(args.repeats):  # interleaved: both sides under the same load
        rows["reference"].append(ms_per_doc(ref, ref_vocab, params, args.docs, 128))
        rows["current"].append(ms_per_doc(mqar, vocab, params, args.docs, 128))
    ratios = [r / c for r, c in zip(rows["reference"], rows["current"])]

    stream = build_stream(
        section.with_store(store.path),
        split="pretrain",
        vocab_size=store.tokenizer.vocab_size,
        seq_len=128,
        sequences_per_step=32,
        micro_batch_size=32,
        seed=0,
    )
    stream.next_batch()
    t = time.perf_counter()
    n_batches = 40
    for _ in range(n_batches):
        stream.next_batch()
    batch_ms = (time.perf_counter() - t) / n_batches * 1e3

    out = {
        "against": args.against,
        "identical_documents": same,
        "docs_per_repeat": args.docs,
        "length": 128,
        "ms_per_doc": {k: [round(x, 4) for x in v] for k, v in rows.items()},
        "speedup_median": round(statistics.median(ratios), 3),
        "speedup_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "pretrain_stream_ms_per_4096_token_batch": round(batch_ms, 2),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
