"""Pool files: a YAML study design, validated and expanded into one ``RunSpec`` per trained model.

A pool lists architectures by their *axis values* (``norm``, ``qk_norm``, ``n_kv_heads``, ``swa``,
``pretrain_ctx``) or by a preset with overrides, and shares everything else: data, training,
extension recipe(s), evaluation, attention analysis and seeds. Generators expand it:

- ``factorial: {axes: {qk_norm: [none, layerwise], swa: [false, true]}}`` — every combination;
- ``seeds: [0, 1, 2]`` — a replicate of every architecture per seed (run name ``<arch>_s<seed>``);
- ``milestones: [0.25, 0.5]`` — also extend from those fractions of pretraining (early extension);
- ``paper: {...}`` rows — a run given in the paper's 7B units (``n_kv_heads`` of 32 query heads,
  ``pretrain_ctx`` 4096/8192, ``d_ff`` of 11008, ``n_layers`` of 32), scaled to the pool's size
  keeping its ratios; the shipped ``olmpool`` pool lists all 26 published runs this way.

Every validation error is a ``ConfigError`` whose field names the run: ``runs[G_pre_8kv].axes.swa``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archpool import study
from archpool.attention.settings import Settings as AttentionSettings
from archpool.axes import AXES, N_KV_HEADS, NORM, PRETRAIN_CTX, QK_NORM, SWA, canonical_qk_norm
from archpool.config import check_keys
from archpool.data.section import DataSection
from archpool.errors import ConfigError, DataError
from archpool.io import read_config_file
from archpool.model.config import ModelConfig
from archpool.model.presets import SIZES, preset_dict
from archpool.names import check_name
from archpool.pool.axes import axis_code, context, kv_heads, model_ctx, plain_size, scale_paper_row, swa
from archpool.pool.checkpoints import CheckpointRunSpec, is_checkpoint_entry, parse_checkpoint_run, run_from_dict
from archpool.pool.sections import (
    EvalSettings,
    PoolRecipe,
    ReportSettings,
    attention_settings,
    milestone_steps,
    parse_extensions,
)
from archpool.train.config import TrainConfig

if TYPE_CHECKING:
    from archpool.eval.harness import RulerSettings

POOLS_DIR = Path(__file__).resolve().parent.parent / "pools"

TOP_LEVEL_KEYS = {
    "base",
    "name",
    "description",
    "size",
    "backend",
    "model",
    "seeds",
    "data",
    "train",
    "extension",
    "eval",
    "attention",
    "report",
    "milestones",
    "runs",
    "factorial",
    "long_ctx",
    "jobs",
    "texts",
    "paper_geometry",
}
MAX_SEEDS = 1_000  # seeds of one architecture (each a trained model)
MAX_SEED = 2**32 - 1  # a seed every random generator accepts
MAX_RUNS = 10_000  # trained models in one pool
RUN_KEYS = {"name", "preset", "size", "axes", "model", "paper", "init", "fp8", "seeds", "columns"}


@dataclass
class RunSpec(study.DesignAxes):
    """One model of the pool: an architecture at one seed, fully resolved."""

    name: str
    arch: str
    seed: int
    model: ModelConfig
    pretrain_ctx: int
    init: str  # init group: runs sharing it share initial weights where shapes allow
    init_seed: int
    fp8: bool = False  # a confound column only; nothing is trained in fp8
    params: int = 0  # parameter count, embeddings included
    columns: dict[str, Any] = field(default_factory=dict)  # extra descriptive columns (e.g. paper name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # the model as ModelConfig.to_dict(): plan.json and the stage keys hash this

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(**{**d, "model": pool_model_config(d["model"])})


def pool_model_config(d: Any, path: str | None = None) -> ModelConfig:
    """A pool member's ``ModelConfig``; post-norm without QK-norm is allowed in a pool (flagged in the
    report), so its warning is not raised here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelConfig.from_dict(d, path)


def run_train_config(train: dict[str, Any], seq_len: int, seed: int = 0, milestones: list[float] | None = None) -> TrainConfig:
    """The pretrain stage's ``TrainConfig`` of a run: the pool's ``train:`` section at the run's context
    and seed, the pool's ``milestones`` (fractions) as steps, no progress bars."""
    base = {"progress": False, **train, "seq_len": seq_len, "seed": seed}
    cfg = TrainConfig.from_dict({**base, "milestones": []})
    if not milestones:
        return cfg
    return TrainConfig.from_dict({**base, "milestones": sorted(set(milestone_steps(milestones, cfg.total_steps()).values()))})


