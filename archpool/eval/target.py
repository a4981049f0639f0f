"""What ``archpool eval TARGET`` can point at: a run directory, an archpool checkpoint, or a Hugging
Face model directory (transformers model + its tokenizer). Resolves the model, its tokenizer, a
content hash for the cache, and the pretraining context (default lengths are ×1, ×2, ×4, ×8 of it).

The model hash (in every eval cache key) is the whole model's (:func:`archpool.eval.hfdir.model_sha256`): the
sha256 of the weights' bytes on disk, computed once while verifying them against the checkpoint's
MANIFEST.json (a corrupt file is a CheckpointError naming it), never a hash merely read from the manifest,
with the config (RoPE, context, attention settings), the generation settings and the tokenizer files
beside them: a config-only change is another model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError, ConfigError
from archpool.rundir import Target, resolve_target
from archpool.safeload import read_json_object


@dataclass
class LoadedModel:
    """A resolved ``archpool.rundir.Target`` loaded for evaluation: its scoring backend, tokenizer,
    content hashes (the cache keys) and pretraining context."""

    target: Target
    lm: Any
    tokenizer: Any
    model_hash: str
    tokenizer_hash: str
    pretrain_len: int
    model: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    weights_hash: str = ""  # the verified sha256 of the weights alone (of the one file, or of the shards' hashes)

    @property
    def kind(self) -> str:
        return self.target.kind

    @property
    def path(self) -> Path:
        return self.target.path

    @property
    def checkpoint(self) -> Path:
        return self.target.checkpoint

    @property
    def run_dir(self) -> Path | None:
        """The run directory of a run target (a checkpoint's own run is not consulted)."""
        return self.target.run_dir if self.kind == "run" else None

    @property
    def record(self) -> dict[str, Any] | None:
        """The run record of a run target."""
        rec = self.target.record if self.kind == "run" else None
        return None if rec is None else rec.raw


def find_tokenizer(start: Path, explicit: str | Path | None = None):
    from archpool.tokenizer import Tokenizer

    if explicit:
        return Tokenizer.load(explicit)
    p = start.resolve()
    for d in [p, *p.parents][:6]:
        if (d / "tokenizer.json").is_file():
            return Tokenizer.load(d)
    return None


def _run_tokenizer(record: dict[str, Any]):
    """The tokenizer of a run's prepared data store, if that store exists here."""
    from archpool.data.section import section_store_path
    from archpool.data.store import Store

    path = section_store_path(record.get("data"))
    if path is None or not (path / "manifest.json").is_file():
        return None
    return Store(path).tokenizer


def load_target(
    path: str | Path, tokenizer: str | Path | None = None, device: str = "cpu", prefill_chunk: int = 512, max_batch: int = 16
) -> LoadedModel:
    from archpool.eval.lm import lm_from_decoder, lm_from_hf
    from archpool.io import sha256_json
    from archpool.model.hf import model_file_hashes

    found = resolve_target(path)  # a run directory is evaluated at its final checkpoint
    path, ckpt_dir, kind = found.path, found.checkpoint, found.kind
    run = found.record if kind == "run" else None  # a checkpoint's own run is not consulted
    tok = find_tokenizer(ckpt_dir, tokenizer) or (find_tokenizer(path) if kind == "run" else None)
    if tok is None and run is not None:
        tok = _run_tokenizer(run.raw)
    files = model_file_hashes(ckpt_dir)  # verified, once: the loaders below do not hash again
    model_hash = sha256_json(files)
    if kind != "hf":
        from archpool.model.checkpoint import WEIGHTS_NAME, load_checkpoint

        weights_hash = files[WEIGHTS_NAME]
        model = load_checkpoint(ckpt_dir, device=device, verify=False)
        cfg = model.cfg
        vocab = cfg.vocab_size
        pre = (cfg.extension or {}).get("pretrain_seq_len")
        if pre is None and run is not None:
            pre = run.train_seq_len
        lm = lm_from_decoder(model, name=path.name, prefill_chunk=prefill_chunk, max_batch=max_batch)
        pretrain_len = int(pre or cfg.max_seq_len)
    else:
        from archpool.model.hf import weight_files

        shards = [f.name for f in weight_files(ckpt_dir)]
        weights_hash = files[shards[0]] if len(shards) == 1 else sha256_json({n: files[n] for n in shards})
        model = _load_hf(ckpt_dir, device)
        hf = model.config
        vocab = int(hf.vocab_size)
        pre, recorded_len = export_lengths(ckpt_dir / "archpool_config.json")
        rope = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
        if isinstance(rope, dict):
            sub = rope.get("full_attention", rope) if isinstance(rope.get("full_attention"), dict) else rope
            pre = pre or sub.get("original_max_position_embeddings")
        pre = pre or recorded_len
        pretrain_len = int(pre or hf.max_position_embeddings)
        lm = lm_from_hf(model, name=path.name, prefill_chunk=prefill_chunk, max_batch=max_batch)
    if tok is None:
        raise ConfigError("tokenizer", f"{path}: no tokenizer.json beside the model or in its run; pass --tokenizer")
    check_vocab(tok, vocab, path)
    return LoadedModel(found, lm, tok, model_hash, tok.hash, pretrain_len, model, weights_hash=weights_hash)


def export_lengths(path: Path) -> tuple[int | None, int | None]:
    """The pretraining context (``extension.pretrain_seq_len``) and context (``max_seq_len``) an HF
    export's ``archpool_config.json`` records, None where absent or without the file; ConfigError
    naming the file when it is damaged or a length is not a positive integer."""
    if not path.is_file():
        return None, None
    ours = read_json_object(path)
    ext = ours.get("extension") if isinstance(ours.get("extension"), dict) else {}
    pre = _positive_int(ext.get("pretrain_seq_len"), path, "extension.pretrain_seq_len")
    return pre, _positive_int(ours.get("max_seq_len"), path, "max_seq_len")


def _positive_int(value: Any, path: Path, field: str) -> int | None:
    """``value`` (a field of ``path``) when it is a positive integer, None when absent; ConfigError otherwise."""
    if value is None:
        return None
    if type(value) is not int or value <= 0:
        raise ConfigError(f"{path}: {field}", f"a positive integer expected, got {value!r}")
    return value


def check_vocab(tokenizer, vocab_size: int, where: Path) -> None:
    """ConfigError when the tokenizer can emit ids the model has no embedding for."""
    if tokenizer.vocab_size > vocab_size:
        raise ConfigError(
            "tokenizer",
            f"{where}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary is {vocab_size}; pass the tokenizer the model was trained with (--tokenizer)",
        )


def _load_hf(ckpt_dir: Path, device: str):
    """The transformers model of an HF directory; missing or mis-shaped weights are a CheckpointError."""
    from transformers import AutoModelForCausalLM

    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(ckpt_dir), dtype="float32", output_loading_info=True, local_files_only=True
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"{ckpt_dir}: transformers cannot load this model ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from None
    bad = {k: list(v)[:3] for k, v in info.items() if k in ("missing_keys", "mismatched_keys") and v}
    if bad:
        raise CheckpointError(f"{ckpt_dir}: weights do not match config.json ({bad})")
    return model.to(device)
