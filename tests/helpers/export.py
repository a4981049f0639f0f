"""A tiny trained run for the export tests: an Olmo 3-style model (post-norm, layerwise QK-norm, GQA, SWA on
3 of 4 layers) pretrained a few steps on a prepared word corpus (so its tokenizer lives in the data store,
not beside the checkpoint), then extended with NTK to 2x its context."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.corpus import sentence_section
from tests.helpers.train import few_steps


def train_run(root: Path, steps: int = 60, ext_tokens: int = 1024) -> Path:
    """RUN/ (pretrained at 32 tokens) with RUN/extend/ntk/ (NTK to 64 tokens); returns RUN."""
    from archpool.train.config import ExtensionConfig, RunConfig
    from archpool.train.extend import extend
    from archpool.train.trainer import pretrain

    cfg = RunConfig.from_dict(
        {
            "model": {
                "vocab_size": 300,
                "d_model": 32,
                "n_layers": 4,
                "n_heads": 4,
                "n_kv_heads": 2,
                "max_seq_len": 32,
                "norm": "post",
                "qk_norm": "layerwise",
                "window": 8,
                "swa_pattern": "olmo3",
                "family": "olmo3",
            },
            "data": sentence_section(root),
            "train": few_steps(steps, log_every=1),
        }
    )
    run = root / "run"
    pretrain(cfg, run)
    extend(run, ExtensionConfig.from_dict({"recipe": "ntk", "length": 64, "tokens": ext_tokens}), progress=False)
    return run


def edit_config(d: Path, **changes) -> None:
    """Rewrite ``d/config.json`` with ``changes`` applied."""
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
