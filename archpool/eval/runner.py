"""Run task suites over a model: every task × length × scoring mode, one JSON result each.

Results carry the sample count, seed, scoring mode and (likelihood mode) chance; each is cached by
(the whole model's hash: weights, config and the files beside them, ``archpool.eval.hfdir.model_sha256``;
tokenizer hash, task, length, mode, sample count, seed, the task's parameters as written and the hash of
its haystack texts), everything its score depends on, so a re-run or a pool re-using a model costs nothing,
a config-only change (RoPE, context) is scored afresh, and one cache can serve every request.
Aggregates: RULER = mean of task scores per length; HELMET = mean over the chosen categories of
each category's mean task score.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from archpool.errors import ConfigError
from archpool.io import atomic_write_json, owned_path, read_cache_entry, sha256_json, write_cache_entry
from archpool.names import SCORED_SUITES
from archpool.tasks import HELMET_CATEGORIES, SUITES, SampleConfig, TaskConfig, build_sample, is_dense

TASK_FORMAT_VERSION = 3  # bump when a generator or scoring rule changes (invalidates the cache)
# 3: model hashes are the verified sha256 of the weights on disk, never a manifest's claim (which could be poisoned)
DENSE_MODE = "dense"  # dense tasks (MQAR) are scored once, whatever the modes


def task_result_key(
    model_hash: str,
    tokenizer_hash: str,
    task: str,
    length: int,
    mode: str,
    n: int,
    seed: int,
    params: dict[str, Any],
    haystack_hash: str | None,
) -> str:
    return sha256_json(
        {
            "v": TASK_FORMAT_VERSION,
            "model": model_hash,
            "tokenizer": tokenizer_hash,
            "task": task,
            "length": length,
            "mode": mode,
            "n": n,
            "seed": seed,
            "params": params,
            "haystack": haystack_hash,
        }
    )[:24]


def run_task(
    lm,
    tokenizer,
    task: str,
    length: int,
    modes: Sequence[str],
    n: int,
    seed: int,
    config: SampleConfig | None = None,
    stop_ids: set[int] | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Score ``n`` samples of ``task`` at ``length`` in each mode; one result dict per mode.
    ``config``: the task's typed config (default: its defaults); ``params``: its parameters as written,
    which the results record."""
    from archpool.eval.metrics import rank_of_gold, score_generation

    t0 = time.perf_counter()
    try:
        samples = [build_sample(task, tokenizer, length, i, seed, config) for i in range(n)]
    except ConfigError as e:
        return {m: {"task": task, "length": length, "mode": m, "skipped": str(e), "n": 0, "seed": seed} for m in modes}
    out: dict[str, dict[str, Any]] = {}
    meta_keys = ("needle_distance", "depth", "depths", "haystack")
    for mode in modes:
        rows = []
        for s in samples:
            assert len(s.prompt_ids) + s.reserved <= length, "prompt budget violated"
            row: dict[str, Any] = {"index": s.index, "seed": s.seed, "prompt_tokens": len(s.prompt_ids)}
            row.update({k: s.meta[k] for k in meta_keys if k in s.meta})
            if mode == "gen":
                ids = lm.greedy_generate(s.prompt_ids, s.max_new_tokens, stop_ids)
                assert len(s.prompt_ids) + len(ids) <= length
                pred = tokenizer.decode(ids)
                row.update(pred=pred, gen_ids=ids, score=score_generation(s.metric, pred, s.answers, s.meta))
            else:
                cands = [tokenizer.encode(c) for c in s.candidates]
                lps = lm.continuation_logprobs(s.prompt_ids, cands)
                rank = rank_of_gold(lps)
                row.update(
                    gold_logprob=lps[0], rank=rank, n_candidates=len(cands), score=float(rank == 0), chance=1.0 / len(cands)
                )
            rows.append(row)
        res: dict[str, Any] = {
            "task": task,
            "length": length,
            "mode": mode,
            "n": len(rows),
            "seed": seed,
            "metric": samples[0].metric if mode == "gen" else "ll_accuracy",
            "score": 100.0 * sum(r["score"] for r in rows) / len(rows),
            "params": {k: v for k, v in (params or {}).items() if k != "haystack_texts"},
            "prompt_tokens_mean": sum(r["prompt_tokens"] for r in rows) / len(rows),
            "reserved_tokens": samples[0].reserved,
            "samples": rows,
        }
        if mode == "ll":
            res["chance"] = 100.0 * sum(r["chance"] for r in rows) / len(rows)
            res["gold_logprob_mean"] = sum(r["gold_logprob"] for r in rows) / len(rows)
            res["n_candidates"] = rows[0]["n_candidates"]
        out[mode] = res
    wall = time.perf_counter() - t0
    for r in out.values():
        r["wall_s"] = wall / len(out)
    return out


