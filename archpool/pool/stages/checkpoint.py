"""The model a checkpoint run's eval / attention node reads: a local directory (checked against the
content key it was planned with) or a Hub repository at a revision, downloaded only when
``archpool run --allow-download`` allowed it and prepared for loading (:func:`prepare_hub_model`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, cast

from archpool.errors import CheckpointError, ConfigError
from archpool.io import atomic_write_json
from archpool.pool.checkpoints import (
    ALLOW_DOWNLOAD_OPTION,
    CheckpointRunSpec,
    ModelRef,
    content_key,
    downloads_allowed,
    model_dir,
)
from archpool.pool.graph import StageContext
from archpool.pool.nodes import AttentionConfig, CheckpointExtendConfig, EvalConfig, ExtendResult
from archpool.safeload import read_json_object

# Hub configs whose model_type transformers implements natively: their remote code is never run
NATIVE_TYPES = ("llama", "olmo2", "olmo3", "qwen3")
PROBE_CHARS = 20_000  # of each pool text, as the RoPE-layout check's probe


def model_path(ctx: StageContext) -> Path:
    """The directory of the model this node measures or extends (``final``: the run's checkpoint;
    ``pretrained``: its twin)."""
    c, run = ctx.config, ctx.run
    assert isinstance(c, EvalConfig | AttentionConfig | CheckpointExtendConfig) and isinstance(run, CheckpointRunSpec)
    assert c.checkpoint
    ref = run.refs[c.checkpoint]
    if ref.is_hub:
        probe = [Path(t).read_text(errors="replace")[:PROBE_CHARS] for t in ctx.pool.texts]
        design = dataclasses.asdict(run.model)
        return prepare_hub_model(download(ref), ctx.out_dir / "model", design, probe or None)
    key = content_key(ref)
    if key != c.content:
        raise CheckpointError(f"{ref.path}: the model changed since the pool was planned; run the pool again to re-plan it")
    return Path(ref.path)


def extended_model(ctx: StageContext, rung: int | None = None) -> Path:
    """The model a node reads from its ``model`` input: the directory a checkpoint run's extension wrote (its
    result names it; a rung of its ladder in its training run), else the input's own directory (a run
    directory; a rung of a ladder is its milestone)."""
    made = cast(ExtendResult, ctx.input_results.get("model") or {})
    if rung is not None:
        from archpool.train.extend import rung_dir

        return rung_dir(Path(made.get("run") or ctx.inputs["model"]), rung)
    return Path(made["model"]) if made.get("model") else ctx.inputs["model"]


def download(ref: ModelRef) -> Path:
    """The Hub snapshot of ``ref`` (from the local Hugging Face cache unless downloads are allowed)."""
    from huggingface_hub import snapshot_download

    allow = downloads_allowed()
    try:
        return Path(snapshot_download(ref.repo, revision=ref.revision, local_files_only=not allow))
    except Exception as e:
        hint = "" if allow else f" (not in the local cache; pass {ALLOW_DOWNLOAD_OPTION})"
        raise CheckpointError(f"{ref.repo}@{ref.revision}: cannot load{hint}: {type(e).__name__}: {e}") from None


def prepare_hub_model(snapshot: Path, out: Path, design: dict[str, Any], probe: list[str] | None = None) -> Path:
    """A loadable copy of a downloaded model in ``out``: its files linked, its config.json rewritten
    so that transformers' own implementation runs (the repository's code, ``auto_map``, is dropped for
    natively supported types), an SWA model whose config ships without a window gets the pool's
    window on the run's layer pattern, and the RoPE layout is checked (and converted) by
    :func:`archpool.model.rope_layout.check_rope_layout` on ``probe`` (the pool's texts; else its
    own English probe), its verdict kept in ``rope_layout.json``."""
    from archpool.model.rope_layout import check_rope_layout
    from archpool.study import olmo3_layer_types

    out.mkdir(parents=True, exist_ok=True)
    for f in snapshot.iterdir():
        link = out / f.name
        if f.name != "config.json" and not link.exists():
            os.symlink(f.resolve(), link)
    config = read_json_object(snapshot / "config.json")
    if config.get("auto_map"):
        if config.get("model_type") not in NATIVE_TYPES:
            raise ConfigError(
                "auto_map", f"{snapshot}: custom-code model of type {config.get('model_type')!r}; archpool never runs it"
            )
        config.pop("auto_map")
    if design.get("swa") and not config.get("sliding_window"):
        n = int(config["num_hidden_layers"])
        config["sliding_window"] = int(design.get("window") or 4096)
        config["layer_types"] = olmo3_layer_types(n)
    atomic_write_json(out / "config.json", config)
    if not (out / "rope_layout.json").is_file():  # a resumed stage: converted already
        atomic_write_json(out / "rope_layout.json", check_rope_layout(out, mode="convert", texts=probe))
    return model_dir(out)
