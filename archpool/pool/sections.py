"""The pool's typed sections besides ``model`` and ``data``: extension recipes, evaluation, attention, report.

Each is validated when the pool is loaded, so a pool that cannot finish never starts: an unknown
recipe, task, suite or setting is a named error before any training. The pool holds these objects,
its stage nodes carry them (content keys hash their ``to_dict()``) and the stage adapters receive them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from archpool import study
from archpool.attention.settings import Settings as AttentionSettings
from archpool.columns import ColumnKey, is_accuracy
from archpool.config import Config, rerooted
from archpool.errors import ConfigError
from archpool.eval.api import EvalRequest
from archpool.eval.harness import HarnessSettings
from archpool.model.config import MAX_SEQ_LEN
from archpool.names import MODES, SUITE_NAMES, check_recipe_name
from archpool.tasks import TaskConfig, get_task
from archpool.train.config import ExtensionConfig, extension_length

DEFAULT_LENGTH_RATIO = ExtensionConfig.length_ratio  # 8: the paper extends 8K models to 64K
MAX_SAMPLES = 100_000  # evaluation samples per task and length
MAX_LENGTH_RATIO = 1024  # an evaluation length as a multiple of the pool's long context


# ---------------------------------------------------------------------------------------------- milestones
def milestone_key(fraction: float) -> str:
    """How a pretraining milestone (a fraction of pretraining) is named in node ids, pool results and
    the pretrain stage's result: ``0.5``, ``0.25``."""
    return f"{fraction:g}"


def milestone_steps(fractions: list[float], total_steps: int) -> dict[str, int]:
    """The pretraining step of each ``milestones:`` fraction (at least step 1), keyed by :func:`milestone_key`."""
    return {milestone_key(m): max(1, round(m * total_steps)) for m in fractions}


# ---------------------------------------------------------------------------------------------- extension
POOL_RECIPE_KEYS = ("name", "archs", "seq_len")  # a pool recipe's keys that are not ExtensionConfig fields


@dataclass(frozen=True)
class PoolRecipe:
    """One ``extension:`` recipe of a pool: the mapping as written (what a non-``real`` backend's
    extend stage reads), its name and architectures, and for the ``real`` backend the extend stage's
    config, resolved to the pool's length (:func:`extension_config`), which is the one form the pool's
    record (:meth:`to_dict`) keeps."""

    name: str
    written: dict[str, Any]
    archs: tuple[str, ...] | None = None  # None: every architecture
    config: ExtensionConfig | None = None  # the real backend's; None for other backends

    def applies(self, arch: str) -> bool:
        """Whether this recipe extends runs of architecture ``arch``."""
        return not self.archs or arch in self.archs

    @property
    def budgets(self) -> list[int]:
        """The ladder of step budgets, ascending (empty: no ladder)."""
        return sorted((self.config.budgets if self.config is not None else self.written.get("budgets")) or [])

    def length(self, long_ctx: int) -> int:
        """The length this recipe extends every member to: ``length``, or ``length_ratio`` (default 8)
        × the pool's long context."""
        if self.config is not None:
            return self.config.target_length(long_ctx)
        written = self.written
        return extension_length(written.get("length"), written.get("length_ratio", DEFAULT_LENGTH_RATIO), long_ctx)

    def stage_config(self) -> ExtensionConfig | dict[str, Any]:
        """What the extend stage receives: the resolved config (real backend) or the mapping as written."""
        return self.config if self.config is not None else dict(self.written)

    def to_dict(self) -> dict[str, Any]:
        """The recipe as the pool's record keeps it: the resolved config with its name and architectures
        (``real`` backend; :func:`parse_extensions` reads it back to the same config), else as written."""
        if self.config is None:
            return dict(self.written)
        return {**self.config.to_dict(), **({"archs": list(self.archs)} if self.archs else {})}


