"""``archpool train`` and ``archpool extend``: both resume when re-run with the same arguments. ``archpool extend``
extends a pretraining run in place (``RUN/extend/<name>/``), or with ``--out`` any model directory (an archpool
checkpoint or run, a Hugging Face model directory) into a new one (:mod:`archpool.train.extend_model`)."""

from __future__ import annotations

import argparse

from archpool.cli.args import non_negative_int, positive_int
from archpool.study import RECIPES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="pretrain a model from a run config (resumable; works under torchrun)")
    p.add_argument("config", help="run config YAML/JSON with model:, data:, train: and optional extension: sections")
    p.add_argument("--out", required=True, help="run directory (re-run the same command to resume)")
    p.add_argument("--extend", action="store_true", help="after pretraining, run the config's extension section(s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)

    e = subparsers.add_parser(
        "extend",
        help="context-extend a pretrained run, or any model into a new directory with --out (ntk | abf | yarn | pi; resumable)",
        description="SOURCE: a pretraining run directory (extended in place, into RUN/extend/<name>/), or with --out "
        "any model: an archpool checkpoint or run, or a Hugging Face model directory (llama, mistral, ministral, qwen2, "
        "qwen3, olmo2, olmo3), written to OUT in its own format with OUT/extension.json (its provenance). --steps 0 "
        "(the default with --out) is the RoPE change alone; --steps N trains N steps on --data or --text.",
    )
    e.add_argument("run", metavar="SOURCE", help="a pretraining run directory, or (with --out) any model directory")
    e.add_argument("--out", help="write the extended model to this new directory (SOURCE is then any model directory)")
    e.add_argument(
        "--steps",
        type=non_negative_int,
        help="with --out: training steps at the extension length (default 0: the RoPE change alone); needs --lr and data",
    )
    e.add_argument("--data", help="with --out: a prepared data store or a data config, in the model's own tokenizer")
    e.add_argument("--text", nargs="+", metavar="FILE", help="with --out: plain-text files to train on (instead of --data)")
    e.add_argument(
        "--pretrain-ctx",
        type=positive_int,
        metavar="N",
        help="with --out: the context SOURCE was pretrained at, where its config cannot tell it (default: the RoPE "
        "scaling's original_max_position_embeddings, an archpool extension record, else max_position_embeddings)",
    )
    e.add_argument("--run-dir", help="with --out and --steps: the resumable training run directory (default OUT.run)")
    e.add_argument("--replace", action="store_true", help="with --out: replace an earlier extended model in OUT whole")
    e.add_argument("--recipe", choices=RECIPES, help="default: the run config's extension section(s), else ntk")
    e.add_argument("--config", help="YAML/JSON with an extension: section (mapping or list) to use instead of the run's")
    e.add_argument("--from", dest="source", help="checkpoint to extend: final (default), a milestone (step_000050) or a path")
    e.add_argument("--name", help="output name under RUN/extend/ (default: the recipe)")
    e.add_argument("--length", type=positive_int, help="extension length (default 8x the pretraining context)")
    e.add_argument("--tokens", type=positive_int, help="token budget (default token_fraction x pretraining tokens)")
    e.add_argument("--token-fraction", type=float, help="budget as a fraction of pretraining tokens (default 0.07)")
    e.add_argument("--theta-ratio", type=float, help="ntk/abf: multiply theta (default 16)")
    e.add_argument("--new-theta", type=float, help="ntk/abf: set theta")
    e.add_argument("--factor", type=float, help="yarn/pi scaling factor (default length / pretraining context)")
    e.add_argument(
        "--full-layers-only", action="store_true", default=None, help="yarn/pi: scale full-attention layers only (Olmo 3)"
    )
    e.add_argument("--lr", type=float, help="the extension's LR (default: a third of the pretraining peak)")
    e.add_argument("--warmup-steps", type=non_negative_int)
    e.add_argument(
        "--budgets",
        type=non_negative_int,
        nargs="+",
        help="a ladder: one run of max(BUDGETS) steps at a constant LR, checkpointed at each budget (0 = the RoPE change alone)",
    )
    e.add_argument("--qk-gain", type=float, help="multiply every attention logit by this when the extension starts")
    e.add_argument("--qk-gain-alpha", type=float, help="... or by 1 + ALPHA * ln(extension length / pretraining length)")
    e.add_argument("--global-batch-tokens", type=positive_int)
    e.add_argument("--micro-batch-size", type=positive_int)
    e.add_argument("--no-progress", action="store_true")
    e.set_defaults(func=_extend)


def _train(args: argparse.Namespace) -> int:
    """Errors are archpool.errors types (ConfigError, DataError, CheckpointError): the CLI boundary prints them."""
    from archpool.train.config import RunConfig
    from archpool.train.distributed import shutdown
    from archpool.train.trainer import pretrain

    run_cfg = RunConfig.from_file(args.config)
    if args.extend:  # a name that cannot be written fails before pretraining, not after
        from archpool.train.extend import extension_configs, extension_dir_name

        for ext in extension_configs(run_cfg):
            extension_dir_name(ext)
    if args.no_progress:
        run_cfg.train.progress = False
    try:
        result = pretrain(run_cfg, args.out)
        _report(result, "pretraining")
        if args.extend:
            from archpool.train.extend import extend, extension_configs

            for ext in extension_configs(run_cfg):
                _report(extend(args.out, ext, run_cfg, progress=False if args.no_progress else None), f"extension {ext.run_name}")
    finally:
        shutdown()
    return 0


def _extend(args: argparse.Namespace) -> int:
    """Errors are archpool.errors types (ConfigError, CheckpointError, DataError): the CLI boundary prints them."""
    from pathlib import Path

    from archpool.errors import ConfigError
    from archpool.rundir import CONFIG_NAME, RUN_RECORD
    from archpool.train.config import ExtensionConfig, RunConfig
    from archpool.train.distributed import shutdown
    from archpool.train.extend import check_extension_name, extend, extension_configs, extension_dir_name, load_run_config

    overrides = _overrides(args)
    if args.out is not None:
        return _extend_model(args, overrides)
    model_only = [flag for flag, value in _MODEL_FLAGS.items() if getattr(args, value) not in (None, False)]
    if model_only:
        raise ConfigError(model_only[0], "applies to extending a model into a new directory: give --out OUT")
    if args.name is not None:
        check_extension_name(args.name)
    if not (Path(args.run) / RUN_RECORD).exists() and (Path(args.run) / CONFIG_NAME).is_file():
        raise ConfigError("--out", f"{args.run} is a model directory, not a run: give --out OUT for the extended model")
    run_cfg = load_run_config(args.run)
    if args.config:
        run_cfg.extension = RunConfig.from_dict(
            {"model": run_cfg.model, "train": run_cfg.train.to_dict(), **_extension_section(args.config)}
        ).extension
    if args.recipe:  # an explicit recipe replaces the config's sections
        exts = [ExtensionConfig.from_dict(overrides)]
    else:
        exts = extension_configs(run_cfg, overrides)
    names = [extension_dir_name(ext) for ext in exts]  # all checked before the first one starts
    if len(set(names)) != len(names):
        raise ConfigError(
            "--name",
            f"{len(names)} extensions would share the directory name(s) {sorted(set(names))}; "
            "drop --name or use --recipe for a single extension",
        )
    try:
        for ext in exts:
            _report(extend(args.run, ext, run_cfg, progress=False if args.no_progress else None), f"extension {ext.run_name}")
    finally:
        shutdown()
    return 0


_MODEL_FLAGS = {"--steps": "steps", "--data": "data", "--text": "text", "--pretrain-ctx": "pretrain_ctx", "--run-dir": "run_dir",
                "--replace": "replace"}  # fmt: skip


def _overrides(args: argparse.Namespace) -> dict:
    """The extension fields the flags set."""
    return {
        k: v
        for k, v in {
            "recipe": args.recipe,
            "source": args.source,
            "name": args.name,
            "length": args.length,
            "tokens": args.tokens,
            "token_fraction": args.token_fraction,
            "theta_ratio": args.theta_ratio,
            "new_theta": args.new_theta,
            "factor": args.factor,
            "full_layers_only": args.full_layers_only,
            "lr": args.lr,
            "warmup_steps": args.warmup_steps,
            "budgets": args.budgets,
            "qk_gain": args.qk_gain,
            "qk_gain_alpha": args.qk_gain_alpha,
            "global_batch_tokens": args.global_batch_tokens,
            "micro_batch_size": args.micro_batch_size,
        }.items()
        if v is not None
    }


def _extend_model(args: argparse.Namespace, overrides: dict) -> int:
    """``archpool extend SOURCE --out OUT``: one recipe on any model directory (:func:`archpool.train.extend_model.extend_model`)."""
    import sys

    from archpool.errors import ConfigError
    from archpool.model.features import INFERRED_CTX, inferred_ctx_note
    from archpool.train.config import ExtensionConfig
    from archpool.train.distributed import shutdown
    from archpool.train.extend_model import extend_model, extension_data, plan_for_model, read_source

    for flag, value in (("--from", args.source), ("--name", args.name)):
        if value is not None:
            raise ConfigError(
                flag, "names a run's checkpoint or its RUN/extend/<name>/; with --out the source is SOURCE and the output OUT"
            )
    fields = {}
    if args.config:
        section = _extension_section(args.config)["extension"]
        sections = section if isinstance(section, list) else [section]
        if len(sections) != 1 or not isinstance(sections[0], dict):
            raise ConfigError("--config", "extending a model into --out takes one extension mapping")
        fields = dict(sections[0])
    ext = ExtensionConfig.from_dict({**fields, **overrides})
    source = read_source(args.run, args.pretrain_ctx)
    steps = args.steps or 0
    plan_for_model(source, ext, steps)  # every setting checked before the note below and any work
    data = extension_data(source.tokenizer, args.data, args.text) if steps or ext.budgets else None
    if source.pretrain_ctx_from in INFERRED_CTX:
        print(f"[archpool] note: {inferred_ctx_note(source.pretrain_ctx)}", file=sys.stderr)
    try:
        result = extend_model(
            args.run,
            ext,
            args.out,
            steps=steps,
            pretrain_ctx=args.pretrain_ctx,
            data=data,
            run_dir=args.run_dir,
            replace=args.replace,
            progress=False if args.no_progress else None,
        )
    finally:
        shutdown()
    from archpool.runtime import process_rank

    if process_rank() == 0:
        status = "already complete" if result.already_complete else "done"
        loss = "" if result.final_loss is None else f", final loss {result.final_loss:.4f}"
        print(
            f"[archpool] extension {ext.recipe} of {args.run} {status}: {result.steps} steps at {result.length} tokens "
            f"(pretraining context {result.pretrain_ctx}, from {result.pretrain_ctx_from}){loss} -> {result.out} "
            f"({'Hugging Face model' if result.format == 'hf' else 'archpool checkpoint'})",
            flush=True,
        )
    return 0


def _extension_section(path: str) -> dict:
    from archpool.errors import ConfigError
    from archpool.safeload import read_yaml_file

    try:
        data = read_yaml_file(path)
    except ConfigError as e:
        raise ConfigError("--config", str(e)) from None
    if isinstance(data, dict) and "extension" in data:
        return {"extension": data["extension"]}
    return {"extension": data}


def _report(result, what: str) -> None:
    from archpool.runtime import process_rank

    if process_rank() != 0:
        return
    status = "already complete" if result.already_complete else f"done ({result.steps} steps)"
    print(
        f"[archpool] {what} {status}: final loss {result.final_loss:.4f}, stability score "
        f"{result.stability.get('score', 0):.3f} ({result.stability.get('n_spikes', 0)} spikes) -> {result.run_dir}",
        flush=True,
    )
