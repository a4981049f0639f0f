"""Tiny trained models for checkpoint-pool tests: two architectures, each pretrained a few steps on a
word corpus and NTK-extended, in archpool format (run directories) and Hugging Face format (exports)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.corpus import SENTENCES, sentence_section
from tests.helpers.train import few_steps

ARCHS = {
    # Llama-style: pre-norm, no QK-norm, GQA, full attention
    "llama": dict(norm="pre", qk_norm="none", n_kv_heads=2, family="llama3"),
    # Olmo 3-style: post-norm, layerwise QK-norm, no GQA, SWA on 3 of 4 layers
    "olmo": dict(norm="post", qk_norm="layerwise", n_kv_heads=4, window=8, swa_pattern="olmo3", family="olmo3"),
}


def train_pair(root: Path, arch: str, steps: int = 40, seq_len: int = 32) -> tuple[Path, Path]:
    """(pretrained run dir, extended run dir) of one architecture, pretrained at ``seq_len`` tokens."""
    from archpool.train.config import ExtensionConfig, RunConfig
    from archpool.train.extend import extend
    from archpool.train.trainer import pretrain

    model = dict(vocab_size=300, d_model=32, n_layers=4, n_heads=4, max_seq_len=seq_len, rope={"theta": 100.0}, **ARCHS[arch])
    cfg = RunConfig.from_dict(
        {
            "model": model,
            "data": sentence_section(root / "data"),
            "train": few_steps(steps, log_every=steps),
        }
    )
    run = root / f"{arch}_run"
    pretrain(cfg, run)
    extend(run, ExtensionConfig.from_dict({"recipe": "ntk", "length": 2 * seq_len, "tokens": 512}), progress=False)
    return run, run / "extend" / "ntk"


def export(run_dir: Path, out: Path, pretrained: bool = False) -> Path:
    """An HF export of a run directory (its tokenizer included), as `archpool export-hf` writes it."""
    from archpool.cli.model import resolve_export_source
    from archpool.model.hf import export_hf

    src = resolve_export_source(run_dir, pretrained=pretrained)
    export_hf(src.checkpoint, out, tokenizer=src.tokenizer)
    return out


def probe_texts() -> list[str]:
    return [" ".join(SENTENCES * 12)]