def run_tasks(
    lm,
    tokenizer,
    request: Any,
    tasks: Sequence[str],
    lengths: Sequence[int],
    *,
    model_hash: str,
    tokenizer_hash: str,
    haystack_texts: list[str] | None = None,
    progress: bool = True,
    stop_ids: set[int] | None = None,
) -> list[dict[str, Any]]:
    """Every task of ``tasks`` × length of ``lengths`` × mode of ``request`` (an
    ``archpool.eval.api.EvalRequest``, which imports this module: its modes, samples, seed and task
    parameters); results are written to ``request.out_dir/tasks/`` and cached in ``request.cache_dir``.
    ``haystack_texts``: held-out text for corpus haystacks."""
    out_dir, cache_dir = request.out_dir, request.cache_dir
    haystack_hash = sha256_json(haystack_texts)[:16] if haystack_texts else None
    jobs = [(t, L) for L in lengths for t in tasks]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), unit="task", desc=f"eval {lm.name}", dynamic_ncols=True)
    results: list[dict[str, Any]] = []
    with_haystack: dict[str, TaskConfig] = {}  # a text task's config with the store's haystack, built once per task
    try:
        for task, length in jobs:
            params = request.task_params.get(task, {})
            config = request.task_config(task)
            dense = is_dense(task)  # token documents: no haystack, scored once whatever the modes
            if haystack_texts and "haystack_texts" not in params and not dense:
                if task not in with_haystack:
                    with_haystack[task] = config.replace(haystack_texts=haystack_texts)
                config = with_haystack[task]
            shown = {k: v for k, v in params.items() if k != "haystack_texts"}
            # the task's own haystack texts (by their hash, as the store's), else the store's
            texts_hash = sha256_json(params["haystack_texts"])[:16] if "haystack_texts" in params else haystack_hash
            modes = [DENSE_MODE] if dense else list(request.modes)
            todo, got = [], {}
            for mode in modes:
                key = task_result_key(
                    model_hash, tokenizer_hash, task, length, mode, request.n_samples, request.seed, shown, texts_hash
                )
                path = cache_dir / f"{key}.json" if cache_dir else None
                cached = _cached_result(path, key, task, length, mode) if path is not None else None
                if cached is not None:
                    got[mode] = {**cached, "cached": True}
                else:
                    todo.append((mode, key, path))
            if todo:
                if dense:
                    from archpool.eval.dense import run_dense_task

                    fresh = {DENSE_MODE: run_dense_task(lm, tokenizer, task, length, request.n_samples, request.seed, config)}
                else:
                    modes_todo = [m for m, _, _ in todo]
                    fresh = run_task(
                        lm, tokenizer, task, length, modes_todo, request.n_samples, request.seed, config, stop_ids, shown
                    )
                for mode, key, path in todo:
                    r = {**fresh[mode], "cache_key": key, "model_hash": model_hash, "tokenizer_hash": tokenizer_hash}
                    if path is not None:
                        write_cache_entry(path, r)
                    got[mode] = r
            for mode in modes:
                r = got[mode]
                if out_dir is not None:
                    atomic_write_json(owned_path(out_dir, "tasks", task) / f"{length}_{mode}.json", r)
                results.append(r)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return results


