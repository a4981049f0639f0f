"""Writing archpool's Decoder as a transformers model directory: weights, configs, provenance and tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool.errors import CheckpointError, ConfigError
from archpool.model.hf.card import model_card
from archpool.model.hf.config import ARCHPOOL_CONFIG_NAME, hf_family_for, to_hf_config
from archpool.model.hf.weights import name_map, save_safetensors
from archpool.safeload import read_json_object, read_text_bounded

if TYPE_CHECKING:  # pragma: no cover
    from archpool.model.config import ModelConfig
    from archpool.model.model import Decoder


class TokenizerNotFoundError(CheckpointError):
    """An export whose tokenizer cannot be found: an HF directory without one is unusable, so we refuse."""


def export_hf(
    model_or_checkpoint: Decoder | str | Path,
    out_dir: str | Path,
    tokenizer: Any = None,
    require_tokenizer: bool | None = None,
    provenance: dict[str, str] | None = None,
    replace: bool = False,
) -> Path:
    """Write a directory ``AutoModelForCausalLM.from_pretrained`` + ``AutoTokenizer`` load with the native
    class: config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
    special_tokens_map.json, with BOS/EOS/PAD declared in all of them.

    ``tokenizer``: a tokenizer.json (or a directory holding one) or an archpool ``Tokenizer``; by default the
    one in or next to a checkpoint directory. ``require_tokenizer`` (default: true for a checkpoint path,
    false for an in-memory model) raises :class:`TokenizerNotFoundError` when there is none, instead of
    writing weights no client can use. A run's tokenizer lives in its data store, which the model layer
    does not read: ``archpool export-hf RUN OUT`` (:func:`archpool.cli.model.resolve_export_source`) finds it
    and passes it here.

    Provenance: model.safetensors' metadata holds the archpool version and commit, the sha256 of the model
    config, the source checkpoint and its training stage/step/tokens, plus ``provenance`` (e.g. the source
    run); README.md is a model card saying the same in words. A chat template and the special tokens of
    the tokenizer's HF files (tokenizer_config.json, chat_template.jinja: an imported model's) are kept.

    ``out_dir`` is absent or empty, or with ``replace`` an earlier export (:func:`replaceable_export`); the
    export is written to a directory beside it that then takes its place whole, so no file of an older
    export stays and no link in it is written through (``archpool.io.fresh_directory``)."""

    from archpool.io import atomic_path, atomic_write_json, atomic_write_text, fresh_directory, require_distinct
    from archpool.model.checkpoint import load_checkpoint

    source_dir = None
    if isinstance(model_or_checkpoint, (str, Path)):
        source_dir = Path(model_or_checkpoint)
        require_distinct(source_dir, out_dir, "export directory")
        model = load_checkpoint(source_dir)
    else:
        model = model_or_checkpoint
    hf_family_for(model.cfg)  # an architecture no transformers class computes fails first, naming the feature
    if require_tokenizer is None:
        require_tokenizer = source_dir is not None
    if tokenizer is None:
        tokenizer = _find_tokenizer(source_dir)
    if tokenizer is None and require_tokenizer:
        looked = f" (looked in {source_dir} and {source_dir.parent})" if source_dir is not None else ""
        raise TokenizerNotFoundError(
            f"export: no tokenizer.json for the model{looked}; an export without its "
            "tokenizer is unusable by HF clients: pass --tokenizer / tokenizer=, or export "
            "the run directory (archpool export-hf RUN_DIR OUT finds the run's data store)"
        )
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    special = special_tokens(tok) if tok is not None else {}
    cfg = model.cfg
    hf_config = to_hf_config(cfg, {k: v[1] for k, v in special.items()})
    names = name_map(cfg)
    state = {}
    for ours, tensor in model.state_dict().items():
        if ours.startswith("inv_freq_"):
            continue
        if ours == "lm_head.weight" and cfg.tie_embeddings:
            continue
        if ours not in names:
            raise CheckpointError(f"export: parameter {ours!r} has no transformers name")
        state[names[ours]] = tensor.detach().to("cpu").contiguous()
    dtype = next(iter(state.values())).dtype
    hf_config.dtype = str(dtype).removeprefix("torch.")
    out_dir = Path(out_dir)
    meta = export_metadata(cfg, source_dir, provenance)
    with fresh_directory(out_dir, replace=replace, replaceable=replaceable_export) as new:
        with atomic_path(new / "model.safetensors") as tmp:
            save_safetensors(state, tmp, meta)
        hf_config.save_pretrained(new)
        atomic_write_json(new / "generation_config.json", generation_config(special))
        atomic_write_json(new / ARCHPOOL_CONFIG_NAME, cfg.to_dict())
        template = None
        if tok is not None:
            tok_dir = _tokenizer_dir(tokenizer)
            export_tokenizer(tok, new, cfg.max_seq_len, hf_files=tok_dir)
            template = chat_template(tok_dir) if tok_dir is not None else None
        assert hf_config.architectures  # to_hf_config names the family's model class
        atomic_write_text(new / "README.md", model_card(cfg, hf_config.architectures[0], meta, special, template))
    return out_dir


def replaceable_export(directory: Path) -> str | None:
    """Why ``directory`` is not an earlier export that ``export_hf(..., replace=True)`` may replace (None
    when it is one: it holds the ``archpool_config.json`` every export writes, and is no archpool checkpoint)."""
    from archpool.rundir import is_archpool_checkpoint

    if is_archpool_checkpoint(directory):
        return "it is an archpool checkpoint, not an export"
    marker = directory / ARCHPOOL_CONFIG_NAME
    if not (marker.is_file() or marker.is_symlink()):
        return f"it is not an export of archpool (no {ARCHPOOL_CONFIG_NAME})"
    return None


# ---------------------------------------------------------------------------------------------- provenance
def export_metadata(cfg: ModelConfig, source_dir: Path | None, provenance: dict[str, str] | None) -> dict[str, str]:
    """model.safetensors metadata (strings only): format, archpool version/commit, config hash, source."""
    from archpool.io import sha256_json
    from archpool.version import git_commit, package_version

    meta = {
        "format": "pt",
        "archpool_version": package_version(),
        "archpool_commit": git_commit() or "unknown",
        "archpool_config_sha256": sha256_json(cfg.to_dict()),
    }
    if source_dir is not None:
        meta["source_checkpoint"] = str(source_dir.resolve())
        try:
            recorded = read_json_object(source_dir / "config.json").get("metadata")
        except ConfigError:
            recorded = None
        recorded = recorded if isinstance(recorded, dict) else {}
        for key in ("run", "stage", "step", "tokens", "imported_from", "hf_model_type"):
            if recorded.get(key) is not None:
                meta[f"source_{key}"] = str(recorded[key])
    meta.update({k: str(v) for k, v in (provenance or {}).items() if v is not None})
    return meta


def _find_tokenizer(directory: Path | None) -> Path | None:
    if directory is None:
        return None
    for candidate in (directory / "tokenizer.json", directory.parent / "tokenizer.json"):
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def load_tokenizer(tokenizer: Any):
    """An archpool ``Tokenizer`` from a tokenizer.json path, a directory holding one, or a ``Tokenizer``."""
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from archpool.tokenizer import Tokenizer  # a leaf module (tokenizers only): no data pipeline

    return Tokenizer.load(tokenizer)


def special_tokens(tok) -> dict[str, tuple[str, int]]:
    """``{"bos" | "eos" | "pad": (token, id)}`` of an archpool ``Tokenizer`` (its pool's BOS/EOS/PAD)."""
    hf = tok._tok
    out = {}
    for key in ("bos", "eos", "pad"):
        i = getattr(tok, f"{key}_id", None)
        if i is not None:
            out[key] = (hf.id_to_token(int(i)), int(i))
    return out


def generation_config(special: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """generation_config.json: the special ids, greedy by default (``generate`` stops at EOS, pads with PAD)."""
    ids = {f"{k}_token_id": v[1] for k, v in special.items()}
    return {"_from_model_config": False, **ids, "do_sample": False}


HF_TOKENIZER_CONFIG, CHAT_TEMPLATE_NAME = "tokenizer_config.json", "chat_template.jinja"


def _tokenizer_dir(tokenizer: Any) -> Path | None:
    """The directory of a tokenizer given as a path (its HF files may lie beside tokenizer.json)."""
    if not isinstance(tokenizer, (str, Path)):
        return None
    p = Path(tokenizer)
    return p if p.is_dir() else p.parent


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, ``{}`` when there is no such file; ConfigError naming it when damaged."""
    return read_json_object(path) if path.is_file() else {}


def chat_template(directory: Path) -> str | None:
    """The chat template of a HF tokenizer directory: chat_template.jinja, else tokenizer_config.json's."""
    f = Path(directory) / CHAT_TEMPLATE_NAME
    if f.is_file():
        return read_text_bounded(f)
    template = _read_json(Path(directory) / HF_TOKENIZER_CONFIG).get("chat_template")
    return template if isinstance(template, str) and template else None


def export_tokenizer(
    tokenizer: Any, out_dir: str | Path, model_max_length: int | None = None, hf_files: Path | None = None
) -> None:
    """Write tokenizer.json with the tokenizer_config.json / special_tokens_map.json AutoTokenizer needs;
    ``tokenizer`` is a tokenizer.json path (or its directory) or an archpool ``Tokenizer``. ``hf_files``: a
    directory whose tokenizer_config.json (special tokens, chat template, added tokens) is kept, with the
    BOS/EOS/PAD names of ``tokenizer`` written over it, and whose chat_template.jinja is copied."""
    from archpool.io import atomic_write_json, atomic_write_text

    tok = load_tokenizer(tokenizer)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "tokenizer.json", tok._json)
    special = special_tokens(tok)
    names = {f"{k}_token": v[0] for k, v in special.items()}
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **names,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    source = _read_json(hf_files / HF_TOKENIZER_CONFIG) if hf_files is not None else {}
    if source:
        config = {**source, **names}
    if model_max_length:
        config["model_max_length"] = int(model_max_length)
    atomic_write_json(out_dir / HF_TOKENIZER_CONFIG, config)
    special_map = _read_json(hf_files / "special_tokens_map.json") if hf_files is not None else {}
    atomic_write_json(out_dir / "special_tokens_map.json", {**special_map, **names})
    if hf_files is not None and (hf_files / CHAT_TEMPLATE_NAME).is_file():
        atomic_write_text(out_dir / CHAT_TEMPLATE_NAME, read_text_bounded(hf_files / CHAT_TEMPLATE_NAME))
