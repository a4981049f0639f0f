"""A GGUF file (llama.cpp's format) as a Hugging Face model directory, through transformers' own GGUF loader.

transformers reads a GGUF file's config, dequantizes every tensor (undoing llama.cpp's q/k row permutation)
and converts its tokenizer, but refuses to save the model it loaded. :func:`import_gguf` writes what it
loaded itself: ``model.safetensors`` (float32: every GGUF quantization dequantizes to values float32 holds),
``config.json`` without the GGUF quantization record, ``generation_config.json``, the converted tokenizer's
files and ``gguf_import.json`` (the source file's sha256 and the versions that read it). The result is an
ordinary HF directory every archpool command reads (eval, extend, import-hf, pools). Reading GGUF needs
the ``gguf`` package (``pip install 'archpool[gguf]'``); nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.errors import CheckpointError, ConfigError

GGUF_RECORD = "gguf_import.json"  # the provenance of an imported directory


def require_gguf() -> str:
    """The installed ``gguf`` package's version; ConfigError naming the extra when it is missing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        raise ConfigError("gguf", "reading a GGUF file needs the gguf package: pip install 'archpool[gguf]'") from None


def import_gguf(gguf_file: str | Path, out_dir: str | Path, replace: bool = False) -> Path:
    """The model and tokenizer of ``gguf_file`` as a Hugging Face model directory ``out_dir`` (absent or empty,
    or with ``replace`` an earlier import); see the module docstring. CheckpointError naming the file when
    transformers cannot read it."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from archpool.io import atomic_path, atomic_write_json, fresh_directory, sha256_file

    gguf_version = require_gguf()
    path = Path(gguf_file)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    _check_out(Path(out_dir), replace)  # before the (long) load: fresh_directory checks it again when writing
    where = dict(gguf_file=path.name, local_files_only=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **where)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **where)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, NotImplementedError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path}: transformers cannot read this GGUF file ({type(e).__name__}: {first})") from None
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are written dequantized
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items() if "rotary_emb" not in k}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # one storage: transformers ties it again when loading
    config.dtype = "float32"
    record: dict[str, Any] = {
        "source": str(path.resolve()),
        "source_sha256": sha256_file(path),
        "source_bytes": path.stat().st_size,
        "model_type": config.model_type,
        "transformers": transformers.__version__,
        "gguf": gguf_version,
    }
    with fresh_directory(out_dir, replace=replace, replaceable=_replaceable) as tmp:
        with atomic_path(tmp / "model.safetensors") as t:
            save_file(state, str(t), metadata={"format": "pt", "gguf_source_sha256": record["source_sha256"]})
        config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        atomic_write_json(tmp / GGUF_RECORD, record)
    return Path(out_dir)


def _check_out(out: Path, replace: bool) -> None:
    """StateError unless ``out`` is absent, empty, or (with ``replace``) an earlier GGUF import."""
    from archpool.errors import StateError

    if out.is_dir() and any(out.iterdir()):
        why = "the output directory is not empty; pass --replace to replace it whole" if not replace else _replaceable(out)
        if why:
            raise StateError(f"{out}: {why}; choose a new directory" if replace else f"{out}: {why}, or choose a new directory")


def _replaceable(directory: Path) -> str | None:
    """Why ``directory`` is not an earlier GGUF import (None when it is one)."""
    return None if (directory / GGUF_RECORD).is_file() else f"it is not a GGUF import (no {GGUF_RECORD})"
