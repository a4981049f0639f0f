"""The paper's four features of any model: archpool configs, presets, checkpoints, Hugging Face configs.

``count`` = [any QK-norm] + [n_kv_heads < n_heads] + [any sliding-window layer] + [short pretraining
context] (docs/paper.md §1). The pretraining context of a Hugging Face config is the RoPE scaling's
``original_max_position_embeddings`` where one is written (Llama 3.1, Olmo 3), else
``max_position_embeddings``; "short" means ≤ a threshold (4096, the paper's short context). A model
extended after pretraining without a RoPE scaling (SmolLM2, trained at 2K and extended to 8K by a theta
raise) states only its extended context: the caller then gives the real one (``pretrain_ctx=``,
``archpool features --pretrain-ctx N``). Every result says where its pretraining context came from
(``pretrain_ctx_from``), with a note when it was inferred from ``max_position_embeddings``.

Norm placement follows the paper's axis: ``post`` is Olmo's reordered post-sublayer norm (no norm on
the sublayer input). Gemma 2/3 normalise both the sublayer input and its output ("sandwich"); their
input is normalised, so they report ``norm: "pre"`` with ``norm_placement: "sandwich"`` and a note.
Pure functions over dicts and configs: nothing here imports torch or transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archpool.axes import NORM, QK_NORM
from archpool.errors import CheckpointError, ConfigError
from archpool.io import read_config_file
from archpool.model.config import MAX_DIM, MAX_SEQ_LEN, bounded_int
from archpool.rundir import CONFIG_NAME, FORMAT_KEY, resolve_target
from archpool.study import LAYER_TYPES, PAPER_SHORT_CTX, every_kth_full, feature_flags, olmo3_layer_types, pool_short_ctx

# model_type -> how its config.json expresses the axes.
#   qk_norm / norm / placement: fixed by the architecture (the modeling code), not by config fields;
#   swa: which rule decides the sliding layers (see ``_hf_layer_types``);
#   kv_default / ctx_default: transformers' defaults when the field is absent.
HF_FAMILIES: dict[str, dict[str, Any]] = {
    "llama": dict(qk_norm="none", norm="pre", placement="pre", swa="never", kv_default=None, ctx_default=2048),
    "mistral": dict(qk_norm="none", norm="pre", placement="pre", swa="every_layer", kv_default=8, ctx_default=4096 * 32),
    "ministral": dict(
        qk_norm="none", norm="pre", placement="pre", swa="layer_types_or_every", kv_default=None, ctx_default=32768
    ),
    "qwen2": dict(qk_norm="none", norm="pre", placement="pre", swa="qwen", kv_default=32, ctx_default=32768),
    "qwen3": dict(qk_norm="headwise", norm="pre", placement="pre", swa="qwen", kv_default=32, ctx_default=32768),
    "olmo2": dict(qk_norm="layerwise", norm="post", placement="post", swa="never", kv_default=None, ctx_default=2048),
    "olmo3": dict(qk_norm="layerwise", norm="post", placement="post", swa="olmo3", kv_default=None, ctx_default=2048),
    "gemma2": dict(qk_norm="none", norm="pre", placement="sandwich", swa="gemma2", kv_default=8, ctx_default=8192),
    "gemma3_text": dict(qk_norm="headwise", norm="pre", placement="sandwich", swa="gemma3", kv_default=4, ctx_default=131072),
}
HF_FAMILIES["gemma3"] = HF_FAMILIES["gemma3_text"]  # multimodal wrapper; the text model is in ``text_config``

ARCHPOOL_EXPORT_CONFIG = "archpool_config.json"  # written by archpool.model.hf.export_hf beside config.json

SANDWICH_NOTE = (
    "sandwich norm (pre-sublayer + post-sublayer RMSNorm): counted as 'pre' because the sublayer "
    "input is normalised; the paper's 'post' is Olmo's reordered norm without an input norm"
)


PRETRAIN_CTX_GIVEN = "given"  # pretrain_ctx_from of a context the caller stated


def inferred_ctx_note(ctx: int) -> str:
    """The note of a pretraining context read from ``max_position_embeddings``."""
    return (
        f"pretraining context {ctx} inferred from max_position_embeddings (the config states no original context); "
        "a model extended after pretraining needs its real one (archpool features --pretrain-ctx N; in a pool, "
        "the checkpoint run's pretrain_ctx: N)"
    )


def _result(  # noqa: PLR0913 — one keyword per architecture feature of a results row
    *,
    source: str,
    qk_norm: str,
    norm: str,
    norm_placement: str,
    n_heads: int,
    n_kv_heads: int,
    n_layers: int,
    layer_types: list[str],
    window: int | None,
    pretrain_ctx: int,
    pretrain_ctx_from: str,
    short_ctx: int,
    notes: list[str],
    **extra: Any,
) -> dict[str, Any]:
    n_sliding = sum(t == "sliding_attention" for t in layer_types) if window is not None else 0
    swa = n_sliding > 0
    flags = feature_flags(
        qk_norm=qk_norm, n_kv_heads=n_kv_heads, n_heads=n_heads, swa=swa, pretrain_ctx=pretrain_ctx, short_ctx=short_ctx
    )
    gqa, short = bool(flags["gqa"]), bool(flags["short_ctx"])
    out: dict[str, Any] = dict(
        source=source,
        **extra,
        qk_norm=qk_norm,
        norm=norm,
        norm_placement=norm_placement,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        gqa=gqa,
        kv_ratio=n_kv_heads / n_heads,
        swa=swa,
        window=window if swa else None,
        n_layers=n_layers,
        n_sliding_layers=n_sliding,
        window_ratio=(window / pretrain_ctx) if swa and window is not None else None,
        pretrain_ctx=pretrain_ctx,
        pretrain_ctx_from=pretrain_ctx_from,
        short_ctx=short,
        short_ctx_threshold=short_ctx,
        count=sum(flags.values()),
        notes=notes,
    )
    return out


# ---------------------------------------------------------------------------------------------- archpool
def config_pretrain_ctx(cfg) -> tuple[int, str]:
    """(pretraining context, where it came from) of an archpool ``ModelConfig``: the extension record's
    (``extension.pretrain_seq_len``, as ``archpool extend`` writes it), ``rope.original_max_seq_len``, else
    ``max_seq_len`` (the context archpool trains a config at)."""
    ext = cfg.extension or {}
    for key in ("pretrain_seq_len", "pretrain_ctx", "original_max_seq_len"):
        if ext.get(key) is not None:
            return bounded_int(ext[key], f"extension.{key}", MAX_SEQ_LEN), f"extension.{key}"
    if cfg.rope.original_max_seq_len:
        return cfg.rope.original_max_seq_len, "rope.original_max_seq_len"
    return cfg.max_seq_len, "max_seq_len"


def features_from_config(
    cfg, short_ctx: int = PAPER_SHORT_CTX, source: str = "archpool-config", pretrain_ctx: int | None = None
) -> dict[str, Any]:
    """Features of an archpool ``ModelConfig``. The pretraining context is ``pretrain_ctx`` when given, else
    :func:`config_pretrain_ctx`'s."""
    if pretrain_ctx is not None:
        ctx, ctx_from = bounded_int(pretrain_ctx, "pretrain_ctx", MAX_SEQ_LEN), PRETRAIN_CTX_GIVEN
    else:
        ctx, ctx_from = config_pretrain_ctx(cfg)
    return _result(
        source=source,
        family=cfg.family,
        qk_norm=cfg.qk_norm,
        norm=cfg.norm,
        norm_placement=cfg.norm,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        n_layers=cfg.n_layers,
        layer_types=cfg.layer_types,
        window=cfg.window if cfg.swa else None,
        pretrain_ctx=ctx,
        pretrain_ctx_from=ctx_from,
        short_ctx=short_ctx,
        notes=[],
    )


