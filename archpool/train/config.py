"""Training and extension configs: validated dataclasses, and the run config file that holds them.

A run config (YAML) has sections ``model:`` (a ModelConfig, presets allowed), ``data:`` (the data
stage's config), ``train:`` (a TrainConfig) and optionally ``extension:`` (an ExtensionConfig).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from archpool.config import Config, check_keys, check_mapping
from archpool.data.section import DataSection
from archpool.errors import ConfigError
from archpool.io import read_config_file
from archpool.model.kernels import ATTENTION_FUNCTIONS
from archpool.study import DEFAULT_RECIPE, Recipe

Schedule = Literal["cosine", "linear", "wsd", "constant"]
Dtype = Literal["auto", "float32", "bfloat16"]
Parallel = Literal["auto", "none", "ddp", "fsdp"]
WandbMode = Literal["online", "offline", "disabled"]
if TYPE_CHECKING:
    AttnImpl = str  # the names below: the kernel table's, known when it is built
else:
    AttnImpl = Literal[("auto", *ATTENTION_FUNCTIONS.training())]  # auto: see TrainConfig.resolved_attn_impl
SCHEDULES: tuple[str, ...] = get_args(Schedule)
DTYPES: tuple[str, ...] = get_args(Dtype)
PARALLEL: tuple[str, ...] = get_args(Parallel)
ATTN_IMPLS: tuple[str, ...] = get_args(AttnImpl)
RUN_SECTIONS = ("model", "data", "train", "extension", "name", "description")


MAX_MICRO_BATCH = 1 << 16  # sequences in one forward pass
MAX_BATCH_TOKENS = 1 << 36  # tokens in one optimizer step
MAX_MILESTONES = 10_000  # checkpoints kept forever (each a copy of the weights)


def _check_counts(cfg: Any, prefix: str) -> None:
    """Sizes that become allocations or files, within bounds (a ConfigError instead of a MemoryError
    at the first batch): micro-batch, global batch, sequence length, milestones."""
    from archpool.model.config import MAX_SEQ_LEN

    bounds = {
        "micro_batch_size": MAX_MICRO_BATCH,
        "global_batch_tokens": MAX_BATCH_TOKENS,
        "seq_len": MAX_SEQ_LEN,
        "length": MAX_SEQ_LEN,
    }
    for name, limit in bounds.items():
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > limit:
            raise ConfigError(f"{prefix}.{name}", f"{value:,} exceeds the cap of {limit:,}")
    for name in ("milestones", "budgets"):
        value = getattr(cfg, name, None)
        if isinstance(value, list) and len(value) > MAX_MILESTONES:
            raise ConfigError(f"{prefix}.{name}", f"{len(value):,} entries exceed the cap of {MAX_MILESTONES:,}")


def _positive_int(value: Any, name: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(name, f"must be a positive integer, got {value!r}")


@dataclass
class WandbConfig(Config):
    """Weights & Biases logging of a run (``train.wandb``): every metrics row, from the main rank.

    ``project`` and ``entity`` say where the run goes; ``name`` is its display name (default: the run
    directory's name); ``mode`` is wandb's: ``online``, ``offline`` (synced later with ``wandb sync``)
    or ``disabled`` (no logging, and the ``wandb`` package is not needed).
    """

    PATH = "train.wandb"

    project: str = "archpool"
    entity: str | None = None
    name: str | None = None
    mode: WandbMode = "online"

    def validate(self, prefix: str = "train.wandb") -> None:
        if not self.project.strip() or any(c in self.project for c in "/\\#?%:"):
            raise ConfigError(f"{prefix}.project", f"a non-empty name without any of / \\ # ? % :, got {self.project!r}")
        for name in ("entity", "name"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                raise ConfigError(f"{prefix}.{name}", "must be a non-empty string or null")

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"


def package_available(name: str) -> bool:
    """Whether ``import name`` can find the package, without importing it (a module already imported, or
    set to None in ``sys.modules`` to block it, counts as it stands)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class TrainConfig(Config):
    """Pretraining: optimizer, schedule, batch geometry, budget, logging and checkpointing.

    The global batch is ``global_batch_tokens`` tokens = ``global_batch_tokens / seq_len`` sequences,
    split over ranks and micro-batches of ``micro_batch_size`` sequences (gradient accumulation
    makes up the rest). The budget is ``max_steps`` or ``max_tokens`` (rounded up to whole steps).
    """

    PATH = "train"

    lr: float = 3e-3
    final_lr_ratio: float = 0.1  # final LR = lr * final_lr_ratio
    warmup_steps: int = 10
    schedule: Schedule = "cosine"  # cosine | linear | wsd | constant
    decay_fraction: float = 0.2  # wsd: fraction of steps spent in the final decay
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    global_batch_tokens: int = 8192
    micro_batch_size: int = 4
    seq_len: int | None = None  # default: the model's max_seq_len
    max_steps: int | None = None
    max_tokens: int | None = None
    log_every: int = 10
    ckpt_every: int = 100
    keep_last: int = 2
    milestones: list[int] = field(default_factory=list)  # steps kept forever (early-extension diagnostic)
    seed: int = 0
    compile: bool = False
    attn_impl: AttnImpl = "auto"  # auto: flex on CUDA when attention is masked (SWA, intra-doc), else sdpa
    dtype: Dtype = "auto"  # auto: bfloat16 autocast on CUDA, and on a bf16 CPU at d_model >= 256 (train/precision.py)
    decay_embeddings: bool = False
    decay_norms: bool = False
    intra_doc_mask: bool = False
    parallel: Parallel = "auto"  # auto: ddp under torchrun, none otherwise; fsdp = FSDP2 fully_shard
    tensorboard: bool = False
    wandb: WandbConfig | None = None  # Weights & Biases logging (needs the wandb package unless mode: disabled)
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        if isinstance(self.milestones, tuple):
            self.milestones = list(self.milestones)
        super().__post_init__()

    def validate(self, prefix: str = "train") -> None:
        if not self.lr > 0:
            raise ConfigError(f"{prefix}.lr", f"must be > 0, got {self.lr}")
        if not 0 <= self.final_lr_ratio <= 1:
            raise ConfigError(f"{prefix}.final_lr_ratio", f"must be in [0, 1], got {self.final_lr_ratio}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ConfigError(f"{prefix}.warmup_steps", f"must be a non-negative integer, got {self.warmup_steps!r}")
        if not 0 < self.decay_fraction <= 1:
            raise ConfigError(f"{prefix}.decay_fraction", f"must be in (0, 1], got {self.decay_fraction}")
        if self.weight_decay < 0:
            raise ConfigError(f"{prefix}.weight_decay", f"must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"{prefix}.betas", f"two values in [0, 1), got {self.betas!r}")
        if not self.eps > 0:
            raise ConfigError(f"{prefix}.eps", f"must be > 0, got {self.eps}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ConfigError(f"{prefix}.grad_clip", f"must be > 0 or null, got {self.grad_clip}")
        for name in ("global_batch_tokens", "micro_batch_size", "log_every", "ckpt_every", "keep_last"):
            _positive_int(getattr(self, name), f"{prefix}.{name}")
        _positive_int(self.seq_len, f"{prefix}.seq_len", allow_none=True)
        _check_counts(self, prefix)
        _positive_int(self.max_steps, f"{prefix}.max_steps", allow_none=True)
        _positive_int(self.max_tokens, f"{prefix}.max_tokens", allow_none=True)
        if self.max_steps is None and self.max_tokens is None:
            raise ConfigError(f"{prefix}.max_steps", "set a budget: max_steps or max_tokens")
        if self.max_steps is not None and self.max_tokens is not None:
            raise ConfigError(f"{prefix}.max_steps", "set max_steps or max_tokens, not both")
        if not isinstance(self.milestones, list) or not all(
            isinstance(m, int) and not isinstance(m, bool) and m > 0 for m in self.milestones
        ):
            raise ConfigError(f"{prefix}.milestones", f"a list of positive step numbers, got {self.milestones!r}")

    def check_packages(self, prefix: str = "train") -> None:
        """The optional packages this config asks for are installed (checked before any data or training):
        ``wandb`` for W&B logging unless its mode is ``disabled``. TensorBoard needs none (without it the
        metrics log alone is written, with a warning)."""
        if self.wandb is not None and self.wandb.enabled and not package_available("wandb"):
            raise ConfigError(
                f"{prefix}.wandb",
                "W&B logging needs the wandb package, which is not installed: pip install wandb "
                "(or set train.wandb.mode: disabled, or remove train.wandb)",
            )

    # ------------------------------------------------------------------ derived geometry
    def resolved_seq_len(self, model_max_seq_len: int) -> int:
        return self.seq_len or model_max_seq_len

    def sequences_per_step(self, seq_len: int, prefix: str = "train") -> int:
        if self.global_batch_tokens % seq_len:
            raise ConfigError(
                f"{prefix}.global_batch_tokens", f"{self.global_batch_tokens} is not a multiple of seq_len={seq_len}"
            )
        return self.global_batch_tokens // seq_len

    def accumulation_steps(self, seq_len: int, world_size: int, prefix: str = "train") -> int:
        """Micro-batches per rank per optimizer step; the global batch must split evenly."""
        seqs = self.sequences_per_step(seq_len, prefix)
        per_rank = self.micro_batch_size * world_size
        if seqs % per_rank:
            raise ConfigError(
                f"{prefix}.micro_batch_size",
                f"the global batch of {seqs} sequences does not split into micro-batches of {self.micro_batch_size} on {world_size} rank(s)",
            )
        return seqs // per_rank

    def resolved_attn_impl(self, device_type: str, masked: bool, prefix: str = "train") -> str:
        """The attention kernel to train with. FlexAttention computes only the allowed blocks of a
        sliding-window or document mask, but has no backward pass on CPU (docs/runtime.md)."""
        if self.attn_impl == "auto":
            return "flex" if device_type == "cuda" and masked else "sdpa"
        if self.attn_impl == "flex" and device_type != "cuda":
            raise ConfigError(f"{prefix}.attn_impl", f"flex has no backward pass on {device_type}; use sdpa or auto")
        return self.attn_impl

    def total_steps(self) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return math.ceil(self.max_tokens / self.global_batch_tokens)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        """The section as a mapping; ``wandb`` is left out when unset, so the content hash of a run that does not
        log to W&B does not depend on the field."""
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        if d["wandb"] is None:
            del d["wandb"]
        return d

    @classmethod
    def from_dict(cls, data: Any, path: str | None = None) -> TrainConfig:
        """A ``train:`` section; empty or null is every default."""
        return super().from_dict(data or {}, path)


def extension_length(length: int | None, length_ratio: int, base_len: int) -> int:
    """An extension's length: ``length`` when given, else ``length_ratio`` × ``base_len``."""
    return int(length or int(length_ratio) * base_len)


@dataclass
class ExtensionConfig(Config):
    """Context extension from a saved checkpoint (docs/extensibility.md).

    - ``ntk`` / ``abf``: one stage; RoPE theta × ``theta_ratio`` (500,000 → 8,000,000 is ×16) or
      ``new_theta``; train at ``length``. ``full_layers_only`` raises theta on full-attention layers
      only (Olmo 3); sliding-window layers keep the pretraining theta.
    - ``yarn``: two stages (``length / 2`` then ``length``, half the tokens each, one LR schedule),
      the same YaRN factor (default ``length / pretraining context``) in both; ``full_layers_only``
      leaves sliding-window layers at plain RoPE (Olmo 3).
    - ``pi``: linear position interpolation by ``factor``.

    Defaults: ``length`` 8× the pretraining context; ``tokens`` = ``token_fraction`` (7%, as 10B of
    140B) of pretraining tokens; a warmup of 5% of the steps (at least 1) to the extension LR, then a
    linear anneal to ``final_lr_ratio`` that reaches it one step after the last (N steps are N
    effective steps). The extension LR is ``lr``, by default ``lr_ratio`` (1/3) × the pretraining
    peak. The optimizer starts fresh: AdamW's moments are not carried over from pretraining, which is
    why the warmup matters (a fresh AdamW's first update moves every weight by about the LR).

    ``budgets`` makes the extension a *ladder*: one run of ``max(budgets)`` steps at a constant LR
    after the warmup, checkpointed at every budget (``milestones/step_N``; budget 0 = the RoPE change
    alone, before any training), so a rung is exactly the extension with that budget and no rung is
    trained from scratch. ``budgets`` replaces ``tokens`` / ``token_fraction``.

    ``qk_gain`` / ``qk_gain_alpha`` lower the softmax temperature when the extension starts: every
    attention logit of every layer (only the full-attention ones with ``full_layers_only``) is
    multiplied by ``qk_gain``, or by ``1 + qk_gain_alpha · ln(length / pretraining context)``
    (log-length scaling, as in Scalable-Softmax). With QK-norm the query-norm gains are scaled,
    without it the query projection, so every architecture can be given the same treatment.
    """

    PATH = "extension"

    recipe: Recipe = DEFAULT_RECIPE
    name: str | None = None  # the run's name under RUN/extend/ (default: the recipe)
    source: str = "final"  # checkpoint to extend: final | a milestone name | step_000100 | a path
    theta_ratio: float = 16.0
    new_theta: float | None = None
    factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    full_layers_only: bool = False
    length: int | None = None
    length_ratio: int = 8
    tokens: int | None = None
    token_fraction: float = 0.07
    lr: float | None = None  # default: lr_ratio x the pretraining peak LR
    lr_ratio: float = 1 / 3
    final_lr_ratio: float = 0.0
    warmup_steps: int | None = None  # default: 5% of the steps (at least 1; none for a 1-step run); paper: 200 of ~2400
    global_batch_tokens: int | None = None  # default: the pretraining batch, rounded up to whole sequences
    micro_batch_size: int = 1
    intra_doc_mask: bool | None = None  # default: as pretraining
    weight_decay: float | None = None
    ckpt_every: int | None = None
    log_every: int | None = None
    budgets: list[int] | None = None  # a ladder of step budgets, 0 = the RoPE change alone
    qk_gain: float | None = None  # multiply every attention logit by this at the start
    qk_gain_alpha: float | None = None  # ... or by 1 + alpha * ln(length / pretraining context)

    def __post_init__(self) -> None:
        if isinstance(self.budgets, tuple):
            self.budgets = list(self.budgets)
        super().__post_init__()

    def validate(self, prefix: str = "extension") -> None:
        _check_counts(self, prefix)
        self._check_rope(prefix)
        self._check_length_and_tokens(prefix)
        self._check_schedule(prefix)
        self._check_budgets(prefix)
        self._check_qk_gain(prefix)
        if self.recipe == "yarn" and self.length is not None and self.length % 2:
            raise ConfigError(f"{prefix}.length", f"yarn's first stage runs at length / 2; use an even length, got {self.length}")

    def _check_rope(self, prefix: str) -> None:
        """The RoPE change: theta ratio or new theta, scaling factor, YaRN's ramp bounds."""
        if not self.theta_ratio > 0:
            raise ConfigError(f"{prefix}.theta_ratio", f"must be > 0, got {self.theta_ratio}")
        if self.new_theta is not None and not self.new_theta > 0:
            raise ConfigError(f"{prefix}.new_theta", f"must be > 0, got {self.new_theta}")
        if self.factor is not None and not self.factor >= 1:
            raise ConfigError(f"{prefix}.factor", f"must be >= 1, got {self.factor}")
        if not self.beta_fast > self.beta_slow > 0:
            raise ConfigError(f"{prefix}.beta_fast", f"need beta_fast > beta_slow > 0, got {self.beta_fast}, {self.beta_slow}")

    def _check_length_and_tokens(self, prefix: str) -> None:
        """The extended length and the token budget."""
        _positive_int(self.length, f"{prefix}.length", allow_none=True)
        _positive_int(self.length_ratio, f"{prefix}.length_ratio")
        _positive_int(self.tokens, f"{prefix}.tokens", allow_none=True)
        if not 0 < self.token_fraction <= 10:
            raise ConfigError(f"{prefix}.token_fraction", f"must be in (0, 10], got {self.token_fraction}")

    def _check_schedule(self, prefix: str) -> None:
        """The learning rate and its schedule, the batch, and the checkpoint and log intervals."""
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"{prefix}.lr", f"must be > 0, got {self.lr}")
        if not 0 <= self.final_lr_ratio <= 1:
            raise ConfigError(f"{prefix}.final_lr_ratio", f"must be in [0, 1], got {self.final_lr_ratio}")
        if self.warmup_steps is not None and (not isinstance(self.warmup_steps, int) or self.warmup_steps < 0):
            raise ConfigError(f"{prefix}.warmup_steps", f"must be a non-negative integer, got {self.warmup_steps!r}")
        _positive_int(self.global_batch_tokens, f"{prefix}.global_batch_tokens", allow_none=True)
        _positive_int(self.micro_batch_size, f"{prefix}.micro_batch_size")
        _positive_int(self.ckpt_every, f"{prefix}.ckpt_every", allow_none=True)
        _positive_int(self.log_every, f"{prefix}.log_every", allow_none=True)
        if not 0 < self.lr_ratio <= 10:
            raise ConfigError(f"{prefix}.lr_ratio", f"must be in (0, 10], got {self.lr_ratio}")

    def _check_budgets(self, prefix: str) -> None:
        """A ladder's step budgets: distinct, at least one > 0, instead of tokens, one-stage recipes only."""
        if self.budgets is None:
            return
        b = self.budgets
        if not b or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in b):
            raise ConfigError(f"{prefix}.budgets", f"a non-empty list of step counts >= 0, got {b!r}")
        if len(set(b)) != len(b) or max(b) < 1:
            raise ConfigError(f"{prefix}.budgets", f"distinct step counts, at least one > 0, got {b!r}")
        if self.tokens is not None:
            raise ConfigError(f"{prefix}.budgets", "give budgets (steps) or tokens, not both")
        if self.recipe == "yarn":
            raise ConfigError(f"{prefix}.budgets", "yarn trains two stages under one anneal; a ladder needs one stage")

    def _check_qk_gain(self, prefix: str) -> None:
        """At most one of the logit-gain (temperature) settings, each in its range."""
        if self.qk_gain is not None and self.qk_gain_alpha is not None:
            raise ConfigError(f"{prefix}.qk_gain", "give qk_gain or qk_gain_alpha, not both")
        if self.qk_gain is not None and not 0 < self.qk_gain <= 100:
            raise ConfigError(f"{prefix}.qk_gain", f"must be in (0, 100], got {self.qk_gain}")
        if self.qk_gain_alpha is not None and not 0 < self.qk_gain_alpha <= 10:
            raise ConfigError(f"{prefix}.qk_gain_alpha", f"must be in (0, 10], got {self.qk_gain_alpha}")

    def target_length(self, base_len: int) -> int:
        """The length the extension trains at: ``length``, else ``length_ratio`` × ``base_len`` (the
        pretraining context of one run, or a pool's long context)."""
        return extension_length(self.length, self.length_ratio, base_len)

    @property
    def run_name(self) -> str:
        """Directory name under ``RUN/extend/``: the recipe, tagged with the source unless it is ``final``."""
        if self.name:
            return self.name
        return self.recipe if self.source == "final" else f"{self.recipe}_from_{Path(self.source).name}"

    @classmethod
    def from_dict(cls, data: Any, path: str | None = None) -> ExtensionConfig:
        """An extension recipe; empty or null is every default."""
        return super().from_dict(data or {}, path)


@dataclass
class RunConfig:
    """A whole run: model, data, pretraining and (optionally) extension."""

    model: dict[str, Any]
    data: DataSection
    train: TrainConfig
    extension: list[ExtensionConfig] = field(default_factory=list)

    def model_config(self):
        from archpool.model.config import ModelConfig

        return ModelConfig.from_dict(self.model)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "data": self.data.to_dict(),
            "train": self.train.to_dict(),
            "extension": [e.to_dict() for e in self.extension],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        check_mapping(data, "run", "a mapping with sections model, data, train, extension")
        check_keys(data, RUN_SECTIONS, what="section")
        if not isinstance(data.get("model"), dict):
            raise ConfigError("model", "a mapping of ModelConfig fields (or {preset: ..., size: ...})")
        from archpool.model.config import ModelConfig

        ModelConfig.from_dict(data["model"], "model")  # validate early; errors name the field
        ext = data.get("extension") or []
        ext = ext if isinstance(ext, list) else [ext]
        extensions = []
        for i, e in enumerate(ext):
            if not isinstance(e, dict):
                raise ConfigError(f"extension[{i}]", "an extension recipe is a mapping")
            extensions.append(ExtensionConfig.from_dict(e, f"extension[{i}]" if len(ext) > 1 else "extension"))
        names = [e.run_name for e in extensions]
        if len(set(names)) != len(names):
            raise ConfigError("extension", f"duplicate extension names {names}; give each a name")
        train = TrainConfig.from_dict(data.get("train") or {})
        train.check_packages()  # before any data is prepared
        return cls(
            model=dict(data["model"]), data=DataSection.from_dict(data.get("data") or {}), train=train, extension=extensions
        )

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(read_config_file(path))


@dataclass
class Stage:
    """A span of steps at one sequence length, reading one data split."""

    name: str
    seq_len: int
    steps: int
    split: str = "pretrain"