@dataclass
class PoolSpec:
    """A validated pool: its runs and its typed sections. ``train`` is the training section as
    written, which each run completes (context, seed, milestones) into the pretrain stage's
    ``TrainConfig`` (:meth:`pretrain_config`); every other section is its parsed object."""

    name: str
    runs: list[RunSpec | CheckpointRunSpec]
    description: str = ""
    size: str = "tiny"
    backend: str = "real"
    seeds: list[int] = field(default_factory=lambda: [0])
    long_ctx: int = 0
    data: DataSection = field(default_factory=DataSection)
    train: dict[str, Any] = field(default_factory=dict)
    extension: list[PoolRecipe] = field(default_factory=list)
    eval: EvalSettings = field(default_factory=EvalSettings)
    attention: AttentionSettings = field(default_factory=AttentionSettings)
    attention_enabled: bool = True  # ``attention.enabled``: whether the pool runs the attention stage
    report: ReportSettings = field(default_factory=ReportSettings)
    milestones: list[float] = field(default_factory=list)
    jobs: int = 1  # default for `archpool run --jobs`
    source: str = ""
    texts: list[str] = field(default_factory=list)  # held-out text files for checkpoint runs' attention
    pretrain_configs: dict[tuple[int, int], TrainConfig] = field(default_factory=dict, repr=False, compare=False)
    """Each (context, seed)'s pretraining ``TrainConfig``, built once (:meth:`pretrain_config`)."""

    @property
    def short_ctx(self) -> int:
        """The pool's one definition of a short pretraining context (the paper's 4K of 8K): contexts
        ≤ this count as short. ``report.short_ctx`` if given, else half the pool's long context.
        results.csv records it in every row, so ``archpool analyze`` and the report count alike."""
        return study.pool_short_ctx(self.long_ctx, self.report.short_ctx)

    @property
    def base_dir(self) -> Path:
        """The directory the pool file's relative paths are read from (``texts``, checkpoint runs' models,
        ``eval.harness.helmet_data.path``): :func:`pool_base_dir` of :attr:`source`."""
        return pool_base_dir(self.source)

    def pretrain_config(self, seq_len: int, seed: int) -> TrainConfig:
        """The pretrain stage's config of a run pretrained at ``seq_len`` with ``seed``: the pool's
        ``train:`` section, the pool's milestones as steps, no progress bars; built once per (context,
        seed), at parse for a pool read from its file."""
        key = (seq_len, seed)
        if key not in self.pretrain_configs:
            self.pretrain_configs[key] = run_train_config(self.train, seq_len, seed, self.milestones)
        return self.pretrain_configs[key]

    def extension_share(self, recipe: PoolRecipe, budget: int | None = None) -> float | None:
        """The extension tokens of ``recipe`` after ``budget`` steps (default: its whole extension) as a
        share of a run's pretraining tokens (the paper's is 10B of 140B, ``study.PAPER_EXTENSION_SHARE``);
        None for another backend or a pool without trained runs."""
        from archpool.train.extension_plan import plan_extension

        run = next((r for r in self.runs if isinstance(r, RunSpec) and recipe.applies(r.arch)), None)
        if recipe.config is None or run is None:
            return None
        pretrain = self.pretrain_config(run.pretrain_ctx, run.seed)
        plan = plan_extension(run.model, pretrain, recipe.config, "final")
        steps = plan.train.total_steps() if budget is None else budget
        return steps * plan.train.global_batch_tokens / (pretrain.total_steps() * pretrain.global_batch_tokens)

    def run(self, name: str) -> RunSpec | CheckpointRunSpec:
        for r in self.runs:
            if r.name == name:
                return r
        raise ConfigError("--only", f"no run {name!r} in pool {self.name!r}; runs: {', '.join(r.name for r in self.runs)}")

    def to_dict(self) -> dict[str, Any]:
        """The pool as plan.json records it: every section as a mapping :meth:`from_dict` parses back."""
        return dict(
            name=self.name,
            runs=[r.to_dict() for r in self.runs],
            description=self.description,
            size=self.size,
            backend=self.backend,
            seeds=list(self.seeds),
            long_ctx=self.long_ctx,
            data=self.data.to_dict(),
            train=copy.deepcopy(self.train),
            extension=[r.to_dict() for r in self.extension],
            eval=self.eval.to_dict(),
            attention={"enabled": self.attention_enabled, **self.attention.to_dict()},
            report=self.report.to_dict(),
            milestones=list(self.milestones),
            jobs=self.jobs,
            source=self.source,
            texts=list(self.texts),
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolSpec:
        """A pool from :meth:`to_dict`'s mapping, every section parsed (and validated) again; an
        absent section is its defaults (an absent ``extension`` none)."""
        d = dict(d)
        enabled, attention = attention_settings(d.pop("attention", None))
        long_ctx, backend = d.get("long_ctx", 0), d.get("backend", "real")
        return cls(
            **{
                **d,
                "runs": [run_from_dict(r) or RunSpec.from_dict(r) for r in d["runs"]],
                "data": DataSection.from_dict(d.get("data")),
                "extension": parse_extensions(d.get("extension", []), long_ctx, backend),
                "eval": EvalSettings.from_dict(d.get("eval")),
                "attention": attention,
                "attention_enabled": enabled,
                "report": ReportSettings.from_dict(d.get("report")),
            }
        )


# ---------------------------------------------------------------------------------------------
# loading


def shipped_pools() -> list[str]:
    return sorted(p.stem for p in POOLS_DIR.glob("*.yaml"))


def resolve_pool_path(pool: str | Path) -> Path:
    """A YAML path, or the name of a shipped pool (``demo``, ``smoke``, ``olmpool``)."""
    p = Path(pool)
    if p.suffix in (".yaml", ".yml") or p.is_file():
        if not p.is_file():
            raise ConfigError("POOL", f"no pool file {str(p)!r}")
        return p
    shipped = POOLS_DIR / f"{pool}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError("POOL", f"{str(pool)!r} is neither a pool file nor a shipped pool ({', '.join(shipped_pools())})")


MAX_BASE_DEPTH = 8  # pool files a chain of ``base:`` may pass through


def load_pool(pool: str | Path | dict[str, Any], size: str | None = None, seeds: list[int] | None = None) -> PoolSpec:
    """Load, validate and expand a pool. ``size`` / ``seeds`` override the file's values."""
    if isinstance(pool, dict):
        data, source = copy.deepcopy(pool), "<dict>"
        if "base" in data:
            raise ConfigError("base", "a pool given as a mapping cannot name a base pool; give its file")
    else:
        path = resolve_pool_path(pool)
        data = read_pool_file(path)
        source = str(path)
    return parse_pool(data, size=size, seeds=seeds, source=source)


def read_pool_file(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A pool file's mapping with its ``base:`` pool laid under it.

    ``base:`` names a pool file (relative to this one) or a shipped pool; the base's mapping is read the
    same way, then this file's keys are laid over it: mappings merge key by key, anything else (lists such
    as ``runs`` and ``extension``, scalars) replaces the base's value. Chains are bounded and cycles refused."""
    data = read_config_file(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), "a pool file is a mapping with at least `name` and `runs` or `factorial`")
    if "base" not in data:
        return data
    here = path.resolve()
    if here in chain or len(chain) >= MAX_BASE_DEPTH:
        names = " -> ".join(p.name for p in (*chain, here))
        raise ConfigError("base", f"{names}: base pools form a cycle or a chain deeper than {MAX_BASE_DEPTH}")
    base = data.pop("base")
    if not isinstance(base, str) or not base:
        raise ConfigError("base", f"a pool file or a shipped pool's name, got {base!r}")
    relative = path.parent / base
    base_path = resolve_pool_path(relative if relative.is_file() else base)
    return merge_pool_mappings(read_pool_file(base_path, (*chain, here)), data)