# ---------------------------------------------------------------------------------------------- Hugging Face
def hf_rope_dicts(hf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """RoPE settings per layer type from either spelling: transformers ≥ 5 ``rope_parameters`` (flat or
    ``{"full_attention": {...}, "sliding_attention": {...}}``) or ≤ 4 ``rope_theta`` + ``rope_scaling``.
    Returns ``{"*": {...}}`` for one shared setting."""
    params = hf.get("rope_parameters")
    if (
        isinstance(params, dict)
        and params
        and all(isinstance(v, dict) or v is None for v in params.values())
        and set(params) & {"full_attention", "sliding_attention"}
    ):
        return {k: dict(v) for k, v in params.items() if isinstance(v, dict)}
    if isinstance(params, dict) and params:
        out = dict(params)
    else:
        scaling = hf.get("rope_scaling") or {}
        if not isinstance(scaling, dict):
            raise ConfigError("rope_scaling", f"a mapping expected, got {type(scaling).__name__}")
        out = dict(scaling)
    out.setdefault("rope_type", out.get("type", "default"))
    if "rope_theta" in hf:
        out.setdefault("rope_theta", hf["rope_theta"])
    return {"*": out}


MAX_POSITION_EMBEDDINGS = "max_position_embeddings"  # pretrain_ctx_from of a context inferred from the model's own
FAMILY_DEFAULT_CTX = "the family's default context"  # ... of a config stating no context at all
INFERRED_CTX = (MAX_POSITION_EMBEDDINGS, FAMILY_DEFAULT_CTX)  # the sources that may not be the pretraining context


def hf_pretrain_ctx(hf: dict[str, Any], ctx_default: int | None = None) -> int:
    """``original_max_position_embeddings`` of any RoPE scaling (or top level), else ``max_position_embeddings``."""
    return hf_pretrain_ctx_from(hf, ctx_default)[0]


def hf_pretrain_ctx_from(hf: dict[str, Any], ctx_default: int | None = None) -> tuple[int, str]:
    """:func:`hf_pretrain_ctx` and the field it was read from (``rope_parameters.original_max_position_embeddings``,
    ``original_max_position_embeddings``, :data:`MAX_POSITION_EMBEDDINGS`, or ``the family's default context``)."""
    key = "original_max_position_embeddings"
    originals = [hf_int(d, key, limit=MAX_SEQ_LEN) for d in hf_rope_dicts(hf).values() if d.get(key)]
    if originals:
        return min(originals), f"rope_parameters.{key}"
    if hf.get(key):
        return hf_int(hf, key, limit=MAX_SEQ_LEN), key
    ctx = hf_int(hf, MAX_POSITION_EMBEDDINGS, limit=MAX_SEQ_LEN)
    if ctx is not None:
        return ctx, MAX_POSITION_EMBEDDINGS
    if ctx_default is None:
        raise ConfigError(MAX_POSITION_EMBEDDINGS, "the config states no context length")
    return ctx_default, FAMILY_DEFAULT_CTX


def hf_int(hf: dict[str, Any], key: str, default: int | None = None, *, limit: int = MAX_DIM, minimum: int = 1) -> Any:
    """The integer ``hf[key]`` within ``[minimum, limit]`` (``default`` when absent or null), or a
    ConfigError naming the field: every number of a Hugging Face config is bounded before it sizes a
    list or divides anything."""
    value = hf.get(key)
    if value is None:
        return default
    return bounded_int(value, key, limit, minimum)


def _explicit_layer_types(explicit: Any, n: int) -> list[str]:
    """An HF config's ``layer_types``: a list of one known type per layer, as transformers requires."""
    if not isinstance(explicit, list) or len(explicit) != n:
        size = f"{len(explicit)} entries" if isinstance(explicit, list) else f"a {type(explicit).__name__}"
        raise ConfigError("layer_types", f"{size} for num_hidden_layers={n}; one type per layer expected")
    for i, t in enumerate(explicit):
        if t not in LAYER_TYPES:
            raise ConfigError(f"layer_types[{i}]", f"unknown layer type {t!r}; allowed: {', '.join(LAYER_TYPES)}")
    return list(explicit)


def _hf_text_config(hf: dict[str, Any]) -> dict[str, Any]:
    """Multimodal wrappers (Gemma 3's ``gemma3``) keep the language model in ``text_config``."""
    text = hf.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in hf.items() if k != "text_config"}
        merged.update(text)
        merged["model_type"] = text.get("model_type", hf.get("model_type"))
        if merged["model_type"] == "gemma3":
            merged["model_type"] = "gemma3_text"
        return merged
    return hf


