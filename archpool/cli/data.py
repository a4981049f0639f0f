"""``archpool data prepare CONFIG`` and ``archpool data inspect STORE``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("data", help="prepare and inspect the tokenised data store")
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    prep = sub.add_parser("prepare", help="train/load the tokenizer and build the store (idempotent)")
    prep.add_argument("config", help="data or pool config (YAML/JSON), or a preset name: demo, full")
    prep.add_argument("--force", action="store_true", help="rebuild even if a store with the same inputs exists")
    prep.add_argument("--no-progress", action="store_true")
    prep.add_argument("--cache", help="cache root (default $ARCHPOOL_CACHE or ~/.cache/archpool)")
    prep.set_defaults(func=prepare_handler)
    ins = sub.add_parser("inspect", help="documents, tokens, length histogram and a decoded sample of a store")
    ins.add_argument("store", help="a store directory, or the config / preset it was prepared from")
    ins.add_argument(
        "--context", type=int, help="pretraining context for the long-document counts (default: the config's reference_context)"
    )
    ins.add_argument("--sample-tokens", type=int, default=120)
    ins.add_argument("--json", action="store_true", help="print the summary as JSON")
    ins.add_argument("--cache", help="cache root when STORE is a config")
    ins.set_defaults(func=inspect_handler)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _config(spec: str, cache: str | None):
    from archpool.data.config import DataConfig

    cfg = DataConfig.preset(spec) if spec in ("demo", "full") and not Path(spec).exists() else DataConfig.load(spec)
    if cache:
        cfg.cache_dir = cache
    return cfg


def prepare_handler(args: argparse.Namespace) -> int:
    from archpool.data.store import close_workers, prepare

    cfg = _config(args.config, args.cache)
    try:
        store = prepare(cfg, progress=not args.no_progress, force=args.force)
    finally:
        close_workers()
    c, t = store.manifest["counts"], store.manifest["timing"]
    print(f"store: {store.path}")
    print(f"tokenizer: {store.tokenizer_hash} (vocab {store.manifest['vocab_size']})")
    print(
        f"documents: {c['docs']}, tokens: {c['tokens']:,}; encoded at {t['encode_MB_per_s']} MB/s, prepared in {t['total_s']} s"
    )
    return 0


def summarize(store, context: int | None = None, sample_tokens: int = 120) -> dict:
    """What ``inspect`` prints, as a dict."""
    import numpy as np

    from archpool.data.store import SPLITS

    m = store.manifest
    ctx = context or m["config"].get("reference_context", 256)
    lengths = store.lengths
    parents = np.bincount(store.index["parent"], weights=lengths).astype(np.int64)
    bins = [0] + [2**k for k in range(5, 21)] + [np.inf]
    hist, _ = np.histogram(lengths, bins=bins)
    histogram = [
        {"min": int(bins[i]), "max": (None if np.isinf(bins[i + 1]) else int(bins[i + 1])), "docs": int(h)}
        for i, h in enumerate(hist)
        if h
    ]
    train = store.docs("train")
    sample = ""
    if len(train):
        i = int(train[np.argmax(lengths[train] > 0)])
        sample = store.tokenizer.decode(store.doc(i)[:sample_tokens])
    return {
        "store": str(store.path),
        "sources": [
            {k: s.get(k) for k in ("name", "kind", "route", "packages", "n_documents")} | {"files": len(s["files"])}
            for s in m["sources"]
        ],
        "tokenizer_hash": m["tokenizer_hash"],
        "vocab_size": m["vocab_size"],
        "dtype": m["dtype"],
        "documents": len(lengths),
        "tokens": int(lengths.sum()),
        "text_MB": round(m["counts"].get("text_bytes", 0) / 1e6, 2),
        "splits": {name: m["counts"][name] for name in SPLITS},
        "context": ctx,
        "docs_over_4x_context": int((lengths > 4 * ctx).sum()),
        "docs_over_16x_context": int((lengths > 16 * ctx).sum()),
        "source_docs_over_4x_context": int((parents > 4 * ctx).sum()),
        "source_docs_over_16x_context": int((parents > 16 * ctx).sum()),
        "longest_doc_tokens": int(lengths.max()) if len(lengths) else 0,
        "length_histogram": histogram,
        "timing": m.get("timing", {}),
        "sample": sample,
    }


def inspect_handler(args: argparse.Namespace) -> int:
    from archpool.data.store import Store, store_path

    p = Path(args.store)
    if p.is_dir():
        store = Store(p)
    else:
        store = Store(store_path(_config(args.store, args.cache)))
    s = summarize(store, args.context, args.sample_tokens)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"store      {s['store']}")
    for src in s["sources"]:
        extra = f" route={src['route']}" if src.get("route") else ""
        print(f"source     {src['name']}{extra}: {src['n_documents']} documents from {src['files']} files")
        if src.get("packages"):
            print("           " + ", ".join(f"{k} {v}" for k, v in src["packages"].items()))
    print(f"tokenizer  {s['tokenizer_hash']} (vocab {s['vocab_size']}, stored as {s['dtype']})")
    print(f"size       {s['documents']:,} documents, {s['tokens']:,} tokens, {s['text_MB']} MB of text")
    for name, c in s["splits"].items():
        print(f"  {name:<10} {c['docs']:>7,} docs {c['tokens']:>13,} tokens")
    ctx = s["context"]
    print(
        f"long docs  > 4x context ({4 * ctx}): {s['docs_over_4x_context']:,}   > 16x context ({16 * ctx}): {s['docs_over_16x_context']:,}"
        f"   (source documents before splitting: {s['source_docs_over_4x_context']:,} / {s['source_docs_over_16x_context']:,}); longest {s['longest_doc_tokens']:,}"
    )
    print("length histogram (tokens per document)")
    peak = max(h["docs"] for h in s["length_histogram"]) if s["length_histogram"] else 1
    for h in s["length_histogram"]:
        hi = "inf" if h["max"] is None else h["max"]
        print(f"  [{h['min']:>7}, {hi:>7})  {h['docs']:>6}  {'#' * max(1, round(40 * h['docs'] / peak))}")
    if s["timing"]:
        t = s["timing"]
        print(f"prepared   in {t.get('total_s')} s; encoding {t.get('encode_MB_per_s')} MB/s on {t.get('cpus')} CPUs")
    print("sample (decoded):")
    print("  " + s["sample"].replace("\n", "\n  "))
    return 0
