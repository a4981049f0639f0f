"""Checkpoint runs: a pool member that names an existing model instead of a recipe.

A run entry with ``checkpoint:`` (the model to study; after extension when there are two) and
optionally ``pretrained:`` (its before-extension twin) is measured, not trained: its plan has only
eval and attention nodes (:func:`archpool.pool.plan.checkpoint_nodes`). Each reference is

- a local directory: an archpool run directory (its final checkpoint), an archpool checkpoint, or a
  Hugging Face model directory; relative paths are read from the pool file's directory;
- a Hub name ``org/name@revision``, loaded only under ``archpool run --allow-download``;
- a GGUF file inside an installed Python package, ``package:DIST/FILE.gguf``
  (:mod:`archpool.model.hf.gguf`): imported once into ``$ARCHPOOL_CACHE/gguf/DIST/<file>`` when the pool is
  planned, and again only when the file's bytes change; its design comes from ``design:`` (as a Hub
  model's: its config exists only after the import).

Design columns come from the model's config through :mod:`archpool.model.features` (the pretraining
context from the before-extension twin when there is one), then ``published:`` (a run of the paper's
table: its design and its scores as ``paper_*`` columns), then ``design:`` overrides. Stage keys hash
the model's bytes (config, weights, tokenizer), never its path, so a moved or copied model is a
cache hit and a changed one is not.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from archpool import study
from archpool.axes import N_KV_HEADS, NORM, NORMS, PRETRAIN_CTX, QK_NORM, SWA, canonical_qk_norm
from archpool.config import check_keys
from archpool.errors import ConfigError
from archpool.io import read_config_file, sha256_json
from archpool.model.features import INFERRED_CTX, inferred_ctx_note
from archpool.model.hf.gguf import is_packaged, split_packaged
from archpool.rundir import RUN_RECORD, run_dir_final

CHECKPOINT_KEYS = {
    "name", "checkpoint", "pretrained", "pretrain_ctx", "extend", "design", "published", "columns", "init", "fp8", "hub",
}  # fmt: skip
EXTEND_KEYS = ("recipes", "steps", "data", "text")  # of a checkpoint run's ``extend:``
DESIGN_KEYS = (SWA, QK_NORM, NORM, N_KV_HEADS, "n_heads", "window", "d_ff", "n_layers", "d_model", PRETRAIN_CTX, "params_b")
ALLOW_DOWNLOAD_ENV = "ARCHPOOL_ALLOW_DOWNLOAD"  # set by `archpool run --allow-download` for its workers
ALLOW_DOWNLOAD_OPTION = "--allow-download"
_HUB = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[\w./-]+))?$")


@dataclass(frozen=True)
class ModelRef:
    """Where a checkpoint run's model is: a local directory or a Hub repository at a revision."""

    text: str  # as written in the pool
    path: str = ""  # local: absolute directory (a packaged GGUF file: the directory it is imported into)
    repo: str = ""  # hub: org/name
    revision: str = ""
    package: str = ""  # a GGUF file inside an installed Python package: package:DIST/FILE.gguf

    @property
    def is_hub(self) -> bool:
        return bool(self.repo)

    @property
    def is_packaged(self) -> bool:
        return bool(self.package)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def parse_ref(value: Any, base_dir: Path, where: str) -> ModelRef:
    """A local directory (absolute, or relative to ``base_dir``), a Hub name ``org/name@revision``, or a GGUF
    file inside an installed Python package ``package:DIST/FILE.gguf`` (the package need not be installed
    yet: it is looked up when the pool is planned)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"a model directory or a Hub name org/name@revision, got {value!r}")
    text = value.strip()
    if is_packaged(text):
        try:
            dist, file = split_packaged(text)
        except ConfigError as e:
            raise ConfigError(where, e.message) from None
        return ModelRef(text=text, path=str(packaged_import_dir(dist, file)), package=text)
    local = Path(text).expanduser()
    local = local if local.is_absolute() else base_dir / local
    explicit_path = text.startswith(("/", "./", "../", "~"))
    if local.is_dir():
        return ModelRef(text=text, path=str(local.resolve()))
    m = _HUB.match(text)
    if explicit_path or m is None:
        raise ConfigError(where, f"no model directory {str(local)!r} (and not a Hub name org/name@revision)")
    return ModelRef(text=text, repo=m["repo"], revision=m["rev"] or "main")


def packaged_import_dir(dist: str, file: str) -> Path:
    """Where a packaged GGUF file is imported: ``$ARCHPOOL_CACHE/gguf/<distribution>/<file name without
    .gguf>`` (one directory per file, so a new version of the package replaces its import)."""
    from archpool.data.config import default_cache_root

    safe = re.compile(r"[^A-Za-z0-9._-]+")
    return default_cache_root() / "gguf" / safe.sub("_", dist.lower()) / safe.sub("_", Path(file).name.removesuffix(".gguf"))


def packaged_model(ref: ModelRef) -> Path:
    """The directory of a packaged GGUF reference, imported when it is absent or holds an import of other
    bytes (:func:`archpool.model.hf.gguf.cached_import`, one line on standard error before an import)."""
    import sys

    from archpool.model.hf.gguf import cached_import

    return cached_import(ref.package, ref.path, log=lambda line: print(f"archpool: {line}", file=sys.stderr, flush=True))


# ---------------------------------------------------------------------------------------------- local models
def model_dir(path: str | Path) -> Path:
    """The directory holding a reference's weights: a run directory's final checkpoint, else itself."""
    path = Path(path)
    return run_dir_final(path) if (path / RUN_RECORD).is_file() else path


def _weight_names(directory: Path) -> list[str]:
    if (directory / "model.safetensors").is_file():
        return ["model.safetensors"]
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        data = read_config_file(index)
        return ["model.safetensors.index.json", *sorted({str(v) for v in (data.get("weight_map") or {}).values()})]
    raise ConfigError(str(directory), "no safetensors weights (model.safetensors or a shard index)")


def content_key(ref: ModelRef) -> str:
    """The model's identity for stage keys: the sha256 of its bytes (local: config, weights, generation
    settings and tokenizer files, :func:`archpool.model.hf.model_file_hashes`, each file hashed once per
    process until it changes), or repository + revision (Hub: a commit names fixed bytes; a branch or tag
    can move, and the eval stage's own cache still keys its results by the downloaded model's bytes). A
    packaged GGUF file is imported first (:func:`packaged_model`), then keyed as a local directory."""
    if ref.is_hub:
        return sha256_json({"hub": ref.repo, "revision": ref.revision})[:32]
    from archpool.model.hf import model_file_hashes

    path = packaged_model(ref) if ref.is_packaged else model_dir(ref.path)
    return sha256_json(model_file_hashes(path))[:32]


def _safetensors_params(directory: Path) -> int:
    """Parameters in the safetensors files of ``directory``, from their headers; CheckpointError naming a
    file whose header is damaged."""
    from archpool.model.checkpoint import safetensors_shapes

    total = 0
    for name in _weight_names(directory):
        if name.endswith(".safetensors"):
            total += sum(math.prod(shape) for shape in safetensors_shapes(directory / name).values())
    return total


def local_design(path: str | Path) -> dict[str, Any]:
    """Design columns of a local model from its config (via :mod:`archpool.model.features`), with
    ``pretrain_ctx_from``: the config field its pretraining context was read from."""
    from archpool.model.checkpoint import FORMAT_KEY
    from archpool.model.config import ModelConfig
    from archpool.model.features import features_from_config, features_from_hf_config

    d = model_dir(path)
    if not (d / "config.json").is_file():
        raise ConfigError(str(path), "no config.json (neither an archpool run/checkpoint nor a Hugging Face model)")
    data = read_config_file(d / "config.json")
    ours = d / "archpool_config.json"  # written beside an HF export: the archpool config, extension record included
    if isinstance(data, dict) and FORMAT_KEY in data:
        cfg = ModelConfig.from_dict(data["model"])
    elif ours.is_file():
        cfg = ModelConfig.from_dict(read_config_file(ours))
    else:
        cfg = None
    if cfg is not None:
        f = features_from_config(cfg)
        extra = dict(d_ff=cfg.d_ff, d_model=cfg.d_model, params=cfg.num_params())
    else:
        f = features_from_hf_config(data, source=str(d))
        extra = dict(d_ff=int(data.get("intermediate_size") or 0), d_model=int(data.get("hidden_size") or 0))
        extra["params"] = _safetensors_params(d)
    return dict(
        swa=int(f[SWA]),
        qk_norm=f[QK_NORM],
        norm=f[NORM],
        n_kv_heads=int(f[N_KV_HEADS]),
        n_heads=int(f["n_heads"]),
        window=int(f["window"] or 0),
        n_layers=int(f["n_layers"]),
        pretrain_ctx=int(f[PRETRAIN_CTX]),
        pretrain_ctx_from=str(f["pretrain_ctx_from"]),
        **extra,
    )


# ---------------------------------------------------------------------------------------------- the spec
@dataclass
class CheckpointDesign:
    """The architecture columns of a checkpoint run (what a trained run reads from its ModelConfig)."""

    swa: int
    qk_norm: str
    norm: str
    n_kv_heads: int
    n_heads: int
    window: int = 0
    d_ff: int = 0
    n_layers: int = 0
    d_model: int = 0


@dataclass
class CheckpointRunSpec(study.DesignAxes):
    """A pool member measured from an existing model: ``checkpoint`` (and its ``pretrained`` twin)."""

    name: str
    arch: str
    model: CheckpointDesign
    pretrain_ctx: int
    checkpoint: dict[str, str]
    pretrained: dict[str, str] | None = None
    seed: int = 0
    init: str = ""
    init_seed: int = 0
    fp8: bool = False
    params: int = 0
    columns: dict[str, Any] = field(default_factory=dict)
    kind: str = "checkpoint"
    pretrain_ctx_from: str = ""  # where pretrain_ctx came from: a config field, the twin, published, design or pretrain_ctx
    extend: dict[str, Any] | None = None  # the pool extends the checkpoint (parse_extend): recipes, steps, data, text

    @property
    def refs(self) -> dict[str, ModelRef]:
        """``final`` (the checkpoint) and, when given, ``pretrained``."""
        out = {"final": ModelRef(**self.checkpoint)}
        if self.pretrained:
            out["pretrained"] = ModelRef(**self.pretrained)
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointRunSpec:
        return cls(**{**d, "model": CheckpointDesign(**d["model"])})


def is_checkpoint_entry(entry: Any) -> bool:
    return isinstance(entry, dict) and ("checkpoint" in entry or "pretrained" in entry)


def run_from_dict(d: dict[str, Any]) -> CheckpointRunSpec | None:
    """A run of plan.json: a checkpoint run, or ``None`` for a trained run (the caller builds it)."""
    return CheckpointRunSpec.from_dict(d) if d.get("kind") == "checkpoint" else None


def parse_checkpoint_run(entry: dict[str, Any], label: str, base_dir: Path) -> CheckpointRunSpec:
    """One ``checkpoint:`` run entry, validated, with its design resolved (see the module docstring)."""
    name = entry["name"]
    check_keys(entry, sorted(CHECKPOINT_KEYS), label, "field of a checkpoint run")
    if "checkpoint" not in entry:
        raise ConfigError(f"{label}.checkpoint", "a checkpoint run names the model to study (`pretrained:` is its optional twin)")
    final = parse_ref(entry["checkpoint"], base_dir, f"{label}.checkpoint")
    pretrained = parse_ref(entry["pretrained"], base_dir, f"{label}.pretrained") if entry.get("pretrained") else None
    extend = parse_extend(entry.get("extend"), f"{label}.extend", base_dir)
    if extend is not None and pretrained is not None:
        raise ConfigError(
            f"{label}.extend",
            "the pool extends the checkpoint, which is then the model before extension: drop `pretrained:` "
            "(a twin is for a checkpoint extended elsewhere)",
        )
    design: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    ctx_from = ""
    if _has_config(final):
        design.update(_local_design(final.path, f"{label}.checkpoint"))
        ctx_from = design.pop("pretrain_ctx_from")
    if pretrained is not None and _has_config(pretrained):
        twin = _local_design(pretrained.path, f"{label}.pretrained")
        twin.pop("pretrain_ctx_from")
        design = {**twin, **design, "pretrain_ctx": twin["pretrain_ctx"]}  # the twin's own context is its pretraining one
        ctx_from = "pretrained"
    published = entry.get("published")
    if published is not None:
        design.update(_published_design(published, f"{label}.published"))
        columns.update(_published_columns(published))
        ctx_from = "published"
    overrides = entry.get("design") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{label}.design", "a mapping of design columns")
    check_keys(overrides, DESIGN_KEYS, f"{label}.design", "design column")
    design.update(overrides)
    ctx_from = "design" if "pretrain_ctx" in overrides else ctx_from
    if entry.get("pretrain_ctx") is not None:
        given = entry["pretrain_ctx"]
        if "pretrain_ctx" in overrides and overrides["pretrain_ctx"] != given:
            raise ConfigError(
                f"{label}.pretrain_ctx", f"{given!r} differs from design.pretrain_ctx {overrides['pretrain_ctx']!r}"
            )
        design["pretrain_ctx"], ctx_from = given, "pretrain_ctx"
    elif ctx_from in INFERRED_CTX:
        warnings.warn(
            f"{label}.checkpoint: {inferred_ctx_note(design['pretrain_ctx'])}; the short-context column follows it",
            stacklevel=2,
        )
    if "params_b" in design:
        design["params"] = int(round(float(design.pop("params_b")) * 1e9))
    missing = [k for k in (SWA, QK_NORM, NORM, N_KV_HEADS, "n_heads", PRETRAIN_CTX) if k not in design]
    if missing:
        raise ConfigError(
            f"{label}.design.{missing[0]}",
            f"a Hub checkpoint's config is read only after download, a packaged GGUF file's after its import: "
            f"give `design:` (or `published:`) with {', '.join(missing)}",
        )
    design[QK_NORM] = canonical_qk_norm(design[QK_NORM])
    _check_design(design, label)
    extra = entry.get("columns") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{label}.columns", "a mapping of extra results columns")
    columns.update(extra)
    fp8 = entry.get("fp8", design.pop("fp8", False))
    if fp8 not in (0, 1, True, False):
        raise ConfigError(f"{label}.fp8", f"a boolean (a confound column), got {fp8!r}")
    return CheckpointRunSpec(
        name=name,
        arch=name,
        model=CheckpointDesign(**{k: design[k] for k in CheckpointDesign.__dataclass_fields__ if k in design}),
        pretrain_ctx=int(design["pretrain_ctx"]),
        checkpoint=final.to_dict(),
        pretrained=pretrained.to_dict() if pretrained else None,
        init=str(entry.get("init", design.get("init", name))),
        fp8=bool(fp8),
        params=int(design.get("params", 0)),
        columns=columns,
        pretrain_ctx_from=ctx_from,
        extend=extend,
    )


def _has_config(ref: ModelRef) -> bool:
    """Whether a reference's config can be read when the pool is parsed (a local directory's)."""
    return not (ref.is_hub or ref.is_packaged)


def parse_extend(value: Any, where: str, base_dir: Path) -> dict[str, Any] | None:
    """A checkpoint run's ``extend:``: ``true`` (every recipe of the pool's ``extension:``, the RoPE change
    alone) or a mapping: ``recipes`` (names of the pool's recipes; default all that apply), ``steps`` (0: the
    RoPE change alone; N: N steps of training, which needs ``data`` or ``text``), ``data`` (a prepared store
    or a data config in the model's tokenizer) or ``text`` (plain-text files); paths relative to the pool
    file. None when absent or false."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(where, f"true, or a mapping with {', '.join(EXTEND_KEYS)}; got {value!r}")
    check_keys(value, EXTEND_KEYS, where, "extension setting")
    recipes = value.get("recipes")
    if recipes is not None and (not isinstance(recipes, list) or not recipes or not all(isinstance(r, str) for r in recipes)):
        raise ConfigError(f"{where}.recipes", f"a non-empty list of the pool's recipe names, got {recipes!r}")
    steps = value.get("steps", 0)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ConfigError(f"{where}.steps", f"a number of training steps >= 0, got {steps!r}")
    data, text = value.get("data"), value.get("text")
    if data is not None and text is not None:
        raise ConfigError(f"{where}.data", "give data (a store or data config) or text (files), not both")
    if steps and data is None and text is None:
        raise ConfigError(f"{where}.data", "a trained extension reads data: data (a store or data config) or text (files)")
    if not steps and (data is not None or text is not None):
        raise ConfigError(f"{where}.steps", "data is read by a trained extension only: give steps > 0, or drop data/text")
    out: dict[str, Any] = {"recipes": recipes, "steps": steps, "data": None, "text": None}
    if data is not None:
        path = _local_path(data, base_dir, f"{where}.data")
        if not path.exists():
            raise ConfigError(f"{where}.data", f"no data store or data config {str(path)!r}")
        out["data"] = str(path.resolve())
    if text is not None:
        files = text if isinstance(text, list) else [text]
        paths = [_local_path(t, base_dir, f"{where}.text") for t in files]
        missing = [p for p in paths if not p.is_file()]
        if not paths or missing:
            raise ConfigError(f"{where}.text", f"no text file {str(missing[0]) if missing else files!r}")
        out["text"] = [str(p.resolve()) for p in paths]
    return out


def _local_path(value: Any, base_dir: Path, where: str) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"a path, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def _local_design(path: str, where: str) -> dict[str, Any]:
    try:
        return local_design(path)
    except ConfigError as e:
        raise ConfigError(where, f"{path}: {e.message}") from None


def _check_design(d: dict[str, Any], label: str) -> None:
    for k in ("n_kv_heads", "n_heads", "pretrain_ctx"):
        if not isinstance(d[k], int) or isinstance(d[k], bool) or d[k] < 1:
            raise ConfigError(f"{label}.design.{k}", f"a positive integer, got {d[k]!r}")
    if d["n_heads"] % d["n_kv_heads"]:
        raise ConfigError(f"{label}.design.n_kv_heads", f"{d['n_kv_heads']} does not divide n_heads={d['n_heads']}")
    if d[NORM] not in NORMS:
        raise ConfigError(f"{label}.design.norm", f"'pre' or 'post', got {d['norm']!r}")
    if d["swa"] not in (0, 1, True, False):
        raise ConfigError(f"{label}.design.swa", f"0 or 1, got {d['swa']!r}")
    d["swa"] = int(d["swa"])


def _published_design(name: Any, where: str) -> dict[str, Any]:
    from archpool.paper.table import PAPER_N_HEADS, paper_run, parse_released_name

    try:
        r = paper_run(str(name))
    except KeyError:
        raise ConfigError(where, f"no run {name!r} in the paper's table") from None
    d = r.design
    return dict(
        swa=d[SWA],
        qk_norm=d[QK_NORM],
        norm=d[NORM],
        n_kv_heads=d[N_KV_HEADS],
        n_heads=PAPER_N_HEADS,
        window=parse_released_name(r.name)["window"],  # the name says it slides (some configs ship no window)
        d_ff=d["d_ff"],
        n_layers=d["n_layers"],
        d_model=4096,  # every run of the pool: 32 heads of 128
        pretrain_ctx=d[PRETRAIN_CTX],
        params_b=d["params_b"],
        fp8=d["fp8"],
        init=d["init"],
    )


def _published_columns(name: Any) -> dict[str, Any]:
    from archpool.paper.table import published_columns

    return {"paper_run": str(name), **published_columns(str(name))}


# ---------------------------------------------------------------------------------------------- downloads
def hub_refs(runs: list[Any]) -> list[str]:
    """The Hub references of a pool's checkpoint runs, as written."""
    return [ref.text for r in runs if getattr(r, "kind", "") == "checkpoint" for ref in r.refs.values() if ref.is_hub]


def check_downloads(runs: list[Any], allow: bool) -> None:
    """ConfigError naming ``--allow-download`` when a run needs the Hub and downloads were not allowed."""
    refs = hub_refs(runs)
    if refs and not allow:
        more = f" and {len(refs) - 1} more" if len(refs) > 1 else ""
        raise ConfigError(
            ALLOW_DOWNLOAD_OPTION,
            f"this pool loads models from the Hugging Face Hub ({refs[0]}{more}); "
            f"pass {ALLOW_DOWNLOAD_OPTION} to download them (archpool never downloads otherwise)",
        )


def downloads_allowed() -> bool:
    return os.environ.get(ALLOW_DOWNLOAD_ENV) == "1"