def hf_model_type(hf: dict[str, Any]) -> str:
    model_type = hf.get("model_type")
    if not model_type:
        raise ConfigError("model_type", "not a Hugging Face model config (no 'model_type')")
    if model_type not in HF_FAMILIES:
        raise ConfigError("model_type", f"unknown model type {model_type!r}; supported: {', '.join(sorted(HF_FAMILIES))}")
    return model_type


def hf_layer_types(hf: dict[str, Any], rule: str) -> tuple[list[str], int | None]:
    """Per-layer attention types and the window, as the family's transformers code decides them."""
    n = hf_int(hf, "num_hidden_layers")
    if n is None:
        raise KeyError("num_hidden_layers")
    window = hf_int(hf, "sliding_window", limit=MAX_SEQ_LEN) if "sliding_window" in hf else 4096  # the families' default
    full, sliding = "full_attention", "sliding_attention"
    explicit = hf.get("layer_types")
    if explicit is not None:
        explicit = _explicit_layer_types(explicit, n)
    if rule == "never":
        return [full] * n, None
    if rule == "qwen":  # Qwen 2/3: ``use_sliding_window: false`` switches the window off whatever else is set
        if not hf.get("use_sliding_window", False):
            return [full] * n, None
        if explicit:
            return list(explicit), window
        max_window_layers = hf_int(hf, "max_window_layers", 28, minimum=0)
        return [sliding if window is not None and i >= max_window_layers else full for i in range(n)], window
    if rule == "every_layer":  # Mistral: one sliding_window for every layer, null = none
        if explicit:
            return list(explicit), window
        return [sliding if window is not None else full] * n, window
    if rule == "layer_types_or_every":
        if explicit:
            return list(explicit), window
        return [sliding if window is not None else full] * n, window
    if explicit:
        return list(explicit), window
    if rule == "olmo3":
        return olmo3_layer_types(n), window
    if rule == "gemma2":  # alternating local / global
        return every_kth_full(n, 2), window
    if rule == "gemma3":  # ``sliding_window_pattern`` P: P-1 local layers, then one global
        pattern = hf_int(hf, "sliding_window_pattern", 6)
        return every_kth_full(n, pattern), window
    raise AssertionError(rule)


