"""``evaluate``: the whole evaluation of one target (what ``archpool eval`` and the pool call)."""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from archpool.errors import ConfigError
from archpool.io import atomic_write_json, atomic_write_text
from archpool.names import ALL_SUITES, SCORED_SUITES, SUITE_NAMES, TASK_SUITES, TEXT_SUITES
from archpool.study import EVAL_SAMPLES, EVAL_SEED
from archpool.tasks import SUITES

DEFAULT_SUITES = [ALL_SUITES]


def default_lengths(pretrain_len: int) -> list[int]:
    return [pretrain_len * m for m in (1, 2, 4, 8)]


def expand_suites(suites: Sequence[str]) -> list[str]:
    out: list[str] = []
    for s in suites:
        for part in str(s).split(","):
            part = part.strip()
            if not part:
                continue
            if part not in SUITE_NAMES:
                raise ConfigError("suite", f"unknown suite {part!r}; allowed: {', '.join(SUITE_NAMES)}")
            for x in [*TASK_SUITES, *TEXT_SUITES] if part == ALL_SUITES else [part]:
                if x not in out:
                    out.append(x)
    return out


def check_counts(lengths: Sequence[int], n_samples: int) -> None:
    """ConfigError unless every length and the sample count are positive integers."""
    for name, values in (("lengths", list(lengths)), ("n_samples", [n_samples])):
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1]
        if bad:
            raise ConfigError(name, f"must be positive integers, got {bad[0]!r}")


def store_haystack(store) -> list[str] | None:
    """Held-out text for corpus haystacks: the store's long validation documents, else its short ones."""
    from archpool.data.streams import validation_texts

    return validation_texts(store, "long")[:64] or validation_texts(store, "short")[:256] or None