def extension_config(recipe: dict[str, Any], long_ctx: int, source: str = "final") -> ExtensionConfig:
    """The extend stage's config for one pool recipe (its ``name``; ``recipe`` defaults to the name
    when that is a recipe, else ntk), extending to the pool's length from ``source``: the recipe as
    written, its ``length_ratio`` resolved to a ``length``."""
    recipe = dict(recipe)
    name = recipe["name"]
    recipe.setdefault("recipe", name if name in study.RECIPES else study.DEFAULT_RECIPE)
    for key in POOL_RECIPE_KEYS:
        recipe.pop(key, None)
    recipe.update(name=name, source=source)
    written = ExtensionConfig.from_dict(recipe, f"extension[{name}]")  # types checked before any arithmetic
    length = written.target_length(long_ctx)
    try:
        return dataclasses.replace(written, length=length, length_ratio=DEFAULT_LENGTH_RATIO)
    except ConfigError as e:
        raise rerooted(e, ExtensionConfig.PATH, f"extension[{name}]") from None


def parse_extensions(value: Any, long_ctx: int, backend: str) -> list[PoolRecipe]:
    """The pool's recipes (each named; names unique, plain and not reserved), each with the extend
    stage's config validated as the extend stage will read it (only for the real backend, whose
    configs these are: others define their own). ``archs: [names]`` limits a recipe to those
    architectures (a remedy for one arm); the first recipe, the primary one, extends every run."""
    if value is None:
        value = [dict(name=study.DEFAULT_RECIPE)]
    recipes = value if isinstance(value, list) else [value]
    out: list[PoolRecipe] = []
    names: set[str] = set()
    for i, r in enumerate(recipes):
        if not isinstance(r, dict):
            raise ConfigError(f"extension[{i}]", "an extension recipe is a mapping")
        r = dict(r)
        r.setdefault("name", r.get("recipe", f"recipe{i}"))
        check_recipe_name(f"extension[{i}].name", r["name"])
        if r["name"] in names:
            raise ConfigError(f"extension[{i}].name", f"duplicate recipe name {r['name']!r}")
        names.add(r["name"])
        archs = r.get("archs")
        if archs is not None and (not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs)):
            raise ConfigError(f"extension[{i}].archs", f"a non-empty list of architecture names, got {archs!r}")
        if archs is not None and i == 0:
            raise ConfigError(f"extension[{i}].archs", "the first (primary) recipe extends every run; limit a later one")
        config = extension_config(r, long_ctx) if backend == "real" else None
        out.append(PoolRecipe(name=r["name"], written=r, archs=tuple(archs) if archs else None, config=config))
    return out