def hf_config_layer_types(config: Any) -> list[str]:
    """Per-layer attention types of a transformers config object, by its family's rule
    (:func:`hf_layer_types`); every layer full when the config has no window."""
    n = bounded_int(config.num_hidden_layers, "num_hidden_layers")
    if getattr(config, "sliding_window", None) is None:
        return ["full_attention"] * n
    rule = HF_FAMILIES.get(getattr(config, "model_type", ""), {}).get("swa", "layer_types_or_every")
    return hf_layer_types(config.to_dict(), rule)[0]


def features_from_hf_config(
    hf: dict[str, Any], short_ctx: int = PAPER_SHORT_CTX, source: str = "hf-config", pretrain_ctx: int | None = None
) -> dict[str, Any]:
    """Features of a Hugging Face ``config.json`` (as a dict), transformers 4.x or 5.x spelling; the pretraining
    context is ``pretrain_ctx`` when given, else :func:`hf_pretrain_ctx_from`'s (with a note when it is
    ``max_position_embeddings``)."""
    try:
        return _features_from_hf_config(hf, short_ctx, source, pretrain_ctx)
    except KeyError as e:
        raise ConfigError(str(e.args[0]), "missing from the Hugging Face config") from None
    except ConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError("config", f"invalid value in the Hugging Face config ({e})") from None


def check_head_counts(n_heads: int, n_kv_heads: int) -> None:
    """ConfigError (HF field names) unless the KV heads evenly share the attention heads."""
    if n_heads < 1:
        raise ConfigError("num_attention_heads", f"must be a positive integer, got {n_heads}")
    if not 1 <= n_kv_heads <= n_heads or n_heads % n_kv_heads:
        raise ConfigError(
            "num_key_value_heads",
            f"{n_kv_heads} KV heads do not evenly divide "
            f"num_attention_heads={n_heads} (each KV head must serve the same number of query heads)",
        )