def _cached_result(path: Path, key: str, task: str, length: int, mode: str) -> dict[str, Any] | None:
    """The cached result in ``path`` when its content hash matches (``archpool.io.read_cache_entry``: an
    entry edited by hand is recomputed, with a warning) and it is this task's entry with a numeric score;
    None when there is none or it is damaged (the task is then recomputed)."""
    r = read_cache_entry(path)
    if r is None:
        return None
    score = r.get("score")
    ok_score = score is None or (isinstance(score, (int, float)) and not isinstance(score, bool))
    same = (r.get("cache_key"), r.get("task"), r.get("length"), r.get("mode")) == (key, task, length, mode)
    return r if same and ok_score else None


def _mean(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else None


def aggregate(results: list[dict[str, Any]], categories: Sequence[str] | None = None) -> dict[str, Any]:
    """Suite scores per (mode, length): ``ruler`` = mean over RULER tasks present; ``helmet`` = mean of
    category means (categories: ``categories`` or all four); ``tiny`` = mean over the tiny suite.
    A suite with a skipped or missing task gets ``complete: false`` and lists what it averaged."""
    cats = list(categories or HELMET_CATEGORIES)
    for c in cats:
        if c not in HELMET_CATEGORIES:
            raise ConfigError("categories", f"unknown HELMET category {c!r}; allowed: {', '.join(HELMET_CATEGORIES)}")
    table: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in results:
        table.setdefault((r["mode"], r["length"]), {})[r["task"]] = r
    out: dict[str, Any] = {}
    for (mode, length), by_task in sorted(table.items()):
        scored = {t: r["score"] for t, r in by_task.items() if "score" in r}
        entry: dict[str, Any] = {}
        for suite in SCORED_SUITES:
            if suite == "helmet":  # the mean of its category means, below
                continue
            want = [t for t in SUITES[suite] if t in by_task]
            if want:
                have = [t for t in want if t in scored]
                entry[suite] = {
                    "score": _mean(scored[t] for t in have),
                    "tasks": have,
                    "complete": len(have) == len(SUITES[suite]),
                }
        cat_scores, used = {}, {}
        for c in cats:
            have = [t for t in HELMET_CATEGORIES[c] if t in scored]
            if have:
                cat_scores[c] = _mean(scored[t] for t in have)
                used[c] = have
        if cat_scores:
            complete = all(set(used.get(c, [])) == set(HELMET_CATEGORIES[c]) for c in cats)
            entry["helmet"] = {"score": _mean(cat_scores.values()), "categories": cat_scores, "tasks": used, "complete": complete}
        if mode == "ll":
            entry["chance"] = {t: r.get("chance") for t, r in by_task.items() if "chance" in r}
        out[f"{mode}@{length}"] = entry
    return out


def format_table(results: list[dict[str, Any]]) -> str:
    """Markdown: one row per task × mode, one column per length; likelihood cells show chance."""
    lengths = sorted({r["length"] for r in results})
    rows: dict[tuple[str, str], dict[int, str]] = {}
    for r in results:
        cell = (
            "skip"
            if "skipped" in r
            else f"{r['score']:.1f}" + (f" (chance {r['chance']:.0f})" if r["mode"] in ("ll", DENSE_MODE) else "")
        )
        rows.setdefault((r["task"], r["mode"]), {})[r["length"]] = cell
    head = "| task | mode | " + " | ".join(str(L) for L in lengths) + " |"
    sep = "|---|---|" + "---|" * len(lengths)
    body = [f"| {t} | {m} | " + " | ".join(c.get(L, "") for L in lengths) + " |" for (t, m), c in sorted(rows.items())]
    return "\n".join([head, sep, *body])
