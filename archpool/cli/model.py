"""Model-stage commands: ``features``, ``export-hf``, ``import-hf``, ``import-gguf`` and ``model show``.

Handlers import torch / transformers only when they run, so ``archpool --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from archpool.cli.args import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "features",
        help="the paper's four features (QK-norm, GQA, SWA, short context) and their count",
        description="TARGET: a preset (olmo3, olmo3:7b), an archpool config (YAML/JSON) or checkpoint dir, "
        "or a Hugging Face config.json / model dir (llama, mistral, ministral, qwen2, qwen3, olmo2, "
        "olmo3, gemma2, gemma3, gemma3_text).",
    )
    p.add_argument("targets", nargs="+", metavar="TARGET")
    p.add_argument("--json", action="store_true", help="print JSON (one object, or a list for several targets)")
    p.add_argument(
        "--short-ctx",
        type=positive_int,
        default=None,
        metavar="N",
        help="pretraining context <= N counts as short (default 4096; for presets, half the size's long context)",
    )
    p.add_argument(
        "--pretrain-ctx",
        type=positive_int,
        default=None,
        metavar="N",
        help="the context TARGET was pretrained at, where its config cannot tell it (a model extended after "
        "pretraining states only its extended max_position_embeddings); default: the config's, and the output "
        "says which field it came from",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="also print the paper's estimate for this feature set (its 7B results, not a measurement of TARGET): "
        "the count regression's HELMET@32K with a prediction interval, the nearest released runs, per-length deltas",
    )
    p.set_defaults(func=_features)

    p = subparsers.add_parser(
        "export-hf",
        help="write a run's model (or a checkpoint) as a transformers model directory, tokenizer included",
        description="SOURCE: a run directory (archpool train, archpool extend, a pool's runs/<run>/ or "
        "stages/<stage>/<key>/), an archpool checkpoint or a milestone. For a run, the extended model is "
        "exported if there is one, else the final milestone. The tokenizer the model was trained with "
        "is always written (found beside the checkpoint or through the run record's data store); "
        "BOS/EOS/PAD are declared in config.json, generation_config.json and tokenizer_config.json.",
    )
    p.add_argument("checkpoint", metavar="SOURCE")
    p.add_argument("out_dir", metavar="OUT_DIR")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json (or its directory) to include instead of the run's")
    p.add_argument(
        "--pretrained", action="store_true", help="for a run: export the final pretraining milestone, not the extended model"
    )
    p.add_argument(
        "--extension",
        default=None,
        metavar="NAME",
        help="for a run with several extensions: which one (its directory name, recipe or node id)",
    )
    p.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="write the weights without a tokenizer (e.g. a run on the synthetic token stream)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="OUT_DIR holds an earlier export: replace it whole (a non-empty OUT_DIR is refused without this)",
    )
    p.set_defaults(func=_export_hf)

    p = subparsers.add_parser("import-hf", help="read a transformers model directory into an archpool checkpoint")
    p.add_argument("hf_dir", metavar="HF_DIR")
    p.add_argument("out", metavar="OUT")
    p.add_argument(
        "--replace",
        action="store_true",
        help="OUT holds an earlier import: replace it whole (a non-empty OUT is refused without this; "
        "a trained run's checkpoint never is replaced)",
    )
    p.set_defaults(func=_import_hf)

    p = subparsers.add_parser(
        "import-gguf",
        help="write a GGUF file (llama.cpp) as a Hugging Face model directory, tokenizer included",
        description="GGUF_FILE is read by transformers' GGUF loader (every tensor dequantized, the tokenizer "
        "converted) and written to OUT as safetensors (float32) with config.json, generation_config.json, the "
        "tokenizer's files and gguf_import.json (the file's sha256). Needs the gguf package: pip install "
        "'archpool[gguf]'. Nothing is downloaded.",
    )
    p.add_argument("gguf_file", metavar="GGUF_FILE")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--replace", action="store_true", help="OUT holds an earlier GGUF import: replace it whole")
    p.set_defaults(func=_import_gguf)

    p = subparsers.add_parser("model", help="inspect model configs")
    sub = p.add_subparsers(dest="model_command", metavar="ACTION")
    show = sub.add_parser("show", help="the resolved config, its parameter count and the match_params report")
    show.add_argument("target", metavar="PRESET_OR_CONFIG", help="preset (llama3, llama3:7b), config file or checkpoint dir")
    show.add_argument("--size", default=None, help="preset size (tiny, small, base, 100m, 1b, 7b)")
    show.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (repeatable)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_model_show)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])


# ---------------------------------------------------------------------------------------------- features
def _features(args: argparse.Namespace) -> int:
    from archpool.model.features import features

    results = [features(t, short_ctx=args.short_ctx, pretrain_ctx=args.pretrain_ctx) for t in args.targets]
    if getattr(args, "predict", False):
        return _features_predict(results, args.json)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
        return 0
    for r in results:
        print(_format_features(r))
    return 0


def _features_predict(results: list[dict[str, Any]], as_json: bool) -> int:
    """``features --predict``: each target's features, then the paper's estimate for them."""
    from archpool.paper.screen import format_screen, screen

    screens = [screen(r) for r in results]
    if as_json:
        out = [{"features": r, "paper_estimate": s} for r, s in zip(results, screens)]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return 0
    for r, s in zip(results, screens):
        print(_format_features(r))
        print(format_screen(s))
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
    lines.append(f"  short_ctx    {ctx:<16} {mark(r['short_ctx'])}  (pretraining context from {r['pretrain_ctx_from']})")
    lines.append(f"  norm         {r['norm']} ({r['norm_placement']})")
    lines.append(f"  count        {r['count']}")
    lines.extend(f"  note: {n}" for n in r["notes"])
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- interop
def _export_hf(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.io import require_distinct
    from archpool.model.hf import chat_template, export_hf, special_tokens, to_hf_config

    src = resolve_export_source(
        args.checkpoint,
        tokenizer=args.tokenizer,
        pretrained=args.pretrained,
        extension=args.extension,
        require_tokenizer=not args.no_tokenizer,
    )
    require_distinct(src.checkpoint, args.out_dir, "output directory")
    provenance = {"source": str(Path(args.checkpoint).resolve()), "source_kind": src.what}
    if src.tokenizer is not None:
        provenance["tokenizer_from"] = src.tokenizer_from
    out = export_hf(
        src.checkpoint,
        args.out_dir,
        tokenizer=src.tokenizer,
        require_tokenizer=not args.no_tokenizer,
        provenance=provenance,
        replace=args.replace,
    )
    from archpool.model.config import ModelConfig
    from archpool.safeload import read_json_object

    cfg = read_json_object(out / "archpool_config.json")

    architectures = to_hf_config(ModelConfig.from_dict(cfg)).architectures
    assert architectures  # to_hf_config names the family's model class
    cls = architectures[0]
    print(f"exporting {src.what}: {src.checkpoint}")
    if src.tokenizer is not None:
        from archpool.model.hf import load_tokenizer

        special = special_tokens(load_tokenizer(src.tokenizer))
        names = ", ".join(f"{k} {v[0]}={v[1]}" for k, v in special.items())
        print(f"tokenizer: {src.tokenizer_from} ({names})")
        kept = chat_template(out) is not None
        print("chat template: " + ("kept" if kept else "none (a base model; chat clients need one)"))
    else:
        print("tokenizer: none (--no-tokenizer): HF clients need one to encode text")
    print(f"wrote {out} ({cls}, max_position_embeddings {cfg.get('max_seq_len')}; model card README.md)")
    return 0


def _import_gguf(args: argparse.Namespace) -> int:
    from archpool.model.hf.gguf import import_gguf, require_gguf

    require_gguf()  # before anything is loaded: the one-line error names the extra
    out = import_gguf(args.gguf_file, args.out, replace=args.replace)
    from archpool.safeload import read_json_object

    cfg = read_json_object(out / "config.json")
    arch = (cfg.get("architectures") or [cfg.get("model_type")])[0]
    print(f"wrote {out} ({arch}, max_position_embeddings {cfg.get('max_position_embeddings')}; from {args.gguf_file})")
    return 0


class ExportSource:
    """What ``export-hf SOURCE`` exports: the checkpoint directory, its tokenizer and where each came from."""

    def __init__(self, checkpoint, what: str, tokenizer=None, tokenizer_from: str = ""):
        self.checkpoint, self.what, self.tokenizer, self.tokenizer_from = checkpoint, what, tokenizer, tokenizer_from

    def __repr__(self) -> str:
        return f"ExportSource({self.checkpoint}, {self.what!r}, tokenizer from {self.tokenizer_from!r})"


def resolve_export_source(
    path, tokenizer=None, pretrained: bool = False, extension: str | None = None, require_tokenizer: bool = True
) -> ExportSource:
    """The checkpoint ``export-hf`` writes for ``path`` and the tokenizer it was trained with.

    ``path`` is a run directory (``archpool train``: the newest-format layout with ``extend/<name>/``; a
    pool's ``runs/<run>/`` or ``stages/<stage>/<key>/``), an extension run, an archpool checkpoint or a
    milestone (:func:`archpool.rundir.resolve_target`). Runs export their extended model when they have
    one (``--pretrained`` for the pretraining checkpoint). The tokenizer: ``tokenizer`` if given; else a
    tokenizer.json beside the checkpoint or in the run directory; else the run record's data store
    (``archpool.eval.target`` helpers). None found and ``require_tokenizer``:
    :class:`archpool.model.hf.TokenizerNotFoundError` saying why.
    """
    from pathlib import Path

    from archpool.errors import CheckpointError
    from archpool.model.hf import TokenizerNotFoundError
    from archpool.pool.lookup import pool_run_lookup
    from archpool.rundir import resolve_target

    lookup = pool_run_lookup(pretrained, extension)
    target = resolve_target(path, extended=not pretrained, extension=extension, pool_run=lookup)
    if target.kind == "hf":
        raise CheckpointError(
            f"{target.path}: neither a run directory (run_config.json), a pool run (runs/<run>/) "
            "nor an archpool checkpoint (config.json with archpool_format)"
        )
    ckpt, what = target.checkpoint, target.description
    if tokenizer is not None:
        return ExportSource(ckpt, what, Path(tokenizer), f"--tokenizer {tokenizer}")
    if target.tokenizer_file is not None:
        return ExportSource(ckpt, what, target.tokenizer_file, str(target.tokenizer_file))
    reason = "no run record (run_config.json) to find the data store through"
    if target.record is not None:
        tok, reason = _record_tokenizer(target.record.data or {})
        if tok is not None:
            return ExportSource(ckpt, what, tok, reason)
    if require_tokenizer:
        from archpool.model.checkpoint import load_config
        from archpool.model.hf import hf_family_for

        hf_family_for(load_config(ckpt))  # an unexportable architecture is the first thing to say
        raise TokenizerNotFoundError(
            f"{target.path}: cannot find the tokenizer the model was trained with ({reason}); "
            "pass --tokenizer TOKENIZER_JSON (or --no-tokenizer for weights only)"
        )
    return ExportSource(ckpt, what, None, reason)


def _record_tokenizer(data: dict[str, Any]):
    """The tokenizer of a run record's ``data:`` section: its prepared store, else (None, why not)."""
    from pathlib import Path

    if "synthetic" in data:
        return None, "the run trained on the synthetic token stream, which has no tokenizer"
    store = data.get("store")
    if store:
        from archpool.eval.target import find_tokenizer

        tok = find_tokenizer(Path(store)) if (Path(store) / "tokenizer.json").is_file() else None
        return (tok, f"data store {store}") if tok is not None else (None, f"data store {store} is not on this machine")
    from archpool.eval.target import _run_tokenizer

    tok = _run_tokenizer({"data": data})
    return (
        (tok, "the run's data store (re-located from its data config)")
        if tok is not None
        else (None, "the run's data store is not prepared on this machine (archpool data prepare)")
    )


def _import_hf(args: argparse.Namespace) -> int:
    from pathlib import Path

    from archpool.io import copy_regular_file, fresh_directory, require_distinct
    from archpool.model.checkpoint import save_checkpoint
    from archpool.model.hf import import_hf, read_hf_config
    from archpool.model.hf.importer import replaceable_import
    from archpool.tokenizer import Tokenizer

    require_distinct(args.hf_dir, args.out, "output directory")
    tok = Path(args.hf_dir) / "tokenizer.json"
    if tok.is_file() and not tok.is_symlink():
        Tokenizer.load(tok)  # a malformed tokenizer is refused before any write
    src_dir, out = Path(args.hf_dir), Path(args.out)
    # OUT: new or empty, or (--replace) an earlier import, replaced whole: never a trained run's checkpoint
    with fresh_directory(out, replace=args.replace, replaceable=replaceable_import) as new:
        model = import_hf(src_dir)
        hf_type = read_hf_config(src_dir).get("model_type")
        save_checkpoint(model, new, metadata={"imported_from": str(src_dir.resolve()), "hf_model_type": hf_type})
        copied = [f for f in HF_TOKENIZER_FILES if (src_dir / f).is_file() or (src_dir / f).is_symlink()]
        for f in copied:  # a symlinked file is refused, never followed into the checkpoint
            copy_regular_file(src_dir / f, new / f)
    from archpool.model.hf import chat_template

    print(f"wrote {out} ({hf_type} -> archpool, {model.num_params():,} parameters)")
    if "tokenizer.json" not in copied:
        print(f"tokenizer: none in {args.hf_dir} (export-hf will need --tokenizer)")
    elif chat_template(Path(args.hf_dir)):
        print(f"tokenizer: {', '.join(copied)} (chat template kept)")
    else:
        print(f"tokenizer: {', '.join(copied)}; no chat template in {args.hf_dir} (a base model): exports have none")
    return 0


# The HF tokenizer files an import keeps beside the checkpoint: export-hf writes them back (special tokens,
# added tokens, chat template), and archpool's Tokenizer reads BOS/EOS/PAD names from them.
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


# ---------------------------------------------------------------------------------------------- model show
def resolve_config(target: str, size: str | None = None, overrides: dict[str, Any] | None = None):
    """A ModelConfig from a preset (``name`` or ``name:size``), a config file or an archpool checkpoint dir."""
    from pathlib import Path

    from archpool.errors import ConfigError
    from archpool.model.checkpoint import load_config
    from archpool.model.config import ModelConfig
    from archpool.model.presets import FAMILIES
    from archpool.rundir import is_archpool_checkpoint

    overrides = dict(overrides or {})
    path = Path(target)
    if path.is_dir():
        if not is_archpool_checkpoint(path):
            raise ConfigError(target, "directory is not an archpool checkpoint")
        cfg = load_config(path)
    elif path.is_file():
        from archpool.safeload import read_json_file

        data = read_json_file(path) if path.suffix == ".json" else None
        cfg = (
            ModelConfig.from_dict(data["model"])
            if isinstance(data, dict) and "archpool_format" in data
            else ModelConfig.from_file(path)
        )
    else:
        name, _, preset_size = target.partition(":")
        if name not in FAMILIES:
            raise ConfigError("target", f"{target!r} is neither a file nor a preset ({', '.join(FAMILIES)})")
        return ModelConfig.preset(name, size=size or preset_size or "tiny", **overrides)
    return cfg.replace(**overrides) if overrides else cfg


def _parse_sets(items: list[str]) -> dict[str, Any]:
    from archpool.errors import ConfigError
    from archpool.safeload import load_yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = load_yaml(value, f"--set {key.strip()}")
    return out


def param_report(cfg) -> dict[str, Any]:
    """Parameter counts, and what ``match_params`` did: the MLP width and the gap to the MHA model."""
    mha = cfg.replace(n_kv_heads=cfg.n_heads, match_params=False)
    total, mha_total = cfg.num_params(), mha.num_params()
    return dict(
        params=total,
        params_non_embedding=cfg.num_params(include_embeddings=False),
        match_params=cfg.match_params,
        d_ff=cfg.d_ff,
        mlp_width=cfg.mlp_width,
        mha_params=mha_total,
        params_vs_mha=(total - mha_total) / mha_total,
    )


def _model_show(args: argparse.Namespace) -> int:
    cfg = resolve_config(args.target, args.size, _parse_sets(args.set))
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
        print(
            f"# match_params {state}: {kv}, MLP width {report['mlp_width']} (d_ff {report['d_ff']}); "
            f"{report['params']:,} vs {report['mha_params']:,} for the MHA model ({report['params_vs_mha']:+.2%})"
        )
    return 0