def evaluate(
    target,
    *,
    suites: Sequence[str] = DEFAULT_SUITES,
    lengths: Sequence[int] | None = None,
    modes: Sequence[str] = ("gen", "ll"),
    n_samples: int = EVAL_SAMPLES,
    seed: int = EVAL_SEED,
    out_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    haystack_texts: list[str] | None = None,
    store=None,
    evaluator=None,
    categories: Sequence[str] | None = None,
    task_params: dict | None = None,
    longppl_docs: list | None = None,
    longppl_K: int | None = None,
    longppl_alpha: float | None = None,
    longppl_beta: float | None = None,
    short_tasks: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a loaded ``Target`` (see ``archpool.eval.target.load_target``) and write
    ``out_dir/results.json`` (+ ``report.md`` and one JSON per task × length × mode).

    ``short_tasks``: the ``short`` suite also scores every task suite at the pretraining context when
    no task suite is asked for (off for callers that score their own task list, e.g. pools).
    ``longppl_K`` / ``longppl_alpha`` / ``longppl_beta``: LongPPL's short-context window and
    key-token thresholds (default: the pretraining context, 2 and -2, as the ``longppl`` package)."""
    import torch

    from archpool.eval import longppl as LP
    from archpool.eval import short as S
    from archpool.eval.lm import stop_token_ids
    from archpool.eval.runner import TaskRunConfig, aggregate, format_table, run_tasks

    t0 = time.perf_counter()
    suites = expand_suites(suites)
    lengths = sorted(set(lengths or default_lengths(target.pretrain_len)))
    check_counts(lengths, n_samples)
    out = Path(out_dir) if out_dir else None
    cache = Path(cache_dir) if cache_dir else None
    if haystack_texts is None and store is not None:
        haystack_texts = store_haystack(store)
    result: dict[str, Any] = {
        "target": str(target.path),
        "kind": target.kind,
        "model_hash": target.model_hash,
        "tokenizer_hash": target.tokenizer_hash,
        "pretrain_len": target.pretrain_len,
        "lengths": lengths,
        "modes": list(modes),
        "suites": suites,
        "seed": seed,
        "n_samples": n_samples,
        "haystack": "held-out text" if haystack_texts else "pseudo-text (no held-out text given)",
        "mode_note": "gen = greedy generation scored by the task metric (0-100); ll = gold continuation ranked first "
        "among n_candidates by log-probability (accuracy 0-100; chance = 100/n_candidates)",
    }
    task_names: list[str] = []
    for s in TASK_SUITES:
        if s in suites:
            task_names += [t for t in SUITES[s] if t not in task_names]
    stop = stop_token_ids(target.tokenizer, target.lm.backend.vocab_size)

    def tasks_at(names: list[str], at: list[int]) -> list[dict[str, Any]]:
        cfg = TaskRunConfig(names, at, list(modes), n_samples, seed, dict(task_params or {}), haystack_texts)
        return run_tasks(target.lm, target.tokenizer, cfg, model_hash=target.model_hash, tokenizer_hash=target.tokenizer_hash,
                         out_dir=out, cache_dir=cache, progress=progress, stop_ids=stop)  # fmt: skip

    task_results: list[dict[str, Any]] = tasks_at(task_names, lengths) if task_names else []
    if "short" in suites:
        short: dict[str, Any] = {"pretrain_len": target.pretrain_len, **S.training_losses(target)}
        if not task_names and short_tasks:  # the task suites at the pretraining context
            task_results += tasks_at([t for s in SCORED_SUITES for t in SUITES[s]], [target.pretrain_len])
        if store is not None:
            short["val_ppl"] = S.validation_perplexity(target.lm, store, target.pretrain_len)
        else:
            short["val_ppl"] = {"skipped": "no prepared data store (pass --data)"}
        result["short"] = short
    if "longppl" in suites:
        docs = longppl_docs
        if docs is None and store is not None:
            from archpool.data.streams import validation_set

            docs = [torch.as_tensor(d, dtype=torch.long) for d in validation_set(store).long]
        if not docs:
            result["longppl"] = [{"suite": "longppl", "skipped": "no held-out long documents (pass --data)"}]
        else:
            ev = evaluator or target
            thresholds = {k: v for k, v in (("alpha", longppl_alpha), ("beta", longppl_beta)) if v is not None}
            result["longppl"] = LP.run_longppl(
                target.lm,
                ev.lm,
                docs,
                lengths,
                longppl_K or target.pretrain_len,
                evaluator_hash=ev.model_hash,
                tokenizer_hash=target.tokenizer_hash,
                cache_dir=cache,
                **thresholds,
            )
            result["longppl_evaluator"] = "self" if evaluator is None else str(evaluator.path)
            if evaluator is not None and evaluator.tokenizer_hash != target.tokenizer_hash:
                raise ConfigError("evaluator", "the LongPPL evaluator must share the pool's tokenizer")
    result["tasks"] = [{k: v for k, v in r.items() if k != "samples"} for r in task_results]
    result["aggregate"] = aggregate(task_results, categories) if task_results else {}
    result["wall_s"] = time.perf_counter() - t0
    if out is not None:
        atomic_write_json(out / "results.json", result)
        atomic_write_text(out / "report.md", render_report(result, format_table(task_results) if task_results else ""))
    return result


def render_report(result: dict[str, Any], table: str) -> str:
    lines = [
        f"# Evaluation of {result['target']}",
        "",
        f"- model {result['model_hash'][:12]}, tokenizer {result['tokenizer_hash'][:12]}, pretraining context {result['pretrain_len']}",
        f"- lengths {result['lengths']}, seed {result['seed']}",
    ]
    if table:  # what only task suites use
        lines += [
            f"- {result['n_samples']} samples per task × length × mode",
            f"- haystack: {result['haystack']}",
            f"- {result['mode_note']}",
        ]
    lines.append("")
    if table:
        lines += ["## Tasks", "", table, ""]
        lines += _skip_reasons(result.get("tasks") or [])
    lines += _suite_rows(result)
    if "longppl" in result:
        lines += ["## LongPPL / PPL", "", "| length | ppl | longppl | key tokens |", "|---|---|---|---|"]
        for r in result["longppl"]:
            if "skipped" in r:
                lines.append(f"| {r.get('length', '')} | skipped: {r['skipped']} | | |")
            else:
                lp = r.get("longppl")
                lines.append(
                    f"| {r['length']} | {r['ppl']:.2f} | {'' if lp is None else f'{lp:.2f}'} | {r.get('n_key_token', 0)} |"
                )
        lines.append("")
    if "short" in result:
        lines += ["## Short context", "", "```", str({k: v for k, v in result["short"].items()}), "```", ""]
    return "\n".join(lines)


def _suite_rows(result: dict[str, Any]) -> list[str]:
    """The suite score table, with a column per suite asked for (all three when only ``short`` ran the
    suites at the pretraining context); a score over fewer tasks than the suite has is marked."""
    asked = [s for s in SCORED_SUITES if s in result.get("suites", [])]
    if not asked and "short" in result.get("suites", []):
        asked = list(SCORED_SUITES)
    agg = {k: e for k, e in (result.get("aggregate") or {}).items() if any(e.get(s, {}).get("score") is not None for s in asked)}
    if not agg:
        return []
    lines = ["## Suites", "", "| mode@length | " + " | ".join(asked) + " |", "|---|" + "---|" * len(asked)]
    incomplete = False
    for k, e in agg.items():
        cells = []
        for s in asked:
            entry = e.get(s, {})
            score = entry.get("score")
            mark = " (incomplete)" if score is not None and entry.get("complete") is False else ""
            incomplete = incomplete or bool(mark)
            cells.append("" if score is None else f"{score:.1f}{mark}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    if incomplete:
        lines += ["", "(incomplete): the mean over the tasks that ran; the suite's other tasks were skipped at that "
                  "length or not asked for (results.json lists the tasks each score averages)."]  # fmt: skip
    return [*lines, ""]


def _skip_reasons(tasks: list[dict[str, Any]]) -> list[str]:
    """Why cells of the task table say ``skip``: one line per task and reason, with its lengths."""
    reasons: dict[tuple[str, str], list[int]] = {}
    for r in tasks:
        if "skipped" in r:
            lengths = reasons.setdefault((r["task"], r["skipped"]), [])
            if r["length"] not in lengths:
                lengths.append(r["length"])
    if not reasons:
        return []
    lines = ["Skipped cells:", ""]
    lines += [f"- {task} at {', '.join(map(str, sorted(ls)))}: {why}" for (task, why), ls in sorted(reasons.items())]
    return [*lines, ""]