def _features_from_hf_config(hf: dict[str, Any], short_ctx: int, source: str, pretrain_ctx: int | None) -> dict[str, Any]:
    hf = _hf_text_config(hf)
    model_type = hf_model_type(hf)
    fam = HF_FAMILIES[model_type]
    n_heads = hf_int(hf, "num_attention_heads")
    if n_heads is None:
        raise KeyError("num_attention_heads")
    n_kv_heads = hf_int(hf, "num_key_value_heads", fam["kv_default"] or n_heads)
    check_head_counts(n_heads, n_kv_heads)
    layer_types, window = hf_layer_types(hf, fam["swa"])
    notes = []
    if fam["placement"] == "sandwich":
        notes.append(SANDWICH_NOTE)
    if fam["swa"] == "qwen" and hf.get("sliding_window") is not None and not hf.get("use_sliding_window", False):
        notes.append("sliding_window is set but use_sliding_window is false: no sliding-window layers")
    if pretrain_ctx is not None:
        ctx, ctx_from = bounded_int(pretrain_ctx, "pretrain_ctx", MAX_SEQ_LEN), PRETRAIN_CTX_GIVEN
    else:
        ctx, ctx_from = hf_pretrain_ctx_from(hf, fam["ctx_default"])
        if ctx_from in INFERRED_CTX:
            notes.append(inferred_ctx_note(ctx))
    return _result(
        source=source,
        model_type=model_type,
        qk_norm=fam[QK_NORM],
        norm=fam[NORM],
        norm_placement=fam["placement"],
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        n_layers=len(layer_types),
        layer_types=layer_types,
        window=window,
        pretrain_ctx=ctx,
        pretrain_ctx_from=ctx_from,
        short_ctx=short_ctx,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------- any target
def _model_config_file(directory: Path) -> Path:
    """The config.json of a run directory's final checkpoint, a checkpoint or a Hugging Face model directory."""
    try:
        return resolve_target(directory).checkpoint / CONFIG_NAME
    except CheckpointError as e:
        raise ConfigError("target", str(e)) from None


def features(target: str, short_ctx: int | None = None, pretrain_ctx: int | None = None) -> dict[str, Any]:
    """Features of a preset (``olmo3`` or ``olmo3:7b``), an archpool config file, checkpoint or run dir, or a
    Hugging Face ``config.json`` / model dir. ``short_ctx=None`` means 4096, except for presets, where it
    is the short context of the preset's size (half its long context; 4096 at 7b), so scaled presets
    count like the paper's. ``pretrain_ctx``: the pretraining context where the config cannot tell it (a
    model extended after pretraining); default: the config's (``pretrain_ctx_from`` says which field)."""
    threshold = PAPER_SHORT_CTX if short_ctx is None else int(short_ctx)
    given = {"pretrain_ctx": pretrain_ctx}
    path = Path(target)
    if path.is_dir():
        path = _model_config_file(path)
    if path.is_file():
        if path.suffix in (".yaml", ".yml"):
            from archpool.model.config import ModelConfig

            return features_from_config(ModelConfig.from_file(path), threshold, source=str(path), **given)
        data = read_config_file(path)
        from archpool.model.config import ModelConfig

        if isinstance(data, dict) and FORMAT_KEY in data:
            return features_from_config(ModelConfig.from_dict(data["model"]), threshold, source=str(path.parent), **given)
        if isinstance(data, dict) and ("model_type" in data or "architectures" in data):
            try:  # the Hugging Face config is what loads: it must be valid even beside archpool's own
                hf = features_from_hf_config(data, threshold, source=str(path), **given)
            except ConfigError as e:
                raise ConfigError(str(path), str(e)) from None
            ours = path.parent / ARCHPOOL_EXPORT_CONFIG
            if ours.is_file():  # an archpool export: its own config keeps the extension record
                f = features_from_config(ModelConfig.from_dict(read_config_file(ours)), threshold, source=str(path), **given)
                f["notes"].append(f"read from {ARCHPOOL_EXPORT_CONFIG} beside the Hugging Face config (an archpool export)")
                return f
            return hf
        return features_from_config(ModelConfig.from_file(path), threshold, source=str(path), **given)
    from archpool.model.config import ModelConfig
    from archpool.model.presets import FAMILIES, SIZES

    name, _, size = target.partition(":")
    if name in FAMILIES:
        size = size or "tiny"
        if size not in SIZES:
            raise ConfigError("size", f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
        if short_ctx is None:
            threshold = pool_short_ctx(SIZES[size]["ctx"])
        return features_from_config(ModelConfig.preset(name, size=size), threshold, source=f"preset:{name}:{size}", **given)
    raise ConfigError(
        "target", f"{target!r} is neither an existing file/directory nor a preset ({', '.join(FAMILIES)}, optionally PRESET:SIZE)"
    )