def merge_pool_mappings(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base``: mappings merge key by key, any other value replaces the base's."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = merge_pool_mappings(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def pool_base_dir(source: str) -> Path:
    """The directory a pool's relative paths are read from: the directory of its file ``source``, or the working
    directory for a pool given as a mapping or whose file is not on this machine."""
    return Path(source).parent if source and Path(source).is_file() else Path.cwd()


def parse_pool(data: dict[str, Any], size: str | None = None, seeds: list[int] | None = None, source: str = "") -> PoolSpec:
    check_keys(data, sorted(TOP_LEVEL_KEYS), what="pool field")
    name = check_name("name", data.get("name"))  # the pool's directory under out/
    size = size or data.get("size", "tiny")
    if not isinstance(size, str) or size not in SIZES:
        raise ConfigError("size", f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    backend = data.get("backend", "real")
    if not isinstance(backend, str) or not all(p.isidentifier() for p in backend.split(".")):
        raise ConfigError("backend", f"'real' or the dotted name of a module with STAGES, got {backend!r}")
    seeds = _parse_seeds(seeds if seeds is not None else data.get("seeds", [0]), "seeds")
    long_ctx = data.get("long_ctx") or SIZES[size]["ctx"]
    if not isinstance(long_ctx, int) or isinstance(long_ctx, bool) or long_ctx <= 0:
        raise ConfigError("long_ctx", f"must be a positive integer, got {long_ctx!r}")
    sections = _sections(data)
    section = DataSection.from_dict(sections["data"])
    eval_settings = EvalSettings.from_dict(sections["eval"])
    attention_enabled, attention = attention_settings(sections["attention"])
    report = ReportSettings.from_dict(sections["report"])
    extension = parse_extensions(data.get("extension"), long_ctx, backend)
    milestones = sorted(float(m) for m in _milestones(data.get("milestones") or []))
    base_model = data.get("model") or {}
    if not isinstance(base_model, dict):
        raise ConfigError("model", "the pool's base model must be a mapping (preset / overrides)")

    entries = _run_entries(data)

    # models read the data's tokenizer: its vocabulary sets vocab_size unless a model section pins it
    data_vocab = section.data.vocab_size if backend == "real" and section.data is not None else None
    base_dir = pool_base_dir(source)
    ctx = _Ctx(
        size=size,
        long_ctx=long_ctx,
        base_model=base_model,
        seeds=seeds,
        data_vocab=data_vocab,
        base_dir=base_dir,
        paper_geometry=_paper_geometry(data.get("paper_geometry")),
    )
    runs = _parse_runs(entries, ctx)
    trained = [r for r in runs if isinstance(r, RunSpec)]
    pretrain: dict[tuple[int, int], TrainConfig] = {}
    if backend == "real" and trained:
        pretrain = pretrain_configs(sections["train"], trained, milestones)
        _check_packing(section, sections["train"], runs)
    check_before_work(runs, section, pretrain, extension, report, eval_settings, long_ctx, backend)
    if backend == "real":
        check_text_stages(section, trained, eval_settings.enabled, attention_enabled)
    if backend == "real" and attention_enabled:
        check_attention_inputs(runs, attention, eval_settings, extension, long_ctx)
    _check_extension_archs(extension, runs)
    check_harness_inputs(eval_settings, base_dir, long_ctx)

    return PoolSpec(
        name=name,
        runs=runs,
        description=str(data.get("description", "")).strip(),
        size=size,
        backend=backend,
        seeds=seeds,
        long_ctx=long_ctx,
        extension=extension,
        milestones=milestones,
        source=source,
        jobs=_jobs(data.get("jobs", 1)),
        texts=_texts(data.get("texts"), base_dir),
        data=section,
        train=sections["train"],
        eval=eval_settings,
        attention=attention,
        attention_enabled=attention_enabled,
        report=report,
        pretrain_configs=pretrain,
    )


@dataclass
class _Ctx:
    size: str
    long_ctx: int
    base_model: dict[str, Any]
    seeds: list[int]
    data_vocab: int | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    paper_geometry: dict[str, Any] = field(default_factory=dict)


def _published(name: str) -> dict[str, float]:
    """A paper row's published scores as ``paper_*`` columns when ``name`` is one of the paper's runs."""
    from archpool.paper.table import paper_runs, published_columns

    return published_columns(name) if name in {r.name for r in paper_runs()} else {}


def _paper_geometry(value: Any) -> dict[str, Any]:
    """``paper_geometry:``: the query heads and SWA layer pattern the pool's paper rows keep."""
    from archpool.pool.axes import PAPER_GEOMETRY_KEYS

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("paper_geometry", f"a mapping of {', '.join(PAPER_GEOMETRY_KEYS)}, got {type(value).__name__}")
    check_keys(value, PAPER_GEOMETRY_KEYS, "paper_geometry", "setting")
    heads = value.get("n_heads")
    if heads is not None and (not isinstance(heads, int) or isinstance(heads, bool) or not 1 <= heads <= 1024):
        raise ConfigError("paper_geometry.n_heads", f"a head count from 1 to 1024, got {heads!r}")
    return dict(value)


def _sections(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pool's ``data``, ``train``, ``eval``, ``attention`` and ``report`` mappings (empty where absent)."""
    sections = {}
    for key in ("data", "train", "eval", "attention", "report"):
        value = data.get(key) or {}
        if not isinstance(value, dict):
            raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")
        sections[key] = value
    if sections["data"].get("cache_dir") is not None:
        raise ConfigError("data.cache_dir", "a pool file cannot choose where caches go; set $ARCHPOOL_CACHE or pass --cache")
    return sections


def _milestones(milestones: Any) -> list[float]:
    """``milestones:`` fractions of pretraining, each strictly between 0 and 1."""
    if not isinstance(milestones, list) or not all(
        isinstance(m, (int, float)) and not isinstance(m, bool) and 0 < m < 1 for m in milestones
    ):
        raise ConfigError("milestones", f"a list of fractions of pretraining strictly between 0 and 1, got {milestones!r}")
    return milestones


def _run_entries(data: dict[str, Any]) -> list[Any]:
    """The ``runs:`` entries, then the ``factorial:`` cells; at least one."""
    if not isinstance(data.get("runs") or [], list):
        raise ConfigError("runs", f"must be a list of runs, got {data.get('runs')!r}")
    entries = list(data.get("runs") or [])
    if data.get("factorial"):
        entries += _expand_factorial(data["factorial"])
    if not entries:
        raise ConfigError("runs", "the pool has no runs (give `runs:` or `factorial:`)")
    return entries


def _parse_runs(entries: list[Any], ctx: _Ctx) -> list[RunSpec | CheckpointRunSpec]:
    """Every entry's runs (one per seed), within the run limit and uniquely named."""
    runs: list[RunSpec | CheckpointRunSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        for run in _parse_run(entry, i, ctx):
            _check_run_count(len(runs) + 1)
            if run.name in seen:
                raise ConfigError(f"runs[{run.name}].name", f"duplicate run name (entries {seen[run.name]} and {i})")
            seen[run.name] = i
            runs.append(run)
    return runs


def _check_extension_archs(extension: list[PoolRecipe], runs: list[RunSpec | CheckpointRunSpec]) -> None:
    """Every architecture an extension recipe names (``archs:``) is one of the pool's."""
    archs = {r.arch for r in runs}
    for i, recipe in enumerate(extension):
        unknown = sorted(set(recipe.archs or ()) - archs)
        if unknown:
            raise ConfigError(
                f"extension[{i}].archs", f"no architecture {unknown[0]!r} in the pool; it has {', '.join(sorted(archs))}"
            )


def _texts(value: Any, base_dir: Path) -> list[str]:
    """``texts:`` plain-text files (relative to the pool file) that checkpoint runs' attention reads."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError("texts", f"a list of plain-text files, got {value!r}")
    paths = [p if p.is_absolute() else base_dir / p for p in (Path(v).expanduser() for v in value)]
    for v, p in zip(value, paths):
        if not p.is_file():
            raise ConfigError("texts", f"no text file {v!r} ({p})")
    return [str(p.resolve()) for p in paths]


def _jobs(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError("jobs", f"a positive integer (runs in parallel), got {value!r}")
    return value


def _parse_seeds(value: Any, field_name: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(field_name, f"a seed count must be > 0, got {value}")
        _check_seed_count(value, field_name)
        return list(range(value))
    if isinstance(value, list) and len(value) > MAX_SEEDS:
        _check_seed_count(len(value), field_name)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in value)
    ):
        if len(set(value)) != len(value):
            raise ConfigError(field_name, f"duplicate seeds in {value}")
        return list(value)
    raise ConfigError(field_name, f"a seed count or a non-empty list of integers in [0, {MAX_SEED}], got {value!r}")


def pretrain_configs(train: dict[str, Any], runs: list[RunSpec], milestones: list[float]) -> dict[tuple[int, int], TrainConfig]:
    """Every run's pretraining ``TrainConfig`` by (context, seed), built once, as the pretrain stage gets it
    (:meth:`PoolSpec.pretrain_config`), its batch geometry checked, so that a pool whose training cannot
    start never starts."""
    out: dict[tuple[int, int], TrainConfig] = {}
    for ctx, seed in sorted({(r.pretrain_ctx, r.seed) for r in runs}):
        try:
            out[ctx, seed] = cfg = run_train_config(train, ctx, seed, milestones)
            cfg.accumulation_steps(ctx, world_size=1)
        except ConfigError as e:
            raise ConfigError(e.field, f"{e.message} (runs pretrained at {ctx} tokens)") from None
    return out


def _check_packing(section: DataSection, train: dict[str, Any], runs: list[RunSpec | CheckpointRunSpec]) -> None:
    """Warn when task documents are packed several to a sequence without a document mask: packed
    MQAR documents reuse keys, so a query can match another document's binding (ambiguous answers)."""
    mix = section.tasks
    if mix is None or mix.fit_context or train.get("intra_doc_mask"):
        return
    longest = max(r.pretrain_ctx for r in runs)
    if mix.mix_unit is not None and mix.mix_unit < longest:
        warnings.warn(
            f"data.tasks.mix_unit {mix.mix_unit} < the pretraining context {longest} without train.intra_doc_mask: "
            "several task documents share a sequence and can answer each other's queries; "
            "set intra_doc_mask: true or fit_context: true",
            stacklevel=2,
        )


def _expand_factorial(spec: Any) -> list[dict[str, Any]]:
    if not isinstance(spec, dict) or not isinstance(spec.get("axes"), dict) or not spec["axes"]:
        raise ConfigError("factorial.axes", "a mapping of axis name -> list of values")
    check_keys(spec, ("axes", "base", "name"), "factorial")
    axes = spec["axes"]
    for k, v in axes.items():
        if k not in AXES:
            raise ConfigError(f"factorial.axes.{k}", f"unknown axis; allowed: {', '.join(AXES)}")
        if not isinstance(v, list) or not v:
            raise ConfigError(f"factorial.axes.{k}", f"a non-empty list of values, got {v!r}")
    base = spec.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError("factorial.base", "a run mapping shared by every factorial cell")
    template = spec.get("name")
    keys = list(axes)
    _check_run_count(math.prod(len(v) for v in axes.values()), "factorial.axes")
    entries = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        values = dict(zip(keys, combo))
        entry = copy.deepcopy(base)
        entry["axes"] = {**entry.get("axes", {}), **values}
        if template:
            try:
                entry["name"] = str(template).format(**{k: axis_code(k, v) for k, v in values.items()})
            except KeyError as e:
                raise ConfigError("factorial.name", f"template names unknown axis {e}; axes: {', '.join(keys)}") from None
            except (IndexError, ValueError) as e:
                raise ConfigError("factorial.name", f"not a name template such as '{{qk_norm}}_{{swa}}' ({e})") from None
        else:
            entry["name"] = "_".join(axis_code(k, v) for k, v in values.items())
        entries.append(entry)
    return entries


def _parse_run(entry: Any, index: int, ctx: _Ctx) -> list[RunSpec | CheckpointRunSpec]:
    label = _run_label(entry, index)
    name = entry["name"]
    if is_checkpoint_entry(entry):
        if isinstance(entry.get("columns"), dict):
            check_columns(entry["columns"], f"{label}.columns")
        return [parse_checkpoint_run(entry, label, ctx.base_dir)]
    check_keys(entry, sorted(RUN_KEYS), label, "run field")

    size = entry.get("size", ctx.size)
    if size not in SIZES:
        raise ConfigError(f"{label}.size", f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    long_ctx = ctx.long_ctx if size == ctx.size else SIZES[size]["ctx"]

    # 1. the base model: pool `model:` section, then the run's preset, then raw overrides
    model = _base_model(entry, size, ctx, label)
    pretrain_ctx = model.get("max_seq_len", long_ctx)
    columns: dict[str, Any] = {}

    # 2. paper-unit rows (olmpool): scale each ratio to this size
    paper = entry.get("paper")
    if paper is not None:
        model, pretrain_ctx, columns = scale_paper_row(paper, model, size, long_ctx, f"{label}.paper", ctx.paper_geometry)
        paper_name = paper.get("name") if isinstance(paper, dict) else None
        columns.update(_published(paper_name or name))

    # 3. axes in pool units
    pretrain_ctx = _apply_axes(entry.get("axes") or {}, model, pretrain_ctx, long_ctx, label)

    # 4. raw model overrides win over everything
    pretrain_ctx = _apply_overrides(entry.get("model") or {}, model, pretrain_ctx, ctx, label)
    model["max_seq_len"] = model_ctx(pretrain_ctx, model, long_ctx)

    try:
        cfg = pool_model_config(model, f"{label}.model")
    except TypeError as e:
        raise ConfigError(f"{label}.model", str(e)) from None

    init = str(entry.get("init", "shared"))
    fp8 = entry.get("fp8", columns.pop("fp8", False))
    if fp8 not in (0, 1, True, False):
        raise ConfigError(f"{label}.fp8", f"a boolean (recorded as a confound column, never trained), got {fp8!r}")
    extra = entry.get("columns") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{label}.columns", "a mapping of extra results columns")
    check_columns(extra, f"{label}.columns")
    columns.update(extra)
    seeds = _parse_seeds(entry["seeds"], f"{label}.seeds") if "seeds" in entry else ctx.seeds

    return [
        RunSpec(
            name=f"{name}_s{seed}",
            arch=name,
            seed=seed,
            model=copy.deepcopy(cfg),
            pretrain_ctx=int(pretrain_ctx),
            init=init,
            init_seed=init_seed(init, seed),
            fp8=bool(fp8),
            params=cfg.num_params(),
            columns=dict(columns),
        )
        for seed in seeds
    ]


def _run_label(entry: Any, index: int) -> str:
    """``runs[NAME]`` for an entry with a valid name; an entry without one is an error at ``runs[INDEX]``."""
    if not isinstance(entry, dict):
        raise ConfigError(f"runs[{index}]", "a run is a mapping with at least a name")
    name = entry.get("name")
    plain = isinstance(name, str) and name != "" and all(c.isalnum() or c in "-_." for c in name)
    label = f"runs[{name}]" if plain else f"runs[{index}]"
    if not plain:
        raise ConfigError(f"{label}.name", f"a run needs a name of letters, digits, '-', '_', '.', got {name!r}")
    check_name(f"{label}.name", name)
    return label


def _base_model(entry: dict[str, Any], size: str, ctx: _Ctx, label: str) -> dict[str, Any]:
    """The run's preset (or the plain size) under the pool's ``model:`` section; a pool ``rope:``
    section extends the preset's."""
    base = dict(ctx.base_model)
    preset = entry.get("preset", base.pop("preset", None))
    base.pop("size", None)
    try:
        model = preset_dict(preset, size) if preset else plain_size(size)
    except ConfigError as e:
        raise e.under(label) from None
    if preset and base.get("rope"):
        base["rope"] = {**model.get("rope", {}), **base["rope"]}
    model.update(base)
    return model


def _apply_axes(axes: Any, model: dict[str, Any], pretrain_ctx: int, long_ctx: int, label: str) -> int:
    """Set the run's ``axes:`` (pool units) in ``model``; returns the pretraining context."""
    if not isinstance(axes, dict):
        raise ConfigError(f"{label}.axes", "a mapping of axis -> value")
    for k in axes:
        if k not in AXES:
            raise ConfigError(f"{label}.axes.{k}", f"unknown axis; allowed: {', '.join(AXES)}")
    if NORM in axes:
        model[NORM] = axes[NORM]
    if QK_NORM in axes:
        model[QK_NORM] = canonical_qk_norm(axes[QK_NORM])
    if N_KV_HEADS in axes:
        model[N_KV_HEADS] = kv_heads(axes[N_KV_HEADS], model["n_heads"], f"{label}.axes.n_kv_heads")
    if PRETRAIN_CTX in axes:
        pretrain_ctx = context(axes[PRETRAIN_CTX], long_ctx, f"{label}.axes.pretrain_ctx")
    if SWA in axes:
        model.update(swa(axes[SWA], long_ctx, f"{label}.axes.swa"))
    return pretrain_ctx


def _apply_overrides(overrides: Any, model: dict[str, Any], pretrain_ctx: int, ctx: _Ctx, label: str) -> int:
    """Set the run's raw ``model:`` fields in ``model`` (the data's vocabulary unless a model section
    pins ``vocab_size``); returns the pretraining context (``max_seq_len`` when given)."""
    if not isinstance(overrides, dict):
        raise ConfigError(f"{label}.model", "a mapping of ModelConfig fields")
    model.update(overrides)
    if ctx.data_vocab and "vocab_size" not in overrides and "vocab_size" not in ctx.base_model:
        model["vocab_size"] = ctx.data_vocab
    if "max_seq_len" in overrides:
        pretrain_ctx = overrides["max_seq_len"]
    return pretrain_ctx


def init_seed(group: str, seed: int) -> int:
    """Runs of one init group and seed share initial weights (where name and shape agree)."""
    if group == "shared":
        return seed
    return int.from_bytes(hashlib.sha256(f"init|{group}|{seed}".encode()).digest()[:4], "little")


# ---------------------------------------------------------------------------------------------
# bounds and checks that need the whole pool: every rule a stage enforces later, checked before work


def _check_seed_count(n: int, field_name: str) -> None:
    if n > MAX_SEEDS:
        raise ConfigError(field_name, f"{n:,} seeds exceed the cap of {MAX_SEEDS:,} (each seed trains every architecture)")


def _check_run_count(n: int, field_name: str = "runs") -> None:
    if n > MAX_RUNS:
        raise ConfigError(field_name, f"{n:,} runs exceed the cap of {MAX_RUNS:,} trained models in one pool")


def reserved_column(name: str) -> bool:
    """A results.csv column archpool writes itself: a design column, a metric at a length, a ladder rung."""
    from archpool.columns import DESIGN_COLUMNS, LENGTH_RE, RUNG_SEP

    stage_metrics = {"params_b", "pretrain_loss", "stability", "extension_loss", "val_ppl_short", "val_ppl_long"}
    return name in DESIGN_COLUMNS or name in stage_metrics or RUNG_SEP in name or bool(LENGTH_RE.match(name))


def check_columns(columns: dict[Any, Any], field_name: str) -> None:
    """A run's extra ``columns:``: string names archpool does not write itself, one plain value each."""
    for key, value in columns.items():
        if not isinstance(key, str) or not key.strip() or not key.isprintable():
            raise ConfigError(field_name, f"a column name is a printable string, got {key!r}")
        if reserved_column(key):
            raise ConfigError(f"{field_name}.{key}", "a column archpool writes itself (design column or metric); rename it")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"{field_name}.{key}", f"one value (text or number) per run, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{field_name}.{key}", f"must be a finite number, got {value!r}")


def check_before_work(
    runs: list[Any],
    section: DataSection,
    pretrain: dict[tuple[int, int], TrainConfig],
    extension: list[PoolRecipe],
    report: ReportSettings,
    eval_settings: EvalSettings,
    long_ctx: int,
    backend: str,
) -> None:
    """The rules stages enforce late, checked when the pool is validated: run names the file system
    accepts, the optional packages training asks for, extensions that can run, a model vocabulary that
    holds the tokenizer's, reserved task tokens that hold the MQAR vocabulary, a report target some
    stage produces for every run."""
    _check_run_names(runs)
    trained = [r for r in runs if isinstance(r, RunSpec)]  # checkpoint runs are neither trained nor extended
    if backend == "real":
        _check_packages(pretrain)
        _check_extensions(trained, pretrain, extension)
        _check_vocab(trained, section)
        _check_task_vocab(trained, section, eval_settings)
        _check_report_target(report, eval_settings, long_ctx)
        _check_target_runs(report, eval_settings, runs, extension, long_ctx)
        _check_calibration(report, eval_settings)


def check_harness_inputs(e: EvalSettings, base_dir: Path, long_ctx: int) -> None:
    """The harness suites' inputs, before any stage rather than after pretraining and extension: lm-eval's RULER
    (``eval.harness.ruler``) installed and its request valid at every phase's lengths (:func:`_check_ruler`);
    HELMET's data files of ``eval.harness.helmet_data`` (its ``path`` relative to the pool file's directory),
    read whole at every length an eval node will ask for: a missing directory or file, a line that is not
    JSON in UTF-8, a record without HELMET's fields or with an empty gold answer is refused."""
    harness = e.harness
    if not e.enabled or harness is None:
        return
    phases = [True, False] if e.base else [False]
    if harness.ruler is not None:
        _check_ruler(harness.ruler, {base: e.lengths_at(base, long_ctx) for base in phases})
    if harness.helmet_data is None:
        return
    from archpool.eval.helmet_data import check_data, request_from

    settings = harness.helmet_data
    lengths = sorted({L for base in phases for L in (settings.lengths or e.lengths_at(base, long_ctx))})
    r = request_from(settings, lengths, base_dir, None, None)
    try:
        check_data(r.data_dir, r.categories, r.lengths, r.limit, r.shots, r.seed)
    except DataError as err:
        raise ConfigError(f"{settings.PATH}.path", str(err)) from None


def _check_ruler(settings: RulerSettings, phase_lengths: dict[bool, list[int]]) -> None:
    """lm-eval's RULER as the eval stage runs it: its packages installed (:func:`lm_eval_version`) and its
    request (:func:`harness_request_from`) valid at each phase's lengths (``phase_lengths``: before extension
    with True), which it takes when ``eval.harness.ruler.lengths`` is unset. Downloads are refused by
    ``archpool run`` (:func:`harness_downloads`), not here."""
    from archpool.eval.harness import harness_request_from, lm_eval_version

    try:
        lm_eval_version()
    except ConfigError as err:
        raise ConfigError(settings.PATH, err.message) from None
    for base, lengths in phase_lengths.items():
        try:
            harness_request_from(settings, lengths, None, None, allow_download=True)
        except ConfigError as err:
            phase = "before extension" if base else "after extension"
            where = "" if settings.lengths else f" (unset: the eval's lengths {phase}, {', '.join(map(str, lengths))})"
            raise ConfigError(f"{settings.PATH}.{err.field.rpartition('.')[2]}", f"{err.message}{where}") from None


def check_text_stages(section: DataSection, trained: list[RunSpec], evaluate: bool, attend: bool) -> None:
    """The eval and attention stages read a trained run's text through the data store's tokenizer (its tasks,
    haystacks and held-out documents); the synthetic stream (``data.synthetic``) prepares no store and has no
    tokenizer, so a pool of trained runs on it that evaluates or analyses attention is refused here, not
    after pretraining and extension."""
    if section.synthetic is None or not trained:
        return
    for name, on in (("eval", evaluate), ("attention", attend)):
        if on:
            raise ConfigError(
                f"{name}.enabled",
                f"the {name} stage reads text through the data store's tokenizer, and data.synthetic prepares none "
                f"(token ids only); set {name}: {{enabled: false}} or train on text (data.sources)",
            )


def check_attention_inputs(
    runs: list[Any], attention: AttentionSettings, e: EvalSettings, extension: list[PoolRecipe], long_ctx: int
) -> None:
    """The attention stage's settings as each of its analyses will run them (:func:`analysis_settings`: the run's
    pretraining context and the analysis length filling what ``attention:`` leaves unset), and an explicit
    ``attention.bos_id`` inside every trained model's vocabulary (:func:`check_bos_id`). A trained run is
    analysed at the primary recipe's length (when the pool extends), a checkpoint run at the longest eval
    length after extension."""
    from archpool.attention.settings import analysis_settings, check_bos_id

    for r in runs:
        if isinstance(r, RunSpec):
            if not extension:
                continue
            length, what = extension[0].length(long_ctx), f"extension[{extension[0].name}]'s length"
        else:
            length, what = max(e.lengths_at(False, long_ctx)), "the longest eval length after extension"
        try:
            analysis_settings(attention, r.pretrain_ctx, length)
        except ConfigError as err:
            raise ConfigError(err.field, f"{err.message} (run {r.name}, analysed at {length} tokens: {what})") from None
        if isinstance(r, RunSpec) and attention.bos_id is not None:
            try:
                check_bos_id(attention.bos_id, r.model.vocab_size)
            except ConfigError as err:
                raise ConfigError(f"{attention.PATH}.{err.field}", f"{err.message} (run {r.name})") from None


def harness_downloads(e: EvalSettings) -> list[str]:
    """The lm-eval RULER tasks of ``eval.harness.ruler`` that download their data (its ``allow_download``
    lets them): a pool naming any runs only under ``archpool run --allow-download``."""
    if not e.enabled or e.harness is None or e.harness.ruler is None:
        return []
    from archpool.eval.harness import DOWNLOADS

    return [t for t in e.harness.ruler.tasks if t in DOWNLOADS]


def _check_run_names(runs: list[Any]) -> None:
    from archpool.names import MAX_NAME_BYTES

    for r in runs:
        if len(r.name.encode("utf-8")) > MAX_NAME_BYTES:
            raise ConfigError(
                f"runs[{r.arch}].name",
                f"the run name {r.name[:40]!r}… with its seed suffix is {len(r.name.encode('utf-8'))} bytes; "
                f"a directory name is at most {MAX_NAME_BYTES}",
            )


def _check_packages(pretrain: dict[tuple[int, int], TrainConfig]) -> None:
    """The optional packages the ``train:`` section asks for (``wandb``) are installed, before data is prepared."""
    for cfg in list(pretrain.values())[:1]:  # every run's asks for the same packages
        cfg.check_packages()


def _check_task_vocab(runs: list[RunSpec], section: DataSection, e: EvalSettings) -> None:
    """The dense tasks the pool evaluates fit the data's reserved task tokens (``data.task_tokens``; the
    training mix's are checked with the data section)."""
    from archpool.tasks import is_dense, task_config

    if not runs or section.data is None or not section.data.task_tokens or not e.enabled:
        return
    for task in _evaluated_tasks(e):
        if is_dense(task):
            config = e.task_configs.get(task) or task_config(task)
            why = config.reserved_tokens_error(section.data.task_tokens)
            if why:
                raise ConfigError(f"eval.task_params.{task}", why)


def _evaluated_tasks(e: EvalSettings) -> list[str]:
    """The tasks the eval stage scores: the task list, then the task suites' tasks (every scored suite's
    when only ``short`` is asked: it scores them at the pretraining context)."""
    from archpool.names import SCORED_SUITES
    from archpool.tasks import SUITES

    request = e.request(False, 16)
    names = [*request.tasks, *(t for t in request.suite_tasks() if t not in request.tasks)]
    if not names and "short" in request.suites:
        names = [t for s in SCORED_SUITES for t in SUITES[s]]
    return names


def _check_extensions(runs: list[RunSpec], pretrain: dict[tuple[int, int], TrainConfig], extension: list[PoolRecipe]) -> None:
    """Plan every recipe (its extend-stage config) for every distinct (model, pretraining context) it
    applies to, as the extend stage will, and split each of its stages' batches into micro-batches as
    the trainer will: a length within the pretraining context, more warmup than steps or a global batch
    that does not split fails here."""
    from archpool.train.extension_plan import plan_extension

    seen: set[tuple[str, str]] = set()
    for recipe in extension:
        ext = recipe.config
        assert ext is not None  # the real backend's recipes are resolved (parse_extensions)
        for r in runs:
            if not recipe.applies(r.arch):
                continue
            key = (recipe.name, repr((r.model.to_dict(), r.pretrain_ctx, r.seed)))
            if key in seen:
                continue
            seen.add(key)
            try:
                plan = plan_extension(r.model, pretrain[r.pretrain_ctx, r.seed], ext, "final")
                for stage in plan.stages:  # the trainer's geometry of each stage
                    plan.train.accumulation_steps(stage.seq_len, world_size=1, prefix="extension")
            except ConfigError as e:
                field_name = e.field.replace("extension.", f"extension[{recipe.name}].", 1)
                raise ConfigError(field_name, f"{e.message} (run {r.name}, pretrained at {r.pretrain_ctx} tokens)") from None


def _check_vocab(runs: list[RunSpec], section: DataSection) -> None:
    """Every model's ``vocab_size`` holds the data's vocabulary (the trained BPE's ``vocab_size``, a given
    tokenizer's size, or the synthetic stream's ``vocab_size``)."""
    need, what = None, ""
    if section.synthetic is not None and section.synthetic.vocab_size is not None:
        need, what = section.synthetic.vocab_size, "data.synthetic.vocab_size"
    elif section.data is not None and section.data.tokenizer is not None:
        from archpool.errors import DataError
        from archpool.tokenizer import Tokenizer

        try:
            need, what = Tokenizer.load(section.data.tokenizer).vocab_size, f"the tokenizer {section.data.tokenizer}"
        except DataError as e:
            raise ConfigError("data.tokenizer", str(e)) from None
    elif section.data is not None:
        need, what = section.data.vocab_size, "data.vocab_size"
    for r in runs:
        if need is not None and r.model.vocab_size < need:
            raise ConfigError(
                f"runs[{r.arch}].model.vocab_size", f"{r.model.vocab_size} is smaller than the data's vocabulary ({what}: {need})"
            )


def _check_calibration(report: ReportSettings, e: EvalSettings) -> None:
    """``report.calibrate`` calibrates the target's own task: a dense task scored after extension, a knob
    that is one of the task's parameters, and values its generator accepts (with the pool's other
    parameters of that task)."""
    from archpool.pool.sections import validate_task_params
    from archpool.tasks import is_dense, task_config

    cal = report.calibrate
    if cal is None:
        return
    key = report.target_key
    if key is None or key.base or not key.metric.endswith(("_acc", "_lp")):
        raise ConfigError(
            "report.calibrate",
            f"needs a report.target that is a task's accuracy or log-probability after extension, got {report.target!r}",
        )
    task = key.metric.rpartition("_")[0]
    if cal.task not in (None, task) or not _is_dense(task, is_dense):
        raise ConfigError(
            "report.calibrate.task", f"calibrates the target's task ({task!r}), a dense task; got {cal.task or task!r}"
        )
    known = sorted(task_config(task).generator_params())
    if cal.knob not in known:
        raise ConfigError("report.calibrate.knob", f"{cal.knob!r} is not a parameter of {task}; allowed: {', '.join(known)}")
    for v in cal.values:
        validate_task_params({task: {**e.task_params.get(task, {}), cal.knob: v}}, "report.calibrate.values")


def _is_dense(task: str, is_dense: Callable[[str], bool]) -> bool:
    try:
        return bool(is_dense(task))
    except ConfigError:
        return False


def _check_report_target(report: ReportSettings, e: EvalSettings, long_ctx: int) -> None:
    """A ``report.target`` that names a length must name one the eval stage measures in that phase;
    a design column is never a target."""
    from archpool.columns import DESIGN_COLUMNS, LENGTH_RE, split_rung

    target = report.target
    if not target:
        return
    if target in DESIGN_COLUMNS:
        raise ConfigError("report.target", f"{target!r} is a design column, not a metric")
    m = LENGTH_RE.match(re.sub(r"\[[^\]]*\]$", "", split_rung(target)[0]))  # a distance bucket aside
    if m is None:
        return
    base = bool(m["base"]) or m["phase"] == "pre"
    lengths = e.lengths_at(base, long_ctx) if e.enabled and (e.base or not base) else []
    if int(m["length"]) not in lengths:
        phase = "before extension" if base else "after extension"
        raise ConfigError(
            "report.target",
            f"{target!r}: no stage measures length {m['length']} {phase} (eval lengths: {', '.join(map(str, lengths)) or 'none'})",
        )


def _check_target_runs(
    report: ReportSettings, e: EvalSettings, runs: list[Any], extension: list[PoolRecipe], long_ctx: int
) -> None:
    """A ``report.target`` score column (``[base_][<recipe>_]<task>_<metric>@<length>[[<bucket>]][#<rung>]``) is
    measured by every run the report compares: its task (or suite) evaluated in that mode, its distance
    bucket one the task's buckets make, its recipe and rung ones the pool extends every run with.
    Otherwise the runs that lack it are named (checkpoint runs are not extended; a recipe with ``archs``
    extends only those)."""
    from archpool.columns import rung_budget

    key = report.target_key
    if report.target is None or key is None or not e.enabled:
        return
    metric, recipe = key.metric, None
    if not key.base:
        recipe = next((r for r in extension[1:] if metric.startswith(f"{r.name}_")), extension[0] if extension else None)
        if recipe is not None and recipe is not extension[0]:
            metric = metric[len(recipe.name) + 1 :]
    _check_target_metric(report.target, metric, key, e, long_ctx)
    if key.rung and not key.base:
        budget = rung_budget(key.rung)
        if recipe is None or not recipe.budgets or (budget is not None and budget not in recipe.budgets):
            ladder = (
                f"recipe {recipe.name}'s budgets are {', '.join(map(str, recipe.budgets)) or 'none'}" if recipe else "no recipe"
            )
            raise ConfigError("report.target", f"{report.target!r}: no ladder rung {key.rung} ({ladder})")
    plain = recipe is None or recipe is extension[0]
    lacking = [r.name for r in runs if not _measures(r, key, recipe, plain, e)]
    if lacking:
        shown = ", ".join(lacking[:8]) + (f" and {len(lacking) - 8} more" if len(lacking) > 8 else "")
        hint = (
            f"; recipe {recipe.name} is a ladder: name a rung (#ext<N>) or #ladder_mean"
            if recipe and recipe.budgets and not key.rung
            else ""
        )
        raise ConfigError(
            "report.target", f"{report.target!r} is not measured for {len(lacking)} of {len(runs)} runs: {shown}{hint}"
        )


def _measures(run: Any, key: Any, recipe: PoolRecipe | None, plain: bool, e: EvalSettings) -> bool:
    """Whether ``run``'s stages write column ``key`` of recipe ``recipe`` (``plain``: the primary recipe's
    or none, whose columns have no prefix): the eval's phase, the recipe and the ladder rung."""
    if key.base:  # before extension: never a rung
        return not key.rung and (bool(run.pretrained) if not isinstance(run, RunSpec) else e.base)
    if not isinstance(run, RunSpec):  # a checkpoint run's checkpoint: plain columns, no ladder
        return plain and not key.rung
    if recipe is None or not recipe.applies(run.arch):
        return False
    return bool(key.rung) == bool(recipe.budgets)


def _check_target_metric(target: str, metric: str, key: Any, e: EvalSettings, long_ctx: int) -> None:
    """The target's task is evaluated, in a mode that makes its metric, and its distance bucket is one
    the task's buckets make at that length (``archpool.eval.dense``'s rule)."""
    from archpool.names import SCORED_SUITES
    from archpool.tasks import dense_family, is_dense, task_names

    tasks = _evaluated_tasks(e)
    modes = list(e.modes or ["ll"])
    task = max((t for t in task_names() if metric.startswith(f"{t}_")), key=len, default=None)
    suite = next((s for s in SCORED_SUITES if metric.startswith(f"{s}_")), None)
    name = task or suite
    if name is None:
        return  # a metric this check does not know (LongPPL, perplexity): the eval's own rules apply
    suffix = metric[len(name) + 1 :]
    if task is not None and task not in tasks:
        raise ConfigError("report.target", f"{target!r}: task {task} is not evaluated (eval tasks: {', '.join(tasks) or 'none'})")
    if task is None and suite not in e.request(False, 16).suites:
        raise ConfigError("report.target", f"{target!r}: suite {suite} is not evaluated")
    dense = task is not None and is_dense(task)
    allowed = dense_family(task).stats if dense and task is not None else (*modes, *(["lp"] if "ll" in modes and task else []))
    if suffix not in allowed:
        raise ConfigError("report.target", f"{target!r}: {name} is scored as {', '.join(f'{name}_{a}' for a in allowed)}")
    if key.filter:
        from archpool.eval.dense import bucket_labels

        labels = bucket_labels(e.task_params.get(task, {}).get("buckets"), key.length) if dense and task is not None else []
        if key.filter not in labels:
            raise ConfigError(
                "report.target",
                f"{target!r}: no distance bucket [{key.filter}] at length {key.length} (buckets: {', '.join(labels) or 'none'})",
            )
