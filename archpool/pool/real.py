"""``backend: real`` — the pool's stages as calls into the pipeline's own Python APIs."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from archpool.io import atomic_write_text
from archpool.pool.graph import StageContext


def _need(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise RuntimeError(f"the {module} stage is not installed in this checkout") from e
        raise


def _data_cfg(ctx: StageContext) -> dict[str, Any]:
    """The ``data:`` section the trainer reads (the pool's, as prepared by the data node)."""
    return dict(ctx.input_results.get("data", {}).get("data_cfg") or ctx.pool.get("data") or {})


def data(ctx: StageContext) -> dict[str, Any]:
    """Prepare (or reuse) the pool's tokenised store once; every member then opens it by path.
    Train-side keys (``tasks`` mixing, ``short_share``, ...) pass through to the trainers."""
    cfg = {k: v for k, v in ctx.config.items() if k != "backend"}
    if "synthetic" in cfg:  # the trainer's built-in synthetic stream: nothing to prepare
        return {"data_cfg": cfg, "metrics": {}}
    from archpool.data.config import DataConfig
    from archpool.data.store import prepare
    from archpool.train.data_stage import TRAIN_KEYS

    store = prepare(DataConfig.from_dict({k: v for k, v in cfg.items() if k not in TRAIN_KEYS}), progress=False, log=ctx.log)
    counts = store.manifest.get("counts", {})
    ctx.log(f"data store {store.path}: {counts}")
    return {"data_cfg": {**cfg, "store": str(store.path)}, "store": str(store.path), "key": store.key,
            "vocab_size": store.tokenizer.vocab_size, "counts": counts, "metrics": {}}


def _mean_tail(losses: list[float], frac: float = 0.1) -> float:
    if not losses:
        return float("nan")
    n = max(1, int(len(losses) * frac))
    return sum(losses[-n:]) / n


def pretrain(ctx: StageContext) -> dict[str, Any]:
    from archpool.model.config import ModelConfig
    from archpool.train.checkpoint import step_name
    from archpool.train.config import TrainConfig
    from archpool.train.trainer import Trainer

    c = ctx.config
    cfg = ModelConfig.from_dict(c["model"])
    train = {"progress": False, **c["train"], "seq_len": c["seq_len"], "seed": c["seed"]}
    total = TrainConfig.from_dict({**train, "milestones": []}).total_steps()
    milestone_steps = {f"{m:g}": max(1, round(m * total)) for m in c.get("milestones") or []}
    train["milestones"] = sorted(set(milestone_steps.values()))
    tcfg = TrainConfig.from_dict(train)
    data_cfg = _data_cfg(ctx)
    record = {"kind": "pretrain", "model": c["model"], "data": data_cfg, "train": tcfg.to_dict(), "extension": [],
              "model_resolved": cfg.to_dict(), "init_seed": c["init_seed"]}
    meta = {"stage": "pretrain", "run": (ctx.run or {}).get("name")}
    res = Trainer(ctx.out_dir, cfg, tcfg, data_cfg, record=record, metadata=meta, init_seed=c["init_seed"]).run()
    stability = res.stability or {}
    metrics = {"pretrain_loss": _mean_tail(res.losses)}
    if isinstance(stability.get("score"), (int, float)):
        metrics["stability"] = stability["score"]
    return {"metrics": metrics, "steps": res.steps, "milestones": {k: step_name(v) for k, v in milestone_steps.items()}}


def extend(ctx: StageContext) -> dict[str, Any]:
    from archpool.io import sha256_file
    from archpool.train import checkpoint as ckpt
    from archpool.train.config import ExtensionConfig
    from archpool.train.extend import load_run_config, plan_extension, resolve_source
    from archpool.train.trainer import Trainer

    c = ctx.config
    pre_dir = ctx.inputs["model"]
    run_cfg = load_run_config(pre_dir)
    recipe = dict(c["recipe"])
    name = recipe.pop("name")
    recipe.setdefault("recipe", name if name in ("ntk", "abf", "yarn", "pi") else "ntk")
    # pools extend every member to one length: ``length_ratio`` x the pool's long context (paper: 8 x 8K)
    from archpool.pool.plan import extension_length

    recipe["length"] = extension_length(recipe, int(c["long_ctx"]))
    recipe.pop("length_ratio", None)
    recipe.pop("seq_len", None)
    milestone = float(c["milestone"])
    source = "final" if milestone >= 1.0 else ctx.input_results["model"]["milestones"][f"{milestone:g}"]
    recipe.update(name=name, source=source)
    ext = ExtensionConfig.from_dict(recipe, prefix=f"extension[{name}]")
    src = resolve_source(pre_dir, source)
    source_cfg, weights = ckpt.load_weights(src)
    plan = plan_extension(source_cfg, run_cfg.train, ext, source)
    plan.train.progress = False
    record = {"kind": "extension", "extension": ext.to_dict(), "source": str(src.resolve()),
              "source_sha256": sha256_file(src / ckpt.MANIFEST_NAME), "model": plan.model.to_dict(),
              "data": run_cfg.data, "train": plan.train.to_dict()}
    res = Trainer(ctx.out_dir, plan.model, plan.train, run_cfg.data, plan.stages, init_state=weights, record=record,
                  metadata={"stage": "extension", "recipe": ext.recipe}).run()
    return {"metrics": {"extension_loss": _mean_tail(res.losses)}, "tokens": res.tokens,
            "length": plan.model.max_seq_len}


def model_dir(stage_dir: Path) -> Path:
    """The finished model of a pretrain or extend node (a loadable checkpoint directory)."""
    from archpool.train.trainer import run_dir_final

    return run_dir_final(stage_dir)


def _store(ctx: StageContext):
    path = ctx.input_results.get("data", {}).get("store")
    if not path:
        return None
    from archpool.data.store import Store

    return Store(path)


def _lengths(e: dict[str, Any], key: str, default: list[float], long_ctx: int) -> list[int]:
    """``lengths`` (tokens) or ``length_ratios`` (× the pool's long pretraining context)."""
    if e.get(f"{key}lengths"):
        return sorted({int(x) for x in e[f"{key}lengths"]})
    ratios = e.get(f"{key}length_ratios") or default
    return sorted({max(16, int(round(r * long_ctx))) for r in ratios})


def eval(ctx: StageContext) -> dict[str, Any]:  # noqa: A001 - the stage's name
    """The eval stage on this node's model: task suites (or an explicit task list) at the pool's
    lengths, LongPPL / perplexity where asked; flattened to ``<task>_<mode>@<length>`` columns."""
    from archpool.eval.api import evaluate
    from archpool.eval.lm import stop_token_ids
    from archpool.eval.runner import TaskRunConfig, aggregate, run_tasks
    from archpool.eval.target import load_target

    c = ctx.config
    e = dict(c["eval"])
    base = c["phase"] == "base"
    long_ctx = int(c["long_ctx"])
    lengths = _lengths(e, "base_" if base else "", [1.0] if base else [1.0, 2.0, 4.0], long_ctx)
    store = _store(ctx)
    tok = Path(store.path) / "tokenizer.json" if store is not None else None
    target = load_target(ctx.inputs["model"], tokenizer=tok)
    modes = list(e.get("modes") or ["ll"])
    n = int(e.get("n_samples", 20))
    seed = int(e.get("seed", 42))
    params = dict(e.get("task_params") or {})
    out_dir = ctx.out_dir / "eval"
    result: dict[str, Any] = {}
    tasks = e.get("tasks")
    if tasks:
        haystack = None
        if store is not None:
            from archpool.data.streams import validation_texts

            haystack = validation_texts(store, "long")[:64] or validation_texts(store, "short")[:256] or None
        cfg = TaskRunConfig(list(tasks), lengths, modes, n, seed, params, haystack)
        stop = stop_token_ids(target.tokenizer, target.lm.backend.vocab_size)
        rs = run_tasks(target.lm, target.tokenizer, cfg, model_hash=target.model_hash, tokenizer_hash=target.tokenizer_hash,
                       out_dir=out_dir, progress=False, stop_ids=stop)
        result["tasks"] = [{k: v for k, v in r.items() if k != "samples"} for r in rs]
        result["aggregate"] = aggregate(rs)
    suites = e.get("suites", [] if tasks else ["tiny"])
    if suites:
        more = evaluate(target, suites=suites, lengths=lengths, modes=modes, n_samples=n, seed=seed, out_dir=out_dir,
                        store=store, task_params=params, short_tasks=not tasks, progress=False)
        result["tasks"] = result.get("tasks", []) + more.get("tasks", [])
        result["aggregate"] = {**more.get("aggregate", {}), **result.get("aggregate", {})}
        for k in ("longppl", "short"):
            if k in more:
                result[k] = more[k]
    from archpool.io import atomic_write_json

    atomic_write_json(ctx.out_dir / "eval.json", result)
    return {"metrics": flatten_eval(result), "lengths": lengths}


def flatten_eval(result: dict[str, Any]) -> dict[str, float]:
    m: dict[str, float] = {}
    for r in result.get("tasks", []):
        if "score" not in r:
            continue
        if r["mode"] == "dense":
            m.update(dense_columns(r))
            continue
        m[f"{r['task']}_{r['mode']}@{r['length']}"] = round(float(r["score"]), 6)
        if r["mode"] == "ll" and r.get("gold_logprob_mean") is not None:
            m[f"{r['task']}_lp@{r['length']}"] = round(float(r["gold_logprob_mean"]), 6)
    for key, entry in (result.get("aggregate") or {}).items():
        mode, _, length = key.partition("@")
        for suite in ("tiny", "ruler", "helmet"):
            score = (entry.get(suite) or {}).get("score")
            if score is not None:
                m[f"{suite}_{mode}@{length}"] = round(float(score), 6)
    for r in result.get("longppl") or []:
        if "skipped" in r:
            continue
        for k in ("ppl", "longppl"):
            if r.get(k) is not None:
                m[f"{k}@{r['length']}"] = round(float(r[k]), 6)
    val = (result.get("short") or {}).get("val_ppl") or {}
    for kind in ("short", "long"):
        ppl = (val.get(kind) or {}).get("ppl") if isinstance(val, dict) else None
        if isinstance(ppl, (int, float)):
            m[f"val_ppl_{kind}"] = round(float(ppl), 6)
    return m


def dense_columns(r: dict[str, Any]) -> dict[str, float]:
    """A dense task's columns: ``<task>_acc@L`` (fraction of answers right), ``<task>_lp@L`` (gold
    log-prob), the same per distance bucket (``<task>_acc@L[64<d<=128]``) and beyond each bucket edge
    (``<task>_acc@L[d>128]``), and for chains
    ``<task>_chain@L`` (both hops right) and ``<task>_hop2_acc@L``."""
    task, L, res = r["task"], r["length"], r["result"]
    out: dict[str, float] = {}

    def put(name: str, v: Any) -> None:
        if isinstance(v, (int, float)):
            out[name] = round(float(v), 6)

    put(f"{task}_acc@{L}", res.get("acc"))
    put(f"{task}_lp@{L}", res.get("lp"))
    for label, b in {**(res.get("tails") or {}), **(res.get("buckets") or {})}.items():
        if b.get("n"):
            put(f"{task}_acc@{L}[{label}]", b.get("acc"))
            put(f"{task}_lp@{L}[{label}]", b.get("lp"))
    if res.get("chains"):
        put(f"{task}_chain@{L}", res["chains"].get("acc"))
        put(f"{task}_hop2_acc@{L}", (res.get("hops") or {}).get("2", {}).get("acc"))
    return out


def attention(ctx: StageContext) -> dict[str, Any]:
    """The attention stage's pool entry point on the extended model, or on the pretrained one before
    extension (``attn_*`` columns; ``base_attn_*`` before), at the same lengths for both."""
    from archpool.attention.runner import pool_stage

    c = ctx.config
    settings = {k: v for k, v in (c["attention"] or {}).items() if k != "enabled"}
    length = c.get("analysis_len") or int(ctx.input_results["model"].get("length") or 0) or None
    res = pool_stage(ctx.inputs["model"], ctx.out_dir, store=ctx.input_results.get("data", {}).get("store"),
                     settings=settings, seq_len=int(c["seq_len"]), long_ctx=length, log=ctx.log)
    return {"metrics": res["metrics"], "json": res["json"]}


STAGES = {"data": data, "pretrain": pretrain, "extend": extend, "eval": eval, "attention": attention}


# ---------------------------------------------------------------------------------------------
# report

def report(out: Path, pool, rows: list[dict[str, Any]]) -> Path:
    """``report/report.md`` (every run, failures listed) and the analysis stage's report of the pool
    directory (``report/report.html`` + figures, tables, ``analysis.json``, ``analysis.txt``)."""
    plain = _plain_report(out, pool, rows)
    try:
        from archpool.analysis import analyze, format_text, load_results
        from archpool.report import write_report
    except ModuleNotFoundError:
        return plain
    opts = dict(pool.report or {})
    target = opts.get("target")
    short_ctx = pool.short_ctx  # the pool's one definition (also in results.csv's short_ctx column)
    covariates = opts.get("covariates") or ()
    done = [r for r in rows if r.get("state") == "done"]
    if len(done) < 3:
        _append(plain, f"\n(analysis skipped: {len(done)} finished run(s); it needs at least 3)\n")
        return plain
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = load_results(out)
            text = format_text(analyze(df, target, short_ctx, covariates))
            atomic_write_text(Path(out) / "report" / "analysis.txt", text + "\n")
            page = write_report(df, Path(out) / "report", target, short_ctx, covariates,
                                findings_targets=opts.get("findings") or ())
    except Exception as e:  # keep the plain report; show why the analysis did not run
        _append(plain, f"\n## Analysis failed\n\n`{type(e).__name__}: {e}`\n")
        return plain
    _append(plain, "\n## Analysis\n\n```\n" + text + "\n```\n\nHTML report: report.html\n")
    return page


def _append(path: Path, text: str) -> None:
    atomic_write_text(path, path.read_text() + text)


HEADLINE = ("pretrain_loss", "extension_loss", "attn_sink_rate", "attn_entropy")


def _plain_report(out: Path, pool, rows: list[dict[str, Any]]) -> Path:
    """Every run with its axes, state and headline metrics (results.csv has them all)."""
    target = (pool.report or {}).get("target")
    metrics = [m for m in (target, *HEADLINE) if m and any(m in r for r in rows)]
    cols = ["run", "feature_count", "swa", "qk_norm", "norm", "n_kv_heads", "pretrain_ctx", "state", *metrics]
    lines = [f"# Pool `{pool.name}` ({pool.size}, {len(rows)} runs)", "", pool.description, "",
             f"All metrics: `{Path(out) / 'results.csv'}`" + (f"; target `{target}`." if target else "."), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |")
    failed = [r for r in rows if r.get("state") == "failed"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- `{r['run']}`: {r.get('error', '')} (log: runs/{r['run']}/log.txt)" for r in failed]
    path = Path(out) / "report" / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
