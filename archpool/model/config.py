"""Model configuration: one validated dataclass that can be any point of the paper's design space.

The four axes (docs/paper.md §1) are plain fields: ``norm`` (pre | post), ``qk_norm`` (none | layerwise |
headwise), ``n_kv_heads`` (MQA / GQA / MHA) and the sliding-window settings (``window`` +
``swa_pattern``); the fourth axis, pretraining context, is ``max_seq_len``. Presets for the real
families are classmethod-built configs (``ModelConfig.preset("olmo3", size="tiny", n_kv_heads=2)``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from archpool.axes import Norm, QkNorm, canonical_qk_norm
from archpool.config import Config
from archpool.errors import ConfigError
from archpool.io import read_config_file
from archpool.study import LAYER_TYPES, SWA_PATTERNS, default_d_ff, layer_types
from archpool.typecheck import check_types

RopeType = Literal["default", "linear", "ntk", "yarn"]
ROPE_TYPES: tuple[str, ...] = get_args(RopeType)
MAX_PARAMS = 200_000_000_000  # the largest model accepted: well above the paper's 7B, far below a MemoryError
MAX_DIM = 1 << 20  # any single width, head count, layer count or vocabulary
MAX_SEQ_LEN = 1 << 22  # 4M tokens: the longest context a config or an evaluation length may name
MAX_ROPE_THETA = 1e12  # RoPE bases in use stay below 1e9; NTK / ABF raises stay far below this
MAX_ROPE_FACTOR = float(MAX_SEQ_LEN)  # a context-extension factor: at most the longest context over one token


def bounded_int(value: Any, field: str, limit: int = MAX_DIM, minimum: int = 1) -> int:
    """``value`` as an integer in ``[minimum, limit]``, or a ConfigError naming ``field``. Accepts an
    integral float (``4096.0``, as JSON writers may emit), refuses booleans, strings, ``inf`` / ``nan`` and
    anything out of bounds: every number read from a model config goes through here before it sizes
    anything (a list, a loop, a division)."""
    wanted = f"a positive integer of at most {limit:,}" if minimum == 1 else f"an integer from {minimum:,} to {limit:,}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= limit or value != int(value):
        raise ConfigError(field, f"{wanted}, got {value!r}")  # nan and inf fail the range test
    return int(value)


@dataclass
class RopeConfig(Config):
    """Rotary position embedding: base ``theta`` plus an optional context-extension scaling.

    - ``default``: plain RoPE at ``theta`` (an ABF / "NTK 1-stage" extension just raises ``theta``);
    - ``linear``: position interpolation, frequencies divided by ``factor``;
    - ``ntk``: NTK-aware scaling, ``theta * factor ** (d / (d - 2))``;
    - ``yarn``: YaRN with ``beta_fast`` / ``beta_slow`` and attention temperature ``attention_factor``
      (default ``0.1 ln(factor) + 1``) relative to ``original_max_seq_len``.
    ``full_layers_only`` applies the scaling to full-attention layers only (Olmo 3); sliding layers
    keep plain RoPE at ``theta``, or at ``sliding_theta`` when set: a theta raise (ABF / NTK 1-stage)
    on full layers only gives full layers the raised ``theta`` and keeps the pretraining theta on
    sliding layers as ``sliding_theta``.
    """

    PATH = "rope"
    KEY = "RoPE field"

    theta: float = 10_000.0
    type: RopeType = "default"
    factor: float = 1.0
    original_max_seq_len: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    full_layers_only: bool = False
    sliding_theta: float | None = None  # theta of sliding layers under full_layers_only (None: theta)

    def validate(self, prefix: str = "rope") -> None:
        if not 0 < self.theta <= MAX_ROPE_THETA:
            raise ConfigError(f"{prefix}.theta", f"must be > 0 and at most {MAX_ROPE_THETA:g}, got {self.theta}")
        if self.type != "default" and not 1.0 <= self.factor <= MAX_ROPE_FACTOR:
            raise ConfigError(
                f"{prefix}.factor", f"must be >= 1 and <= {MAX_ROPE_FACTOR:,.0f} for {self.type!r} scaling, got {self.factor}"
            )
        if self.original_max_seq_len is not None:
            bounded_int(self.original_max_seq_len, f"{prefix}.original_max_seq_len", MAX_SEQ_LEN)
        if self.type == "yarn":
            if self.original_max_seq_len is None:
                raise ConfigError(f"{prefix}.original_max_seq_len", "YaRN needs the pretraining context length (> 0)")
            if not self.theta > 1:  # YaRN's correction divides by log(theta)
                raise ConfigError(f"{prefix}.theta", f"must be > 1 for YaRN scaling, got {self.theta}")
            if not self.beta_fast > self.beta_slow > 0:
                raise ConfigError(
                    f"{prefix}.beta_fast", f"need beta_fast > beta_slow > 0, got {self.beta_fast}, {self.beta_slow}"
                )
        if self.sliding_theta is not None:
            if not self.full_layers_only:
                raise ConfigError(f"{prefix}.sliding_theta", "only applies with full_layers_only: true")
            if not 0 < self.sliding_theta <= MAX_ROPE_THETA:
                raise ConfigError(
                    f"{prefix}.sliding_theta", f"must be > 0 and at most {MAX_ROPE_THETA:g}, got {self.sliding_theta}"
                )
        if self.attention_factor is not None and not self.attention_factor > 0:
            raise ConfigError(f"{prefix}.attention_factor", f"must be > 0, got {self.attention_factor}")

    def yarn_attention_factor(self) -> float:
        if self.attention_factor is not None:
            return float(self.attention_factor)
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0


@dataclass
class ModelConfig(Config):
    """A decoder-only transformer. ``None`` sizes are derived in ``__post_init__``."""

    KEY = "model config field"

    vocab_size: int = 4096
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int | None = None
    head_dim: int | None = None
    d_ff: int | None = None
    norm_eps: float = 1e-6
    tie_embeddings: bool = False
    max_seq_len: int = 256
    # the axes
    norm: Norm = "pre"
    qk_norm: QkNorm = "none"
    window: int | None = None
    swa_pattern: str | list[str] = "none"
    match_params: bool = False
    rope: RopeConfig = field(default_factory=RopeConfig)
    qkv_bias: bool = False  # biases on the q/k/v projections (Qwen 2); left out of to_dict when off
    # bookkeeping
    init_std: float = 0.02
    family: str | None = None
    extension: dict[str, Any] | None = None  # recipe that produced an extended model (train stage)

    def __post_init__(self) -> None:
        if isinstance(self.rope, dict):
            self.rope = RopeConfig.from_dict(self.rope)
        if isinstance(self.qk_norm, str):
            self.qk_norm = cast(QkNorm, canonical_qk_norm(self.qk_norm))  # check_types checks the spelling
        if self.qk_norm is None or self.qk_norm is False:
            self.qk_norm = "none"
        check_types(self)
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ConfigError("head_dim", f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set head_dim")
            self.head_dim = self.d_model // self.n_heads
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.d_model)
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        for name in ("head_dim", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        assert self.n_kv_heads is not None and self.head_dim is not None  # resolved by __post_init__
        self._validate_size()
        if self.head_dim % 2:
            raise ConfigError("head_dim", f"must be even for RoPE, got {self.head_dim}")
        if self.n_kv_heads > self.n_heads:
            raise ConfigError("n_kv_heads", f"must be between 1 and n_heads={self.n_heads}, got {self.n_kv_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("n_kv_heads", f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}")
        if not self.norm_eps > 0:
            raise ConfigError("norm_eps", f"must be > 0, got {self.norm_eps}")
        if not self.init_std > 0:
            raise ConfigError("init_std", f"must be > 0, got {self.init_std}")
        self._validate_window()
        self.rope.validate()
        if self.rope.type == "ntk" and self.head_dim < 4:  # NTK raises theta to factor ** (d / (d - 2))
            raise ConfigError("head_dim", f"NTK RoPE scaling needs head_dim >= 4, got {self.head_dim}")
        if self.norm == "post" and self.qk_norm == "none":
            warnings.warn(
                "norm='post' without QK-norm diverged in the paper (docs/paper.md §1); training may be unstable",
                stacklevel=3,
            )

    def _validate_size(self) -> None:
        """Shapes within bounds and the parameter count within ``MAX_PARAMS``, checked before anything is
        allocated: ``n_layers: 2e9`` or ``hidden_size: 1e9`` is a ConfigError, not a MemoryError."""
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff"):
            if getattr(self, name) > MAX_DIM:
                raise ConfigError(name, f"{getattr(self, name):,} exceeds the largest dimension accepted ({MAX_DIM:,})")
        if self.max_seq_len > MAX_SEQ_LEN:
            raise ConfigError("max_seq_len", f"{self.max_seq_len:,} exceeds the longest context accepted ({MAX_SEQ_LEN:,})")
        if self.num_params() > MAX_PARAMS:
            raise ConfigError(
                "n_layers",
                f"{self.num_params():,} parameters ({self.n_layers} layers of d_model {self.d_model}, vocabulary "
                f"{self.vocab_size}) exceed the parameter budget of {MAX_PARAMS:,}",
            )

    def _validate_window(self) -> None:
        pattern = self.swa_pattern
        if isinstance(pattern, (list, tuple)):
            pattern = [_normalise_layer_type(t, i) for i, t in enumerate(pattern)]
            if len(pattern) != self.n_layers:
                raise ConfigError("swa_pattern", f"explicit layer list has {len(pattern)} entries for n_layers={self.n_layers}")
            self.swa_pattern = pattern
        elif pattern not in SWA_PATTERNS:
            raise ConfigError(
                "swa_pattern", f"unknown pattern {pattern!r}; allowed: {', '.join(SWA_PATTERNS)} or a list of layer types"
            )
        has_sliding = "sliding_attention" in self.layer_types
        if has_sliding:
            if self.window is None:
                raise ConfigError("window", "sliding-window layers need a window size")
            if not isinstance(self.window, int) or self.window <= 0:
                raise ConfigError("window", f"must be a positive integer, got {self.window!r}")
            if self.window > self.max_seq_len:
                raise ConfigError("window", f"must not exceed the context max_seq_len={self.max_seq_len}, got {self.window}")
            if self.window == self.max_seq_len:
                # the paper's 4K-context SWA runs (G_post_LQK_8kv_4k_14k_SWA): no effect until extension
                warnings.warn(
                    f"window={self.window} equals max_seq_len: sliding layers act as full attention until the context is extended",
                    stacklevel=3,
                )

    # ------------------------------------------------------------------ derived values
    @property
    def layer_types(self) -> list[str]:
        """Per-layer attention type, ``full_attention`` or ``sliding_attention`` (HF's names)."""
        return layer_types(self.swa_pattern, self.n_layers)

    @property
    def swa(self) -> bool:
        return "sliding_attention" in self.layer_types

    @property
    def mlp_width(self) -> int:
        """MLP width actually built: ``d_ff``, widened under ``match_params`` to refill what GQA removed."""
        assert self.n_kv_heads is not None and self.head_dim is not None and self.d_ff is not None  # resolved by __post_init__
        if not self.match_params or self.n_kv_heads == self.n_heads:
            return self.d_ff
        removed = 2 * self.d_model * self.head_dim * (self.n_heads - self.n_kv_heads)  # k and v projections
        extra = removed / (3 * self.d_model)  # SwiGLU has three d_model x width matrices
        return int(round((self.d_ff + extra) / 8) * 8) or 8

    def num_params(self, include_embeddings: bool = True) -> int:
        d, hd = self.d_model, self.head_dim
        assert hd is not None and self.n_kv_heads is not None  # resolved by __post_init__
        attn = d * hd * (2 * self.n_heads + 2 * self.n_kv_heads)
        if self.qkv_bias:
            attn += hd * (self.n_heads + 2 * self.n_kv_heads)
        if self.qk_norm == "layerwise":
            attn += hd * (self.n_heads + self.n_kv_heads)
        elif self.qk_norm == "headwise":
            attn += 2 * hd
        mlp = 3 * d * self.mlp_width
        per_layer = attn + mlp + 2 * d
        total = self.n_layers * per_layer + d
        if include_embeddings:
            total += self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return total

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not d["qkv_bias"]:  # configs (and the content keys hashed from them) of bias-free models unchanged
            del d["qkv_bias"]
        return d

    @classmethod
    def from_dict(cls, data: Any, path: str | None = None) -> ModelConfig:
        """A model from its fields, or from ``{preset: family, size: ..., <overrides>}``."""
        if isinstance(data, dict) and "preset" in data:
            data = dict(data)
            name = data.pop("preset")
            size = data.pop("size", "tiny")
            try:
                return cls.preset(name, size=size, **data)
            except ConfigError as e:
                raise e.under(path or "") from None
        return super().from_dict(data, path)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        """Load from YAML or JSON; a top-level ``model:`` section is accepted."""
        path = Path(path)
        data = read_config_file(path)
        if not isinstance(data, dict):
            raise ConfigError(str(path), "expected a mapping of model config fields")
        if "model" in data and isinstance(data["model"], dict):
            data = data["model"]
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        from archpool.io import atomic_write_json

        atomic_write_json(path, self.to_dict())

    def replace(self, **changes: Any) -> ModelConfig:
        data = self.to_dict()
        if "rope" in changes and isinstance(changes["rope"], RopeConfig):
            changes["rope"] = dataclasses.asdict(changes["rope"])
        data.update(changes)
        return ModelConfig.from_dict(data)

    @classmethod
    def preset(cls, name: str, size: str = "tiny", **overrides: Any) -> ModelConfig:
        from archpool.model.presets import preset_dict

        data = preset_dict(name, size)
        rope_over = overrides.pop("rope", None)
        for key in list(overrides):
            if key.startswith("rope_"):
                rope_over = dict(rope_over or {})
                rope_over[key[len("rope_") :]] = overrides.pop(key)
        if rope_over:
            data["rope"] = {**data["rope"], **(dataclasses.asdict(rope_over) if isinstance(rope_over, RopeConfig) else rope_over)}
        data.update(overrides)
        return cls.from_dict(data)


def _normalise_layer_type(t: str, i: int) -> str:
    aliases = {
        "full": "full_attention",
        "global": "full_attention",
        "sliding": "sliding_attention",
        "local": "sliding_attention",
        "swa": "sliding_attention",
    }
    t = aliases.get(str(t), str(t))
    if t not in LAYER_TYPES:
        raise ConfigError(f"swa_pattern[{i}]", f"unknown layer type {t!r}; allowed: full, sliding ({', '.join(LAYER_TYPES)})")
    return t
