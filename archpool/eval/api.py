"""``evaluate``: the whole evaluation of one target (what ``archpool eval`` and the pool call), asked
for with one :class:`EvalRequest`."""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from archpool.errors import ConfigError
from archpool.io import atomic_write_json, atomic_write_text
from archpool.names import ALL_SUITES, MODES, SCORED_SUITES, SUITE_NAMES, TASK_SUITES, TEXT_SUITES
from archpool.study import EVAL_SAMPLES, EVAL_SEED
from archpool.tasks import HELMET_CATEGORIES, SUITES, TaskConfig, get_task, task_configs, task_names

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
                raise ConfigError("suites", f"unknown suite {part!r}; allowed: {', '.join(SUITE_NAMES)}")
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


def _strings(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class EvalRequest:
    """What one evaluation measures and where it writes; checked once, when built (a ``ConfigError``
    names the field). The task list runs first, then the suites; with a task list and no suite,
    nothing is written but the per-task files."""

    suites: Sequence[str] = tuple(DEFAULT_SUITES)
    """Suite names (``SUITE_NAMES``; entries may be comma-separated), kept expanded: ``all`` = every suite."""
    tasks: Sequence[str] = ()
    """An explicit task list, scored at ``lengths`` before the suites (its aggregate wins where both have one)."""
    lengths: Sequence[int] | None = None
    """Token budgets; None: the pretraining context × 1, 2, 4, 8."""
    modes: Sequence[str] = MODES
    """Scoring modes: ``gen`` (greedy generation) and/or ``ll`` (gold continuation ranked by log-probability)."""
    n_samples: int = EVAL_SAMPLES
    """Samples per task × length × mode."""
    seed: int = EVAL_SEED
    """Seed of the task samples."""
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-task parameter overrides (task name -> parameters), as written (results record them)."""
    categories: Sequence[str] | None = None
    """HELMET categories the ``helmet`` score averages; None: all of them."""
    longppl_k: int | None = None
    """LongPPL's short-context window in tokens; None: the pretraining context."""
    longppl_alpha: float | None = None
    """LongPPL key-token threshold on the long-short log-prob gain; None: the ``longppl`` package's 2."""
    longppl_beta: float | None = None
    """LongPPL key-token threshold on the long-context log-prob; None: the ``longppl`` package's -2."""
    out_dir: Path | None = None
    """Where ``results.json``, ``report.md`` and ``tasks/<task>/<length>_<mode>.json`` go; None: nowhere."""
    cache_dir: Path | None = None
    """Task and LongPPL result cache; None: no cache."""
    configs: Mapping[str, TaskConfig] | None = field(default=None, repr=False, compare=False)
    """The typed config of every task in ``task_params``: given by a caller that holds them already (a
    pool's ``eval:`` section, typed when the pool was parsed), else built once, with the request."""

    def __post_init__(self) -> None:
        norm = {
            "suites": tuple(expand_suites(_strings(self.suites))),
            "tasks": _strings(self.tasks or ()),
            "lengths": None if self.lengths is None else tuple(self.lengths),
            "modes": _strings(self.modes),
            "categories": None if self.categories is None else _strings(self.categories),
            "task_params": dict(self.task_params),
            "out_dir": None if self.out_dir is None else Path(self.out_dir),
            "cache_dir": None if self.cache_dir is None else Path(self.cache_dir),
        }
        for name, value in norm.items():
            object.__setattr__(self, name, value)
        if self.configs is None:
            object.__setattr__(self, "configs", task_configs(self.task_params, "task_params"))
        elif set(self.configs) != set(self.task_params):
            raise ConfigError("task_params", "the typed task configs given name other tasks than task_params")
        self.validate()

    def validate(self) -> None:
        """ConfigError naming the first field that is not valid."""
        check_counts(self.lengths or (), self.n_samples)
        for mode in self.modes:
            if mode not in MODES:
                raise ConfigError("modes", f"unknown scoring mode {mode!r}; allowed: {', '.join(MODES)}")
        for name in self.tasks:
            if name not in task_names():
                raise ConfigError("tasks", f"unknown task {name!r}; allowed: {', '.join(task_names())}")
        for c in self.categories or ():
            if c not in HELMET_CATEGORIES:
                raise ConfigError("categories", f"unknown HELMET category {c!r}; allowed: {', '.join(HELMET_CATEGORIES)}")
        if self.longppl_k is not None and (isinstance(self.longppl_k, bool) or self.longppl_k < 1):
            raise ConfigError("longppl_k", f"must be a positive integer, got {self.longppl_k!r}")

    def task_config(self, name: str) -> TaskConfig:
        """Task ``name``'s typed config: its ``task_params`` over its defaults."""
        return (self.configs or {}).get(name) or get_task(name).config

    def suite_tasks(self) -> list[str]:
        """The tasks of the task suites asked for, each once, in suite order."""
        names: list[str] = []
        for s in TASK_SUITES:
            if s in self.suites:
                names += [t for t in SUITES[s] if t not in names]
        return names


def evaluate(
    target, request: EvalRequest, *, store=None, texts: list[str] | None = None, evaluator=None, progress: bool = True
) -> dict[str, Any]:
    """Evaluate a ``LoadedModel`` (see ``archpool.eval.target.load_target``) as ``request`` asks.

    ``store``: a prepared data store (held-out haystacks, LongPPL documents, validation perplexity);
    ``texts``: held-out texts, the haystacks and LongPPL documents instead of the store's;
    ``evaluator``: the LongPPL evaluator (a ``LoadedModel``; default the target itself).

    Returns the results of the task list and the suites. ``out_dir/results.json`` and ``report.md``
    hold the suites' results (none is written for a task list alone); every task × length × mode
    also goes to ``out_dir/tasks/``."""
    t0 = time.perf_counter()
    lengths = sorted(set(request.lengths or default_lengths(target.pretrain_len)))
    haystack = texts if texts is not None else (store_haystack(store) if store is not None else None)
    run = _Evaluation(target, request, lengths, haystack, store, progress)
    listed = run.tasks_at(list(request.tasks), lengths) if request.tasks else []
    if request.tasks and not request.suites:
        return {"tasks": _without_samples(listed), "aggregate": run.aggregate(listed)}
    result = run.suites(texts, evaluator, t0)
    if listed:
        result["tasks"] = _without_samples(listed) + result["tasks"]
        result["aggregate"] = {**result["aggregate"], **run.aggregate(listed)}
    return result


def _without_samples(task_results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "samples"} for r in task_results]


