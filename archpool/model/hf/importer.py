"""Reading a transformers model directory into archpool's Decoder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.errors import CheckpointError, ConfigError
from archpool.model.hf.config import (
    ARCHPOOL_CONFIG_NAME,
    FAMILIES,
    IMPORTABLE,
    check_hf_sizes,
    hf_config_to_archpool,
    read_hf_config,
)
from archpool.model.hf.weights import INDEX_NAME, check_weight_values, hf_state_to_archpool, weight_files, weights_sha256
from archpool.safeload import read_json_file

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedConfig

    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder


def _read_safetensors(files: list[Path]) -> dict[str, torch.Tensor]:
    from archpool.model.checkpoint import load_safetensors

    state: dict[str, Any] = {}
    for f in files:
        state.update(load_safetensors(f))
    return state


def import_hf(hf_dir: str | Path) -> Decoder:
    """Our Decoder from a transformers model directory (config.json + safetensors), no network. Every
    refusal is a CheckpointError / ConfigError naming the file or field: bad JSON, custom code, an
    unimportable family, head counts, missing / pickle / truncated weights, shapes that do not match."""
    hf_dir = Path(hf_dir)
    hf_config, _ = read_hf_model_config(hf_dir)
    files = weight_files(hf_dir)
    where = files[0] if len(files) == 1 else hf_dir / INDEX_NAME
    state = _read_safetensors(files)
    check_weight_values(state, str(where))
    model = hf_state_to_archpool(hf_config, state, where=str(where))
    provenance = hf_dir / ARCHPOOL_CONFIG_NAME
    if provenance.is_file():  # our own export: keep bookkeeping the HF config cannot carry
        try:
            ours = read_json_file(provenance)
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
        for key in ("family", "extension"):
            if isinstance(ours, dict) and ours.get(key) is not None:
                setattr(model.cfg, key, ours[key])
    return model


def read_hf_model_config(hf_dir: str | Path) -> tuple[PreTrainedConfig, ModelConfig]:
    """The transformers config of an HF model directory and archpool's ``ModelConfig`` of the same model,
    read as :func:`import_hf` reads them (its weights' presence checked, and their bytes against a
    MANIFEST.json when there is one; no weight is loaded). The refusals are :func:`import_hf`'s."""
    from transformers import AutoConfig

    hf_dir = Path(hf_dir)
    config_path = hf_dir / "config.json"
    raw = read_hf_config(hf_dir)
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:  # before AutoConfig, whose error for unknown types is less direct
        raise ConfigError("model_type", f"cannot import model type {model_type!r}; importable: {', '.join(IMPORTABLE)}")
    check_hf_sizes(raw, str(config_path))
    files = weight_files(hf_dir)
    if (hf_dir / "MANIFEST.json").is_file():
        weights_sha256(hf_dir, files)
    try:
        hf_config = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as e:
        raise ConfigError(str(config_path), f"transformers cannot read this config ({type(e).__name__}: {e})") from None
    try:
        from archpool.model.features import check_head_counts

        check_head_counts(
            int(hf_config.num_attention_heads),
            int(getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads),
        )
        cfg = hf_config_to_archpool(hf_config)
    except ConfigError as e:
        raise ConfigError(str(config_path), str(e)) from None
    except (TypeError, ValueError) as e:
        raise ConfigError(str(config_path), f"invalid config value ({e})") from None
    return hf_config, cfg


def replaceable_import(directory: Path) -> str | None:
    """Why ``directory`` is not an earlier ``import-hf`` output that ``import-hf --replace`` may replace (None
    when it is one: an archpool checkpoint whose config records ``imported_from``). A trained run's
    checkpoint, or any other directory, is never replaced by an import."""
    from archpool.rundir import CONFIG_NAME, is_archpool_checkpoint

    if not is_archpool_checkpoint(directory):
        return "it is not an archpool checkpoint that import-hf wrote"
    try:
        recorded = read_json_file(Path(directory) / CONFIG_NAME).get("metadata")
    except (ConfigError, AttributeError):
        recorded = None
    if not (isinstance(recorded, dict) and recorded.get("imported_from")):
        return "it is an archpool checkpoint that import-hf did not write (a trained model's weights)"
    return None
