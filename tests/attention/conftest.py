"""Fixtures of the attention tests: a prepared word corpus and an untrained run directory over it."""

import json

import pytest

from tests.helpers.corpus import WORDS, data_section, random_docs, write_docs


@pytest.fixture(scope="session")
def attn_store(tmp_path_factory):
    """A tiny prepared data store (vocab 300) with held-out short and long documents."""
    from archpool.data.config import DataConfig
    from archpool.data.store import prepare

    root = tmp_path_factory.mktemp("attn_data")
    docs = random_docs(80, WORDS, (60, 150), long_every=5, long_length=700)
    corpus = write_docs(root / "corpus", [d.capitalize() + "." for d in docs], name="d{:03d}.txt")
    section = data_section(corpus, root / "cache", long_doc_tokens=400, holdout_fraction=0.2, long_holdout_fraction=0.4)
    cfg = DataConfig(**section)
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
