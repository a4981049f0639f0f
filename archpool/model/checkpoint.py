"""Model checkpoints: ``config.json`` (the ModelConfig) + ``model.safetensors`` in one directory.

Weights are safetensors only; nothing here unpickles. Writes are atomic per file and the config is
written last, so a directory with a config always has complete weights beside it.

Integrity: a training checkpoint also has ``MANIFEST.json`` (size and sha256 of every file). Readers call
``verify_checkpoint`` before use: with a manifest, each file read is checked against it (size, then a
streaming sha256); without one, the weights' bytes are hashed directly. Either way the returned sha256 is
of the bytes on disk, so caches keyed by it never serve results computed from other bytes. A file is hashed
once per process until its size or modification time changes (``archpool.io.sha256_cached``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from archpool.errors import CheckpointError, ConfigError
from archpool.io import atomic_path, atomic_write_json, sha256_cached
from archpool.model.config import ModelConfig
from archpool.rundir import CONFIG_NAME, FORMAT_KEY
from archpool.rundir import is_archpool_checkpoint as is_archpool_checkpoint  # the checkpoint format's test
from archpool.safeload import read_json_object

if TYPE_CHECKING:  # torch is imported where weights are read or written: reading a config stays cheap
    import torch

    from archpool.model.model import Decoder

WEIGHTS_NAME = "model.safetensors"
MANIFEST_NAME = "MANIFEST.json"


def save_state_dict(
    state: dict[str, torch.Tensor], cfg: ModelConfig, directory: str | Path, metadata: dict | None = None
) -> Path:
    """Write weights (without the tied output matrix: safetensors refuses shared storage), then the config."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if cfg.tie_embeddings:
        state.pop("lm_head.weight", None)
    from safetensors.torch import save_file

    with atomic_path(directory / WEIGHTS_NAME) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    atomic_write_json(directory / CONFIG_NAME, {FORMAT_KEY: 1, "model": cfg.to_dict(), "metadata": metadata or {}})
    return directory


def save_checkpoint(model: Decoder, directory: str | Path, metadata: dict | None = None) -> Path:
    return save_state_dict(model.state_dict(), model.cfg, directory, metadata)


def read_manifest(directory: str | Path) -> dict[str, dict] | None:
    """The ``files`` table of ``directory/MANIFEST.json`` (None without one); CheckpointError if malformed."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        files = read_json_object(path).get("files")
    except ConfigError as e:
        raise CheckpointError(f"{e.field}: unreadable manifest ({e.message})") from None
    if not isinstance(files, dict) or not all(
        isinstance(info, dict) and isinstance(info.get("bytes"), int) and isinstance(info.get("sha256"), str)
        for info in files.values()
    ):
        raise CheckpointError(f"{path}: unreadable manifest (each file needs 'bytes' and 'sha256')")
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise CheckpointError(f"{path}: unreadable manifest (entry {name!r} is not a file name in the checkpoint)")
    return files


def verify_files(directory: str | Path, names: Iterable[str] | None = None, check_hashes: bool = True) -> dict[str, str]:
    """``{name: sha256}`` of ``names`` (default: every manifest entry), each checked against
    ``MANIFEST.json`` when there is one: present, same size, then the same streaming sha256. Without a
    manifest, the named files' bytes are hashed as they are. CheckpointError names the first bad file.
    ``check_hashes=False`` checks presence and sizes only (the returned dict is then empty)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if names is None:
        if manifest is None:
            raise CheckpointError(f"{directory}: incomplete checkpoint (no {MANIFEST_NAME}; it is written last)")
        names = list(manifest)
    hashes: dict[str, str] = {}
    for name in names:
        path = directory / name
        if path.is_symlink():
            raise CheckpointError(f"{path}: a symbolic link in a checkpoint; archpool checkpoints hold regular files only")
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from checkpoint")
        if manifest is not None:
            if name not in manifest:
                raise CheckpointError(f"{path}: not listed in {directory / MANIFEST_NAME}; cannot verify it")
            info, size = manifest[name], path.stat().st_size
            if size != info["bytes"]:
                raise CheckpointError(f"{path}: truncated or altered ({size} bytes, manifest says {info['bytes']})")
        if check_hashes:
            hashes[name] = sha256_cached(path)
            if manifest is not None and hashes[name] != manifest[name]["sha256"]:
                raise CheckpointError(f"{path}: corrupt (sha256 does not match the manifest)")
    return hashes