@dataclass
class _Evaluation:
    """One target's evaluation at resolved lengths, with its held-out haystack text."""

    target: Any
    request: EvalRequest
    lengths: list[int]
    haystack: list[str] | None
    store: Any
    progress: bool

    @cached_property
    def stop_ids(self) -> set[int]:
        from archpool.eval.lm import stop_token_ids

        return stop_token_ids(self.target.tokenizer, self.target.lm.backend.vocab_size)

    def tasks_at(self, names: list[str], at: list[int]) -> list[dict[str, Any]]:
        """Every task of ``names`` × length of ``at`` × mode (with its samples)."""
        from archpool.eval.runner import run_tasks

        t = self.target
        return run_tasks(t.lm, t.tokenizer, self.request, names, at, model_hash=t.model_hash, tokenizer_hash=t.tokenizer_hash,
                         haystack_texts=self.haystack, progress=self.progress, stop_ids=self.stop_ids)  # fmt: skip

    def aggregate(self, task_results: list[dict[str, Any]]) -> dict[str, Any]:
        from archpool.eval.runner import aggregate

        return aggregate(task_results, self.request.categories) if task_results else {}

    def header(self) -> dict[str, Any]:
        t, r = self.target, self.request
        return {
            "target": str(Path(t.path).resolve()),
            "kind": t.kind,
            "model_hash": t.model_hash,
            "weights_hash": t.weights_hash,
            "tokenizer_hash": t.tokenizer_hash,
            "pretrain_len": t.pretrain_len,
            "lengths": self.lengths,
            "modes": list(r.modes),
            "suites": list(r.suites),
            "seed": r.seed,
            "n_samples": r.n_samples,
            "haystack": "held-out text" if self.haystack else "pseudo-text (no held-out text given)",
            "mode_note": "gen = greedy generation scored by the task metric (0-100); ll = gold continuation ranked first "
            "among n_candidates by log-probability (accuracy 0-100; chance = 100/n_candidates)",
        }

    def suites(self, texts: list[str] | None, evaluator, t0: float) -> dict[str, Any]:
        """The suites asked for; writes ``results.json`` and ``report.md`` into ``out_dir``."""
        from archpool.eval.runner import format_table

        result = self.header()
        names = self.request.suite_tasks()
        task_results = self.tasks_at(names, self.lengths) if names else []
        if "short" in self.request.suites:
            result["short"] = self.short(task_results, suite_tasks=bool(names))
        if "longppl" in self.request.suites:
            result.update(self.longppl(texts, evaluator))
        result["tasks"] = _without_samples(task_results)
        result["aggregate"] = self.aggregate(task_results)
        result["wall_s"] = time.perf_counter() - t0
        out = self.request.out_dir
        if out is not None:
            atomic_write_json(out / "results.json", result)
            atomic_write_text(out / "report.md", render_report(result, format_table(task_results) if task_results else ""))
        return result

    def short(self, task_results: list[dict[str, Any]], suite_tasks: bool) -> dict[str, Any]:
        """Short-context metrics; with no task asked for (no task suite, no task list), the task suites
        at the pretraining context are appended to ``task_results``."""
        from archpool.eval import short as S

        t = self.target
        short: dict[str, Any] = {"pretrain_len": t.pretrain_len, **S.training_losses(t)}
        if not suite_tasks and not self.request.tasks:
            task_results += self.tasks_at([name for s in SCORED_SUITES for name in SUITES[s]], [t.pretrain_len])
        if self.store is not None:
            short["val_ppl"] = S.validation_perplexity(t.lm, self.store, t.pretrain_len)
        else:
            short["val_ppl"] = {"skipped": "no prepared data store (pass --data)"}
        return short

    def longppl(self, texts: list[str] | None, evaluator) -> dict[str, Any]:
        """``longppl`` (one row per length) and ``longppl_evaluator``, or a skipped row without documents."""
        import torch

        from archpool.eval import longppl as LP

        t, r = self.target, self.request
        docs = [torch.tensor(t.tokenizer.encode(x), dtype=torch.long) for x in texts] if texts else None
        if docs is None and self.store is not None:
            from archpool.data.streams import validation_set

            docs = [torch.as_tensor(d, dtype=torch.long) for d in validation_set(self.store).long]
        if not docs:
            return {"longppl": [{"suite": "longppl", "skipped": "no held-out long documents (pass --data)"}]}
        ev = evaluator or t
        thresholds: dict[str, Any] = {k: v for k, v in (("alpha", r.longppl_alpha), ("beta", r.longppl_beta)) if v is not None}
        rows = LP.run_longppl(
            t.lm,
            ev.lm,
            docs,
            self.lengths,
            r.longppl_k or t.pretrain_len,
            evaluator_hash=ev.model_hash,
            tokenizer_hash=t.tokenizer_hash,
            cache_dir=r.cache_dir,
            **thresholds,
        )
        if evaluator is not None and evaluator.tokenizer_hash != t.tokenizer_hash:
            raise ConfigError("evaluator", "the LongPPL evaluator must share the pool's tokenizer")
        return {"longppl": rows, "longppl_evaluator": "self" if evaluator is None else str(Path(evaluator.path).resolve())}


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