# ---------------------------------------------------------------------------------------------- eval
@dataclass(frozen=True)
class EvalSettings(Config):
    """``eval:`` — what the eval stage measures, before extension (``base_`` lengths) and after."""

    PATH = "eval"
    KEY = "setting"

    enabled: bool = True
    base: bool = True  # also evaluate (and analyse attention of) the pretrained model
    tasks: list[str] | None = None  # an explicit task list (instead of suites)
    suites: list[str] | None = None  # default: tiny, or none when tasks are listed
    modes: list[str] = field(default_factory=lambda: ["ll"])
    n_samples: int = study.EVAL_SAMPLES
    seed: int = study.EVAL_SEED
    task_params: dict[str, Any] = field(default_factory=dict)
    lengths: list[int] | None = None  # tokens, after extension
    length_ratios: list[float] | None = None  # × the pool's long context, after extension (default 1, 2, 4)
    base_lengths: list[int] | None = None
    base_length_ratios: list[float] | None = None  # before extension (default 1)
    harness: HarnessSettings | None = None  # the field's own suites: ``ruler`` (lm-eval), ``helmet_data`` (HELMET's data)

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> EvalSettings:
        """The ``eval:`` mapping (empty or null: every default)."""
        return super().from_dict(d or {}, path)

    def to_dict(self) -> dict[str, Any]:
        """The section as a mapping; without ``harness`` when there is none, so that the stage keys of a pool
        without an lm-eval suite do not depend on that field."""
        d = super().to_dict()
        if d.get("harness") is None:
            d.pop("harness", None)
        else:  # nor on the harness suites it does not run
            d["harness"] = {k: v for k, v in d["harness"].items() if v is not None}
        return d

    def validate(self, prefix: str = "eval") -> None:
        for name in self.tasks or []:
            try:
                get_task(name)
            except ConfigError as e:
                raise ConfigError(f"{prefix}.tasks", e.message) from None
        for suite in self.suites or []:
            if suite not in SUITE_NAMES:
                raise ConfigError(f"{prefix}.suites", f"unknown suite {suite!r}; allowed: {', '.join(SUITE_NAMES)}")
        for mode in self.modes:
            if mode not in MODES:
                raise ConfigError(f"{prefix}.modes", f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
        if self.n_samples < 1:
            raise ConfigError(f"{prefix}.n_samples", f"must be >= 1, got {self.n_samples}")
        for key in ("lengths", "base_lengths", "length_ratios", "base_length_ratios"):
            values = getattr(self, key)
            if values is not None and (not values or not all(v > 0 for v in values)):
                raise ConfigError(f"{prefix}.{key}", f"a non-empty list of positive numbers, got {values!r}")
        self._validate_bounds(prefix)
        self.__dict__["task_configs"] = validate_task_params(self.task_params, f"{prefix}.task_params")

    @property
    def task_configs(self) -> dict[str, TaskConfig]:
        """The typed config of every ``task_params`` entry, built once when the section was validated."""
        return cast("dict[str, TaskConfig]", self.__dict__["task_configs"])

    def _validate_bounds(self, prefix: str) -> None:
        """Counts and lengths an evaluation can hold in memory (``MAX_SAMPLES``, ``MAX_SEQ_LEN``)."""
        if self.n_samples > MAX_SAMPLES:
            raise ConfigError(f"{prefix}.n_samples", f"{self.n_samples:,} exceeds the cap of {MAX_SAMPLES:,} samples a task")
        for key in ("lengths", "base_lengths"):
            for v in getattr(self, key) or []:
                if v > MAX_SEQ_LEN:
                    raise ConfigError(f"{prefix}.{key}", f"{v:,} tokens exceeds the longest length accepted ({MAX_SEQ_LEN:,})")
        for key in ("length_ratios", "base_length_ratios"):
            for v in getattr(self, key) or []:
                if v > MAX_LENGTH_RATIO:
                    raise ConfigError(f"{prefix}.{key}", f"{v} × the long context exceeds the cap of {MAX_LENGTH_RATIO}")

    def lengths_at(self, base: bool, long_ctx: int) -> list[int]:
        """The lengths of one phase: explicit ``[base_]lengths`` (tokens), else ``[base_]length_ratios``
        × the pool's long context (at least 16 tokens)."""
        explicit = self.base_lengths if base else self.lengths
        if explicit:
            return sorted({int(x) for x in explicit})
        ratios = (self.base_length_ratios if base else self.length_ratios) or ([1.0] if base else [1.0, 2.0, 4.0])
        return sorted({max(16, int(round(r * long_ctx))) for r in ratios})

    def suite_list(self) -> list[str]:
        return list(self.suites) if self.suites is not None else ([] if self.tasks else ["tiny"])

    def request(self, base: bool, long_ctx: int, out_dir: Path | None = None, cache_dir: Path | None = None) -> EvalRequest:
        """The evaluation of one phase (before extension with ``base``) as an ``EvalRequest``, at
        :meth:`lengths_at`, writing into ``out_dir`` with its cells in ``cache_dir``; it carries the
        section's typed task configs (:attr:`task_configs`), and one built for the same arguments is
        the same request (built once)."""
        requests: dict[tuple[Any, ...], EvalRequest] = self.__dict__.setdefault("requests", {})
        key = (base, long_ctx, out_dir, cache_dir)
        if key not in requests:
            requests[key] = EvalRequest(
                suites=self.suite_list(),
                tasks=self.tasks or (),
                lengths=self.lengths_at(base, long_ctx),
                modes=self.modes or ["ll"],
                n_samples=self.n_samples,
                seed=self.seed,
                task_params=self.task_params,
                out_dir=out_dir,
                cache_dir=cache_dir,
                configs=self.task_configs,
            )
        return requests[key]


def validate_task_params(task_params: dict[str, Any], prefix: str = "eval.task_params") -> dict[str, TaskConfig]:
    """The typed config of every ``task_params`` entry (``archpool.tasks.task_configs``): each names a
    registered task (did-you-mean otherwise) and only parameters that task has, each typed and within
    its bounds: a typo fails at validation, not after training."""
    from archpool.tasks import task_configs

    return task_configs(task_params, prefix)


# ---------------------------------------------------------------------------------------------- attention
def attention_settings(d: dict[str, Any] | None, prefix: str = "attention") -> tuple[bool, AttentionSettings]:
    """``attention:`` — (enabled, the attention stage's settings)."""
    d = dict(d or {})
    enabled = d.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{prefix}.enabled", f"expected true/false, got {enabled!r}")
    return enabled, AttentionSettings.from_dict(d, prefix)


# ---------------------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class CalibrateSettings(Config):
    """``report.calibrate:`` — the scored task's difficulty knob, measured on the pool's own checkpoints
    after its runs (:mod:`archpool.pool.calibrate`): the baseline's value at the target and every run's
    mastery at its own length, at each of ``values`` of the task parameter ``knob``; the headroom rule
    picks one (docs/extensibility.md, "Headroom")."""

    PATH = "report.calibrate"
    KEY = "setting"

    knob: str = "pair_every"
    values: list[int | float] = field(default_factory=list)
    task: str | None = None  # default: the report target's task

    def validate(self, prefix: str = "report.calibrate") -> None:
        if not self.values or len(self.values) > MAX_CALIBRATION_POINTS:
            raise ConfigError(f"{prefix}.values", f"1 to {MAX_CALIBRATION_POINTS} values of the knob, got {self.values!r}")
        if len(set(self.values)) != len(self.values):
            raise ConfigError(f"{prefix}.values", f"each value once, got {self.values!r}")


MAX_CALIBRATION_POINTS = 16


@dataclass(frozen=True)
class ReportSettings(Config):
    """``report:`` — the metric the analysis explains, the short-context threshold, covariates, findings,
    the smallest effect of interest, the headroom window and the difficulty calibration."""

    PATH = "report"
    KEY = "setting"

    target: str | None = None
    short_ctx: int | None = None  # default: half the pool's long context
    covariates: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    min_effect: float = study.MIN_EFFECT  # the smallest effect of interest (an accuracy: one point of 100)
    headroom: list[float] = field(default_factory=lambda: list(study.HEADROOM))  # the baseline's window at the target
    calibrate: CalibrateSettings | None = None

    @classmethod
    def from_dict(cls, d: Any, path: str | None = None) -> ReportSettings:
        """The ``report:`` mapping (empty or null: every default)."""
        return super().from_dict(d or {}, path)

    @property
    def target_key(self) -> ColumnKey | None:
        """``target`` typed (:class:`archpool.columns.ColumnKey`), parsed once, when the section was
        validated; None without a target or for a target that is not a score at a length."""
        return cast("ColumnKey | None", self.__dict__["target_key"])

    def validate(self, prefix: str = "report") -> None:
        self.__dict__["target_key"] = None if self.target is None else ColumnKey.parse(self.target)
        lo_hi = self.headroom
        if (
            len(lo_hi) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in lo_hi)
            or not 0 <= lo_hi[0] < lo_hi[1] <= 1
        ):
            raise ConfigError(f"{prefix}.headroom", f"[low, high] with 0 <= low < high <= 1, got {lo_hi!r}")
        problem = study.min_effect_problem(self.min_effect)
        if problem is not None:
            raise ConfigError(f"{prefix}.min_effect", problem)
        if self.short_ctx is not None and self.short_ctx < 1:
            raise ConfigError(f"{prefix}.short_ctx", f"must be a positive integer, got {self.short_ctx}")
        if self.target is not None and not self.target.strip():
            raise ConfigError(f"{prefix}.target", "an empty metric name")
        if self.target is not None and self.target in self.covariates:
            raise ConfigError(f"{prefix}.covariates", f"{self.target!r} is the target; a metric cannot explain itself")
        if self.target is not None and not is_accuracy(self.target_key or self.target):
            for name, set_ in (
                ("headroom", list(self.headroom) != list(study.HEADROOM)),
                ("calibrate", self.calibrate is not None),
            ):
                if set_:
                    raise ConfigError(
                        f"{prefix}.{name}",
                        f"the headroom rule is a window on an accuracy; the target {self.target!r} is not one "
                        "(score an accuracy column, or leave the rule out)",
                    )
