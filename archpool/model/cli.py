"""Model-stage commands: ``features``, ``export-hf``, ``import-hf`` and ``model show``.

Handlers import torch / transformers only when they run, so ``archpool --help`` stays fast.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "features", help="the paper's four features (QK-norm, GQA, SWA, short context) and their count",
        description="TARGET: a preset (olmo3, olmo3:7b), an archpool config (YAML/JSON) or checkpoint dir, "
                    "or a Hugging Face config.json / model dir (llama, mistral, ministral, qwen2, qwen3, olmo2, "
                    "olmo3, gemma2, gemma3, gemma3_text).")
    p.add_argument("targets", nargs="+", metavar="TARGET")
    p.add_argument("--json", action="store_true", help="print JSON (one object, or a list for several targets)")
    p.add_argument("--short-ctx", type=int, default=None, metavar="N",
                   help="pretraining context <= N counts as short (default 4096; for presets, half the size's long context)")
    p.set_defaults(func=_features)

    p = subparsers.add_parser("export-hf", help="write an archpool checkpoint as a transformers model directory")
    p.add_argument("checkpoint", metavar="CHECKPOINT")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json to include (default: one in or next to CHECKPOINT)")
    p.set_defaults(func=_export_hf)

    p = subparsers.add_parser("import-hf", help="read a transformers model directory into an archpool checkpoint")
    p.add_argument("hf_dir", metavar="HF_DIR")
    p.add_argument("out", metavar="OUT")
    p.set_defaults(func=_import_hf)

    p = subparsers.add_parser("model", help="inspect model configs")
    sub = p.add_subparsers(dest="model_command", metavar="ACTION")
    show = sub.add_parser("show", help="the resolved config, its parameter count and the match_params report")
    show.add_argument("target", metavar="PRESET_OR_CONFIG", help="preset (llama3, llama3:7b), config file or checkpoint dir")
    show.add_argument("--size", default=None, help="preset size (tiny, small, base, 100m, 1b, 7b)")
    show.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (repeatable)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_model_show)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


def _fail(command: str, error: Exception) -> int:
    print(f"archpool {command}: error: {error}", file=sys.stderr)
    return 2


def _user_errors() -> tuple[type[Exception], ...]:
    from archpool.errors import CheckpointError, ConfigError, DataError

    return (ConfigError, CheckpointError, DataError, FileNotFoundError)


# ---------------------------------------------------------------------------------------------- features
def _features(args: argparse.Namespace) -> int:
    from archpool.model.features import features

    try:
        results = [features(t, short_ctx=args.short_ctx) for t in args.targets]
    except _user_errors() as e:
        return _fail("features", e)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
        return 0
    for r in results:
        print(_format_features(r))
    return 0


def _format_features(r: dict[str, Any]) -> str:
    def mark(flag: bool) -> str:
        return "1" if flag else "0"

    kind = r.get("model_type") or r.get("family") or ""
    lines = [f"{r['source']}" + (f"  ({kind})" if kind else "")]
    lines.append(f"  qk_norm      {r['qk_norm']:<16} {mark(r['qk_norm'] != 'none')}")
    kv = f"{r['n_kv_heads']}/{r['n_heads']} kv"
    lines.append(f"  gqa          {kv:<16} {mark(r['gqa'])}")
    swa = f"window {r['window']} on {r['n_sliding_layers']}/{r['n_layers']}" if r["swa"] else "off"
    lines.append(f"  swa          {swa:<16} {mark(r['swa'])}")
    ctx = f"{r['pretrain_ctx']} {'<=' if r['short_ctx'] else '>'} {r['short_ctx_threshold']}"
    lines.append(f"  short_ctx    {ctx:<16} {mark(r['short_ctx'])}")
    lines.append(f"  norm         {r['norm']} ({r['norm_placement']})")
    lines.append(f"  count        {r['count']}")
    lines.extend(f"  note: {n}" for n in r["notes"])
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- interop
def _export_hf(args: argparse.Namespace) -> int:
    from archpool.model.hf import export_hf, to_hf_config
    from archpool.model.checkpoint import load_config

    try:
        out = export_hf(args.checkpoint, args.out_dir, tokenizer=args.tokenizer)
        cls = to_hf_config(load_config(args.checkpoint)).architectures[0]
    except _user_errors() as e:
        return _fail("export-hf", e)
    print(f"wrote {out} ({cls})")
    return 0


def _import_hf(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.hf import import_hf

    try:
        model = import_hf(args.hf_dir)
        hf_type = json.loads((Path(args.hf_dir) / "config.json").read_text()).get("model_type")
        out = save_checkpoint(model, args.out, metadata={"imported_from": str(args.hf_dir), "hf_model_type": hf_type})
        tok = Path(args.hf_dir) / "tokenizer.json"
        if tok.is_file():
            import shutil

            shutil.copyfile(tok, out / "tokenizer.json")
    except _user_errors() as e:
        return _fail("import-hf", e)
    print(f"wrote {out} ({hf_type} -> archpool, {model.num_params():,} parameters)")
    return 0


# ---------------------------------------------------------------------------------------------- model show
def resolve_config(target: str, size: str | None = None, overrides: dict[str, Any] | None = None):
    """A ModelConfig from a preset (``name`` or ``name:size``), a config file or an archpool checkpoint dir."""
    from pathlib import Path

    from archpool.errors import ConfigError
    from archpool.model.checkpoint import is_archpool_checkpoint, load_config
    from archpool.model.config import ModelConfig
    from archpool.model.presets import FAMILIES

    overrides = dict(overrides or {})
    path = Path(target)
    if path.is_dir():
        if not is_archpool_checkpoint(path):
            raise ConfigError(target, "directory is not an archpool checkpoint")
        cfg = load_config(path)
    elif path.is_file():
        data = json.loads(path.read_text()) if path.suffix == ".json" else None
        cfg = ModelConfig.from_dict(data["model"]) if isinstance(data, dict) and "archpool_format" in data else ModelConfig.from_file(path)
    else:
        name, _, preset_size = target.partition(":")
        if name not in FAMILIES:
            raise ConfigError("target", f"{target!r} is neither a file nor a preset ({', '.join(FAMILIES)})")
        return ModelConfig.preset(name, size=size or preset_size or "tiny", **overrides)
    return cfg.replace(**overrides) if overrides else cfg


def _parse_sets(items: list[str]) -> dict[str, Any]:
    import yaml

    from archpool.errors import ConfigError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def param_report(cfg) -> dict[str, Any]:
    """Parameter counts, and what ``match_params`` did: the MLP width and the gap to the MHA model."""
    mha = cfg.replace(n_kv_heads=cfg.n_heads, match_params=False)
    total, mha_total = cfg.num_params(), mha.num_params()
    return dict(
        params=total, params_non_embedding=cfg.num_params(include_embeddings=False),
        match_params=cfg.match_params, d_ff=cfg.d_ff, mlp_width=cfg.mlp_width,
        mha_params=mha_total, params_vs_mha=(total - mha_total) / mha_total,
    )


def _model_show(args: argparse.Namespace) -> int:
    try:
        cfg = resolve_config(args.target, args.size, _parse_sets(args.set))
    except _user_errors() as e:
        return _fail("model show", e)
    report = param_report(cfg)
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "params": report}, indent=2))
        return 0
    import yaml

    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False).rstrip())
    print(f"# layer_types: {', '.join('S' if t == 'sliding_attention' else 'F' for t in cfg.layer_types)}")
    print(f"# parameters: {report['params']:,} ({report['params_non_embedding']:,} without embeddings)")
    kv = f"{cfg.n_kv_heads}/{cfg.n_heads} KV heads"
    if cfg.n_kv_heads == cfg.n_heads:
        print(f"# match_params: {kv} (no GQA), nothing to match")
    else:
        state = "on" if cfg.match_params else "off"
        print(f"# match_params {state}: {kv}, MLP width {report['mlp_width']} (d_ff {report['d_ff']}); "
              f"{report['params']:,} vs {report['mha_params']:,} for the MHA model ({report['params_vs_mha']:+.2%})")
    return 0
