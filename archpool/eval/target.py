"""What ``archpool eval TARGET`` can point at: a run directory, an archpool checkpoint, or a Hugging
Face model directory (transformers model + its tokenizer). Resolves the model, its tokenizer, a
content hash for the cache, and the pretraining context (default lengths are ×1, ×2, ×4, ×8 of it)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError, ConfigError
from archpool.io import sha256_file


@dataclass
class Target:
    kind: str  # run | checkpoint | hf
    path: Path
    checkpoint: Path  # the directory holding the weights
    lm: Any
    tokenizer: Any
    model_hash: str
    tokenizer_hash: str
    pretrain_len: int
    model: Any = None
    record: dict[str, Any] | None = None  # the run record (run targets)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path | None:
        return self.path if self.kind == "run" else None


def find_tokenizer(start: Path, explicit: str | Path | None = None):
    from archpool.data.tokenizer import Tokenizer

    if explicit:
        return Tokenizer.load(explicit)
    p = start.resolve()
    for d in [p, *p.parents][:6]:
        if (d / "tokenizer.json").is_file():
            return Tokenizer.load(d)
    return None


def _weights_hash(directory: Path) -> str:
    manifest = directory / "MANIFEST.json"
    if manifest.is_file():
        try:
            return json.loads(manifest.read_text())["files"]["model.safetensors"]["sha256"]
        except (KeyError, json.JSONDecodeError):
            pass
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{directory}: no *.safetensors weights")
    return "".join(sha256_file(f) for f in files)[:64] if len(files) == 1 else sha256_file(files[0])


def _run_tokenizer(record: dict[str, Any]):
    """The tokenizer of a run's prepared data store, if that store exists here."""
    from archpool.data.section import section_store_path
    from archpool.data.store import Store

    path = section_store_path(record.get("data"))
    if path is None or not (path / "manifest.json").is_file():
        return None
    return Store(path).tokenizer


def load_target(path: str | Path, tokenizer: str | Path | None = None, device: str = "cpu", prefill_chunk: int = 512,
                max_batch: int = 16) -> Target:
    from archpool.eval.lm import lm_from_decoder, lm_from_hf

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run, checkpoint or model directory")
    record = None
    if (path / "run_config.json").is_file():
        from archpool.train.trainer import run_dir_final

        record = json.loads((path / "run_config.json").read_text())
        ckpt_dir, kind = run_dir_final(path), "run"
        if not (ckpt_dir / "config.json").is_file():
            raise CheckpointError(f"{path}: run has no final checkpoint yet ({ckpt_dir})")
    else:
        ckpt_dir, kind = path, None
    cfg_path = ckpt_dir / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{ckpt_dir}: no config.json (expected a run directory, an archpool checkpoint or a HF model directory)")
    from archpool.model.checkpoint import is_archpool_checkpoint

    tok = find_tokenizer(ckpt_dir, tokenizer) or (find_tokenizer(path) if kind == "run" else None)
    if tok is None and record is not None:
        tok = _run_tokenizer(record)
    if is_archpool_checkpoint(ckpt_dir):
        from archpool.model.checkpoint import load_checkpoint

        model = load_checkpoint(ckpt_dir, device=device)
        cfg = model.cfg
        pre = (cfg.extension or {}).get("pretrain_seq_len")
        if pre is None and record is not None:
            pre = (record.get("train") or {}).get("seq_len")
        lm = lm_from_decoder(model, name=path.name, prefill_chunk=prefill_chunk, max_batch=max_batch)
        kind = kind or "checkpoint"
        pretrain_len = int(pre or cfg.max_seq_len)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(ckpt_dir), dtype="float32").to(device)
        hf = model.config
        ours = ckpt_dir / "archpool_config.json"
        pre = None
        if ours.is_file():
            ext = json.loads(ours.read_text()).get("extension") or {}
            pre = ext.get("pretrain_seq_len")
        rope = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
        if isinstance(rope, dict):
            sub = rope.get("full_attention", rope) if isinstance(rope.get("full_attention"), dict) else rope
            pre = pre or sub.get("original_max_position_embeddings")
        if pre is None and ours.is_file():
            pre = json.loads(ours.read_text()).get("max_seq_len")
        pretrain_len = int(pre or hf.max_position_embeddings)
        lm = lm_from_hf(model, name=path.name, prefill_chunk=prefill_chunk, max_batch=max_batch)
        kind = "hf"
    if tok is None:
        raise ConfigError("tokenizer", f"{path}: no tokenizer.json beside the model or in its run; pass --tokenizer")
    return Target(kind, path, ckpt_dir, lm, tok, _weights_hash(ckpt_dir), tok.hash, pretrain_len, model, record)