def verify_checkpoint(directory: str | Path) -> dict[str, str]:
    """Verified ``{name: sha256}`` of an archpool checkpoint's config.json and model.safetensors (see ``verify_files``)."""
    return verify_files(directory, (CONFIG_NAME, WEIGHTS_NAME))


def load_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / CONFIG_NAME
    try:
        data = read_json_object(path)
    except ConfigError as e:
        raise CheckpointError(f"{e.field}: cannot read archpool config ({e.message})") from None
    if FORMAT_KEY not in data:
        raise CheckpointError(f"{path}: not an archpool checkpoint config (no {FORMAT_KEY!r})")
    if not isinstance(data.get("model"), dict):
        raise CheckpointError(f"{path}: invalid archpool config (no 'model' mapping)")
    try:
        return ModelConfig.from_dict(data["model"])
    except ConfigError as e:
        raise CheckpointError(f"{path}: invalid model config: {e}") from None
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: invalid model config ({type(e).__name__}: {e})") from None


def check_state(
    model: torch.nn.Module,
    state: dict[str, torch.Tensor],
    where: str | Path,
    tied: bool = False,
    names: dict[str, str] | None = None,
) -> None:
    """CheckpointError naming ``where`` and the first tensor that is missing, unexpected or of the wrong
    shape (``names``: how to call our parameter names in the message, e.g. their transformers names)."""
    expected = {k: v for k, v in model.state_dict().items() if not k.startswith("inv_freq")}
    show = lambda k: (names or {}).get(k, k)
    missing = [show(k) for k in expected if k not in state and not (tied and k == "lm_head.weight")]
    unexpected = [show(k) for k in state if k not in expected]
    if missing or unexpected:
        raise CheckpointError(f"{where}: weights do not match the config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"{where}: tensor {show(name)!r} has shape {tuple(tensor.shape)}, the config needs {tuple(expected[name].shape)}"
            )
        if expected[name].is_floating_point() and not tensor.is_floating_point():
            raise CheckpointError(f"{where}: tensor {show(name)!r} has dtype {tensor.dtype}; weights are floating point")


def load_safetensors(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; CheckpointError naming it when it is missing, truncated
    or its header is damaged (a bad length, not JSON, a dtype or shape that does not fit the bytes)."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=str(device))
    except Exception as e:  # safetensors raises several types (SafetensorError, OSError, ValueError, ...)
        raise CheckpointError(f"{path}: unreadable or truncated safetensors file ({' '.join(str(e).split())})") from None


def safetensors_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` from the header of the safetensors file ``path`` (no tensor is read);
    CheckpointError naming it when the file is missing, truncated or its header is damaged."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: tuple(int(s) for s in f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - not a mapping
    except Exception as e:  # safetensors raises several types (SafetensorError, OSError, ValueError, ...)
        raise CheckpointError(f"{path}: unreadable or truncated safetensors file ({' '.join(str(e).split())})") from None


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu", *, verify: bool = True) -> Decoder:
    """Our Decoder from a checkpoint directory, its files verified first (``verify=False``: the caller
    already ran ``verify_checkpoint`` and holds the hashes)."""
    from archpool.model.model import Decoder

    directory = Path(directory)
    if verify and (directory / MANIFEST_NAME).is_file():  # without a manifest there is nothing to compare with
        verify_checkpoint(directory)
    cfg = load_config(directory)
    weights = directory / WEIGHTS_NAME
    state = load_safetensors(weights, device)
    model = Decoder(cfg)
    check_state(model, state, weights, tied=cfg.tie_embeddings)
    model.load_state_dict(state, strict=False)
    return model.to(device)
