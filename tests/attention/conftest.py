import json
import random

import pytest

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "have",
    "not",
    "model",
    "token",
    "data",
    "stream",
    "context",
    "window",
    "attention",
    "layer",
    "norm",
    "head",
    "query",
    "key",
    "value",
    "long",
    "short",
    "river",
    "mountain",
    "quiet",
    "green",
    "house",
    "light",
    "morning",
    "story",
    "reader",
    "letter",
    "garden",
    "winter",
]


@pytest.fixture(scope="session")
def attn_store(tmp_path_factory):
    """A tiny prepared data store (vocab 300) with held-out short and long documents."""
    from archpool.data.config import DataConfig
    from archpool.data.store import prepare

    root = tmp_path_factory.mktemp("attn_data")
    corpus = root / "corpus"
    corpus.mkdir()
    rng = random.Random(0)
    for i in range(80):
        n = 700 if i % 5 == 0 else rng.randint(60, 150)
        (corpus / f"d{i:03d}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + ".\n")
    cfg = DataConfig(
        sources=[{"kind": "files", "path": str(corpus)}],
        vocab_size=300,
        tokenizer_sample_chars=100_000,
        max_chars=None,
        long_doc_tokens=400,
        holdout_fraction=0.2,
        long_holdout_fraction=0.4,
        cache_dir=str(root / "cache"),
    )
    return prepare(cfg, progress=False, log=lambda *a: None)


@pytest.fixture
def attn_run(attn_store, tmp_path):
    """A run directory as the trainer lays it out: run_config.json + milestones/final (untrained weights)."""
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder

    cfg = ModelConfig(
        vocab_size=attn_store.tokenizer.vocab_size,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        max_seq_len=32,
        swa_pattern=["sliding", "full"],
        window=8,
    )
    run = tmp_path / "runA"
    save_checkpoint(Decoder(cfg, seed=0), run / "milestones" / "final")
    (run / "run_config.json").write_text(
        json.dumps({"kind": "pretrain", "model": cfg.to_dict(), "data": {"store": str(attn_store.path)}})
    )
    return run
