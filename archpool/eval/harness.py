"""lm-evaluation-harness's RULER (``lm_eval.tasks.ruler``: the field's own RULER, as papers report it) over a
Hugging Face model directory, through lm-eval's Python API: ``lm_eval.simple_evaluate`` with its ``hf``
backend (``HFLM``) on the directory, the directory's own tokenizer sizing every prompt, and
``metadata={"max_seq_lengths": [length]}``. archpool's own ``ruler`` suite (``archpool.tasks``) is
RULER-*style*: its own templates and scorers; this module runs lm-eval's templates, generators and scorer
unchanged.

- Tasks: the 13 of lm-eval's ``ruler`` group (:data:`RULER_TASKS`). Six build their documents locally
  (:data:`LOCAL_TASKS`, the default); the others download data when their documents are built (Paul
  Graham's essays from the Hugging Face Hub, SQuAD and HotpotQA from fixed URLs) and lm-eval has no option
  to read that data from local files, so they run only with ``allow_download`` (``--allow-download``);
  otherwise :class:`DownloadRefused` names them.
- Offline: without ``allow_download`` the run sets ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` (and the
  loaded libraries' flags), and lm-eval's import-time ``nltk.download("punkt_tab")`` (a sentence splitter
  only the essay haystacks use) is skipped.
- One ``simple_evaluate`` call per task × length, each with lm-eval's seeds (``random`` 0, numpy and torch
  1234, or ``seed`` for all three) set afresh, so a cell's documents do not depend on which other cells
  ran: they are the documents lm-eval's task function builds after the same seeding. lm-eval's task
  functions generate 500 documents per length and lm-eval scores the first ``limit``; the generators are
  asked for those ``limit`` alone (:func:`documents_up_to`), which are the same documents, and lm-eval's
  report of the environment (subprocesses, about a second a cell) is skipped.
- Generation (``generation``): ``answer`` (the default) bounds the greedy decoding of the needle tasks
  (``niah_*``: their prompts end with an answer prefix, "The special magic number for X mentioned in the
  provided text is", that the needles follow) by the cell's gold answers (:func:`answer_budget`: the tokens
  of a document's answers, plus room for separators, never more than lm-eval's 128), so a document that is
  not answered is not decoded for 128 tokens; the answers are matched in the prediction, so decoding past
  them cannot add to a score except when a model writes something else before them. The other tasks keep
  lm-eval's own budgets, already sized to their answers (variable tracking 30, common and frequent words
  120 and 50, QA 32 tokens): a word list scores partial credit for every listed answer, and a shorter one
  would lose some. ``task`` keeps lm-eval's budgets for every task. Decoding stops at the end-of-text token
  either way, and each prompt is prefilled once (transformers' ``generate`` with its KV cache).
  ``batch_size`` documents go to the model at once (lm-eval pads them).
- Scores: lm-eval's per-length metric (``string_match_all``; ``string_match_part`` for QA) × 100.
  Columns (:func:`harness_columns`): ``ruler_<task>@<length>`` per task (lm-eval's name without its
  ``ruler_`` prefix: ``ruler_niah_single_1@4096``, ``ruler_vt@4096``), ``ruler@<length>`` = the mean over
  the tasks scored at that length, and ``ruler_tasks@<length>`` = how many of the 13 tasks that mean
  covers (a 6-task mean is not the paper's 13-task RULER).
- The model's window (``HFLM max_length``) is the longest length plus the longest generation budget (128
  tokens): lm-eval sizes a prompt to fit its length with that budget, and its answer prefix can add a
  few tokens, which a window of exactly the length would cut from the prompt's start.
- Cache: one entry per cell keyed by (the whole model's sha256: weights, config.json, generation settings
  and tokenizer files, :func:`archpool.eval.hfdir.model_sha256`; the tokenizer files' sha256, task, length,
  limit, seed, generation budget, lm-eval version), written and read back with its content hash (``archpool.io.write_cache_entry`` /
  ``read_cache_entry``, as the task cache); the entry keeps the cell's per-sample log. ``out_dir`` gets
  ``results.json`` and ``samples.jsonl`` (one line per scored document: its prompt, lm-eval's document,
  the model's answer and its score). A cell records its seconds (``wall_s``, without loading the model) and
  its generation budget (``max_gen_toks``); with ``progress`` each finished batch of documents is reported on
  standard error as it finishes.
- A cell lm-eval cannot build at a length (:func:`cannot_build`, or lm-eval's own error) is recorded as
  skipped with the reason and left out of the mean; a download that fails is a ``DataError`` naming the
  task and its source. ``ruler_cwe``'s module-level random generator, which no lm-eval seed resets, is
  reset to its state after import before each cell (:func:`reset_cwe_rng`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.config import Config
from archpool.errors import ConfigError, DataError
from archpool.eval.helmet_data import HelmetDataSettings
from archpool.eval.hfdir import (
    cached_cell,
    cell_logger,
    check_lengths,
    check_tokenizer_files,
    hf_model_dir,
    model_sha256,
    report_cell,
    tokenizer_sha256,
)

HARNESS_SUITE = "lm-eval:ruler"  # the --suite name of this backend
RULER_TASKS = (
    "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
    "niah_multiquery", "niah_multivalue", "ruler_vt", "ruler_cwe", "ruler_fwe", "ruler_qa_squad", "ruler_qa_hotpot",
)  # fmt: skip
LOCAL_TASKS = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe", "ruler_fwe")
ESSAYS = "Paul Graham's essays (Hugging Face dataset baber/paul_graham_essays)"
DOWNLOADS = {
    **{t: ESSAYS for t in RULER_TASKS if t.startswith("niah_") and t not in LOCAL_TASKS},
    "ruler_qa_squad": "SQuAD 2.0 dev set (rajpurkar.github.io)",
    "ruler_qa_hotpot": "HotpotQA dev set (a Hugging Face mirror)",
}  # what each downloading task fetches
DEFAULT_LIMIT = 50  # documents scored per task and length (lm-eval builds 500)
MAX_GEN_TOKENS = 128  # the longest generation budget of lm-eval's RULER tasks
HARNESS_FORMAT_VERSION = 2  # bump when a cell's result or its cache key changes
GENERATION = ("answer", "task")  # a cell's generation budget: its documents' answers, or lm-eval's per task
BOUNDED_TASKS = tuple(t for t in RULER_TASKS if t.startswith("niah_"))  # decoded as far as their answers reach
ANSWER_SLACK, ANSWER_ITEM_SLACK = 8, 4  # tokens beyond the answers: a cell's, and each answer's (separators)
MAX_BATCH = 64  # documents per batch
MODE = "lm-eval"  # the cache entries' mode (lm-eval's greedy generation, scored by lm-eval)
SAMPLE_KEYS = ("task", "length", "doc_id", "prompt", "prompt_tokens", "answer", "target", "score", "doc", "doc_hash",
               "prompt_hash")  # fmt: skip  # a line of samples.jsonl


class DownloadRefused(ConfigError):
    """A RULER task whose data lm-eval downloads, asked for without ``--allow-download``."""


def column_stem(task: str) -> str:
    """A task's column stem: ``ruler_`` + lm-eval's name without its own ``ruler_`` prefix."""
    return "ruler_" + task.removeprefix("ruler_")


def check_tasks(tasks: Sequence[str], allow_download: bool, field: str = "harness.tasks") -> list[str]:
    """``tasks`` (each once, in order) when each is an lm-eval RULER task that can run: a ConfigError
    naming ``field`` for an unknown one, :class:`DownloadRefused` for one that downloads its data
    without ``allow_download``."""
    out: list[str] = []
    if isinstance(tasks, str) or not tasks:
        raise ConfigError(field, f"a non-empty list of lm-eval RULER tasks, got {tasks!r}; allowed: {', '.join(RULER_TASKS)}")
    for t in tasks:
        if t not in RULER_TASKS:
            raise ConfigError(field, f"unknown lm-eval RULER task {t!r}; allowed: {', '.join(RULER_TASKS)}")
        if t in DOWNLOADS and not allow_download:
            raise DownloadRefused(
                field,
                f"{t} downloads its data when lm-eval builds its documents ({DOWNLOADS[t]}) and lm-eval reads "
                f"it from no local file; pass --allow-download to fetch it, or run the tasks that build their "
                f"documents locally: {', '.join(LOCAL_TASKS)}",
            )
        if t not in out:
            out.append(t)
    return out


def _check_limit(limit: Any, field: str) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
        raise ConfigError(field, f"documents per task and length: an integer from 1 to 500 (lm-eval builds 500), got {limit!r}")


def _check_generation(generation: Any, batch_size: Any, prefix: str) -> None:
    if generation not in GENERATION:
        raise ConfigError(
            f"{prefix}.generation",
            f"{generation!r}: 'answer' (decode as far as the documents' answers reach) or 'task' (lm-eval's budgets)",
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ConfigError(f"{prefix}.batch_size", f"documents per batch: an integer from 1 to {MAX_BATCH}, got {batch_size!r}")


def answer_budget(task: str, outputs: Sequence[Sequence[str]], tokenizer: Any, task_budget: int) -> int:
    """The generation budget of a cell of ``task`` whose documents' gold answers are ``outputs`` (one list per
    document): for the needle tasks (:data:`BOUNDED_TASKS`) the most tokens a document's answers take, written
    one after another, plus :data:`ANSWER_ITEM_SLACK` per answer and :data:`ANSWER_SLACK`, at most
    ``task_budget`` (the task's own ``max_gen_toks``); for the other tasks ``task_budget``."""
    if task not in BOUNDED_TASKS:
        return int(task_budget)
    need = 0
    for answers in outputs:
        answers = [answers] if isinstance(answers, str) else list(answers or [])
        if not answers:
            return int(task_budget)
        sizes = [len(tokenizer(" " + str(a), add_special_tokens=False).input_ids) for a in answers]
        need = max(need, sum(sizes) + ANSWER_ITEM_SLACK * len(sizes) + ANSWER_SLACK)
    return max(1, min(int(task_budget), need))


# ---------------------------------------------------------------------------------------------- pool section
@dataclass(frozen=True)
class RulerSettings(Config):
    """``eval.harness.ruler:`` — lm-eval's RULER tasks on each evaluated model (an archpool checkpoint is
    exported to Hugging Face format first, once per model, into the pool's ``hf/``)."""

    PATH = "eval.harness.ruler"
    KEY = "setting"

    tasks: list[str] = field(default_factory=lambda: list(LOCAL_TASKS))
    lengths: list[int] | None = None  # tokens; default: the eval stage's lengths of the phase
    limit: int = DEFAULT_LIMIT  # documents per task and length
    allow_download: bool = False  # the downloading tasks (also needs `archpool run --allow-download`)
    generation: str = "answer"  # the generation budget: as far as the answers reach, or lm-eval's ("task")
    batch_size: int = 1  # documents per batch

    def validate(self) -> None:
        check_tasks(self.tasks, self.allow_download, f"{self.PATH}.tasks")
        if self.lengths is not None:
            check_lengths(self.lengths, f"{self.PATH}.lengths")
        _check_limit(self.limit, f"{self.PATH}.limit")
        _check_generation(self.generation, self.batch_size, self.PATH)


@dataclass(frozen=True)
class HarnessSettings(Config):
    """``eval.harness:`` — the field's own benchmarks: ``ruler`` (lm-evaluation-harness's RULER) and
    ``helmet_data`` (HELMET's released data and metrics, :mod:`archpool.eval.helmet_data`)."""

    PATH = "eval.harness"
    KEY = "harness suite"

    ruler: RulerSettings | None = None
    helmet_data: HelmetDataSettings | None = None

    def to_dict(self) -> dict[str, Any]:
        """The section as a mapping, without the suites it does not run (a pool's stage keys do not depend
        on the fields of a suite it never named)."""
        return {k: v for k, v in super().to_dict().items() if v is not None}


# ---------------------------------------------------------------------------------------------- hashes
def lm_eval_version() -> str:
    """The installed lm-eval's version; ConfigError naming the suite when it or a package its RULER tasks
    import (``nltk``, ``wonderwords``, ``transformers``) is missing."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    missing = [m for m in ("lm_eval", "nltk", "wonderwords", "transformers") if find_spec(m) is None]
    if missing:
        raise ConfigError(HARNESS_SUITE, f"{', '.join(missing)} not installed: pip install 'archpool[harness]'")
    try:
        return version("lm_eval")
    except PackageNotFoundError:
        raise ConfigError(HARNESS_SUITE, "lm-evaluation-harness is not installed: pip install 'archpool[harness]'") from None


def cell_key(
    model_hash: str,
    tokenizer_hash: str,
    task: str,
    length: int,
    limit: int,
    seed: int | None,
    version: str,
    generation: str = "answer",
) -> str:
    from archpool.io import sha256_json

    return sha256_json(
        {
            "v": HARNESS_FORMAT_VERSION,
            "suite": HARNESS_SUITE,
            "model": model_hash,
            "tokenizer": tokenizer_hash,
            "task": task,
            "length": length,
            "limit": limit,
            "seed": seed,
            "generation": generation,
            "lm_eval": version,
        }
    )[:24]


# ---------------------------------------------------------------------------------------------- offline
OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def offline(enabled: bool = True) -> Iterator[None]:
    """Hugging Face hub and datasets offline while the block runs (environment and the flags the loaded
    libraries read at import), lm-eval's import-time punkt download skipped; restored afterwards."""
    if not enabled:
        yield
        return
    saved_env = {k: os.environ.get(k) for k in OFFLINE_ENV}
    flags = [
        ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
        ("datasets.config", "HF_DATASETS_OFFLINE"),
        ("datasets.config", "HF_HUB_OFFLINE"),
    ]
    saved_flags = {}
    os.environ.update({k: "1" for k in OFFLINE_ENV})
    for mod, name in flags:
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, name):
            saved_flags[mod, name] = getattr(m, name)
            setattr(m, name, True)
    import nltk

    real_download = nltk.download
    nltk.download = _no_download
    try:
        yield
    finally:
        nltk.download = real_download
        for mod, name in flags:  # a library first imported inside the block read the offline environment
            m = sys.modules.get(mod)
            was = saved_flags.get((mod, name), str(saved_env.get(name) or "").upper() in ("1", "ON", "YES", "TRUE"))
            if m is not None and hasattr(m, name):
                setattr(m, name, was)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _no_download(*args: Any, **kwargs: Any) -> bool:
    return False


# ---------------------------------------------------------------------------------------------- running
@dataclass
class HarnessRequest:
    """One lm-eval RULER run over an HF model directory; checked when built (ConfigError naming the field)."""

    tasks: Sequence[str] = LOCAL_TASKS
    lengths: Sequence[int] = (4096,)
    limit: int = DEFAULT_LIMIT
    seed: int | None = None  # None: lm-eval's own seeds (random 0, numpy and torch 1234)
    allow_download: bool = False
    out_dir: Path | None = None
    cache_dir: Path | None = None
    device: str | None = None  # None: cuda when available, else cpu
    batch_size: int = 1  # documents per batch
    generation: str = "answer"  # "answer": decode as far as the documents' answers reach; "task": lm-eval's budgets

    def __post_init__(self) -> None:
        self.tasks = tuple(check_tasks(self.tasks, self.allow_download))
        self.lengths = tuple(check_lengths(list(self.lengths)))
        _check_limit(self.limit, "harness.limit")
        _check_generation(self.generation, self.batch_size, "harness")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ConfigError("harness.seed", f"an integer, got {self.seed!r}")
        self.out_dir = None if self.out_dir is None else Path(self.out_dir)
        self.cache_dir = None if self.cache_dir is None else Path(self.cache_dir)


def run_ruler(
    model_dir: str | Path, request: HarnessRequest, progress: bool = False, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """lm-eval's RULER tasks of ``request`` on the HF model in ``model_dir``, every task × length; the
    result (``columns``, ``cells``) is also written to ``out_dir/results.json`` with the per-sample log
    ``out_dir/samples.jsonl``. Each cell goes to the cache as it finishes, so a stopped run resumes at the
    first unfinished cell; ``log`` (or standard error with ``progress``) gets one line per cell."""
    t0 = time.perf_counter()
    model_dir = hf_model_dir(model_dir)
    check_tokenizer_files(model_dir)
    version = lm_eval_version()
    model_hash, tok_hash = model_sha256(model_dir), tokenizer_sha256(model_dir)
    session = _Session(model_dir, request, progress)
    log = cell_logger(log, progress)
    cells: list[dict[str, Any]] = []
    total = len(request.lengths) * len(request.tasks)
    for length in request.lengths:
        for task in request.tasks:
            key = cell_key(model_hash, tok_hash, task, length, request.limit, request.seed, version, request.generation)
            path = request.cache_dir / f"harness_{key}.json" if request.cache_dir else None
            cells.append(
                cached_cell(
                    path,
                    lambda p, key=key, task=task, length=length: _cached(p, key, task, length),
                    lambda task=task, length=length, key=key: {
                        **session.cell(task, length),
                        "cache_key": key,
                        "model_hash": model_hash,
                        "tokenizer_hash": tok_hash,
                    },
                )
            )
            report_cell(log, HARNESS_SUITE, len(cells), total, f"{task}@{length}", cells[-1])
    result = {
        "suite": HARNESS_SUITE,
        "target": str(model_dir),
        "model_hash": model_hash,
        "tokenizer_hash": tok_hash,
        "lm_eval_version": version,
        "tasks": list(request.tasks),
        "lengths": list(request.lengths),
        "limit": request.limit,
        "seed": request.seed,
        "generation": request.generation,
        "batch_size": request.batch_size,
        "seeds": _seeds(request.seed),
        "offline": not request.allow_download,
        "max_length": max(request.lengths) + MAX_GEN_TOKENS,
        "columns": harness_columns(cells),
        "cells": [{k: v for k, v in c.items() if k != "samples"} for c in cells],
        "wall_s": time.perf_counter() - t0,
    }
    if request.out_dir is not None:
        write_outputs(request.out_dir, result, cells)
    return result


def write_outputs(out_dir: Path, result: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """``out_dir/results.json`` and the per-sample log ``out_dir/samples.jsonl``."""
    from archpool.io import atomic_write_json, atomic_write_text

    rows = [{k: s.get(k) for k in SAMPLE_KEYS} for c in cells for s in c.get("samples") or []]  # cached: keys sorted
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    atomic_write_text(out_dir / "samples.jsonl", "".join(line + "\n" for line in lines))
    atomic_write_json(out_dir / "results.json", result)


def harness_columns(cells: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``ruler_<task>@L`` per scored cell, ``ruler@L`` (their mean) and ``ruler_tasks@L`` (how many)."""
    out: dict[str, float] = {}
    by_length: dict[int, list[float]] = {}
    for c in cells:
        score = c.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            out[f"{column_stem(c['task'])}@{c['length']}"] = round(float(score), 6)
            by_length.setdefault(int(c["length"]), []).append(float(score))
    for length, scores in sorted(by_length.items()):
        out[f"ruler@{length}"] = round(sum(scores) / len(scores), 6)
        out[f"ruler_tasks@{length}"] = float(len(scores))
    return out


def format_table(result: dict[str, Any]) -> str:
    """Markdown: one row per task (and the average), one column per length."""
    cols, lengths = result["columns"], result["lengths"]
    head = ["| task | " + " | ".join(str(L) for L in lengths) + " |", "|---|" + "---|" * len(lengths)]
    skipped = {(c["task"], c["length"]): c["skipped"] for c in result["cells"] if "skipped" in c}

    def cell(stem: str, task: str | None, L: int) -> str:
        v = cols.get(f"{stem}@{L}")
        return "skip" if (task, L) in skipped else ("" if v is None else f"{v:.1f}")

    rows = [f"| {t} | " + " | ".join(cell(column_stem(t), t, L) for L in lengths) + " |" for t in result["tasks"]]
    n = " | ".join(f"{cell('ruler', None, L)} ({int(cols.get(f'ruler_tasks@{L}', 0))}/{len(RULER_TASKS)} tasks)" for L in lengths)
    lines = [*head, *rows, f"| **ruler** | {n} |"]
    lines += [f"- skipped {t} at {L}: {why}" for (t, L), why in skipped.items()]
    return "\n".join(lines)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _seeds(seed: int | None) -> dict[str, int]:
    return {"random": 0, "numpy": 1234, "torch": 1234} if seed is None else {"random": seed, "numpy": seed, "torch": seed}


def _cached(path: Path, key: str, task: str, length: int) -> dict[str, Any] | None:
    """The cache entry in ``path`` (its content hash checked by ``archpool.io.read_cache_entry``, as the task
    cache's) when it is this cell's, with a numeric score or none and a list of samples; None otherwise (the
    cell is then recomputed). Read within a record's bounds: a cell's samples hold its long prompts."""
    from archpool.io import read_cache_entry
    from archpool.safeload import read_record

    r = read_cache_entry(path, reader=read_record)
    if r is None:
        return None
    score = r.get("score")
    ok_score = score is None or (isinstance(score, (int, float)) and not isinstance(score, bool))
    same = (r.get("cache_key"), r.get("task"), r.get("length"), r.get("mode")) == (key, task, length, MODE)
    return r if same and ok_score and isinstance(r.get("samples", []), list) else None


# lm-eval's own errors when a task cannot build a document at a length (a tokenizer too coarse for the
# template, a word list too short): the cell is recorded as skipped with lm-eval's message
GENERATION_ERRORS = (ValueError, ZeroDivisionError, AssertionError, IndexError, RuntimeError)


def bounded_lm_class() -> type:
    """lm-eval's ``HFLM`` with a generation budget per cell and a report per batch: ``budget`` (the cell's task and
    its ``generation`` policy) sets every request's ``max_gen_toks`` by :func:`answer_budget` (``answer``) or
    leaves lm-eval's (``task``); ``on_batch(done, total)`` hears each finished batch. Generation itself is
    lm-eval's (``generate_until``, transformers' ``generate``)."""
    from lm_eval.models.huggingface import HFLM

    class BoundedHFLM(HFLM):
        budget: tuple[str, str] | None = None  # (task, generation policy) of the cell being scored
        last_budget: int | None = None  # the max_gen_toks of the last call
        on_batch: Callable[[int, int], None] | None = None

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            requests = self._bounded(list(requests))
            size = int(self.batch_size) if isinstance(self.batch_size, int) else len(requests)
            out: list[str] = []
            for i in range(0, len(requests), max(1, size)):
                out += super().generate_until(requests[i : i + size], disable_tqdm=True)
                if self.on_batch is not None:
                    self.on_batch(min(i + size, len(requests)), len(requests))
            return out

        def _bounded(self, requests: list[Any]) -> list[Any]:
            if not requests:
                return requests
            first = requests[0].args[1] if len(requests[0].args) > 1 else {}
            task_budget = int(first.get("max_gen_toks", self.max_gen_toks))
            budget = task_budget
            if self.budget is not None and self.budget[1] == "answer":
                outputs = [r.doc.get("outputs") if isinstance(r.doc, dict) else None for r in requests]
                budget = (
                    task_budget
                    if any(o is None for o in outputs)
                    else answer_budget(self.budget[0], outputs, self.tokenizer, task_budget)
                )
            self.last_budget = budget
            for r in requests:
                context, kwargs = r.args[0], dict(r.args[1])
                r.arguments = (context, {**kwargs, "max_gen_toks": budget})
            return requests

    return BoundedHFLM


@dataclass
class _Session:
    """The HFLM over ``model_dir`` (loaded on the first cell that is not cached) and the lm-eval calls."""

    model_dir: Path
    request: HarnessRequest
    progress: bool
    lm: Any = None

    def model(self) -> Any:
        if self.lm is None:
            import torch

            device = self.request.device or ("cuda" if torch.cuda.is_available() else "cpu")
            with offline(not self.request.allow_download), self.quiet():
                self.lm = bounded_lm_class()(
                    pretrained=str(self.model_dir),
                    tokenizer=str(self.model_dir),
                    device=device,
                    batch_size=self.request.batch_size,
                    max_length=max(self.request.lengths) + MAX_GEN_TOKENS,
                    dtype="float32" if device == "cpu" else "auto",
                )
                import lm_eval.evaluator  # noqa: F401 — imported with the model, so no cell's seconds count them
                from lm_eval.tasks.ruler import common_utils, cwe_utils, fwe_utils, niah_utils, vt_utils  # noqa: F401
        return self.lm

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """lm-eval's generators print to stdout: sent to stderr (stdout keeps archpool's report)."""
        with contextlib.redirect_stdout(sys.stderr):
            yield

    def cell(self, task: str, length: int) -> dict[str, Any]:
        """One task at one length: lm-eval's score × 100 and its samples, or ``skipped`` with lm-eval's reason."""
        base = {
            "suite": HARNESS_SUITE,
            "task": task,
            "length": length,
            "mode": MODE,
            "limit": self.request.limit,
            "seed": self.request.seed,
            "generation": self.request.generation,
        }
        lm = self.model()  # loaded once, before the cell's clock starts
        t0 = time.perf_counter()
        lm.budget, lm.last_budget = (task, self.request.generation), None
        lm.on_batch = None
        if self.progress:  # each finished batch on standard error (a pool node's log gets one line per cell)
            lm.on_batch = lambda done, n: print(
                f"{HARNESS_SUITE}: {task}@{length}: document {done}/{n} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        with offline(not self.request.allow_download), self.quiet():
            unfit = cannot_build(task, length, lm.tokenizer)
            if unfit:
                return {**base, "score": None, "n": 0, "skipped": unfit, "wall_s": time.perf_counter() - t0}
            try:
                res = run_lm_eval(lm, task, length, self.request.limit, self.request.seed, self.model_dir)
            except OSError as e:  # a download that failed (ConnectionError, requests' and the hub's errors)
                if task not in DOWNLOADS:
                    raise
                raise DataError(f"{task}: lm-eval could not download its data ({DOWNLOADS[task]}): {_first_line(e)}") from None
            except GENERATION_ERRORS as e:
                return {
                    **base,
                    "score": None,
                    "n": 0,
                    "skipped": f"lm-eval could not build or score it: {_first_line(e)}",
                    "wall_s": time.perf_counter() - t0,
                }
        metric = res["results"][task].get(f"{length},none")
        samples = [_sample(task, length, s, lm.tokenizer) for s in res["samples"][task]]
        score = None if not isinstance(metric, (int, float)) or metric < 0 else 100.0 * float(metric)
        out = {
            **base,
            "score": score,
            "n": len(samples),
            "metric": "string_match (lm-eval ruler) x 100",
            "max_gen_toks": lm.last_budget,
            "prompt_tokens_max": max((s["prompt_tokens"] for s in samples), default=0),
            "wall_s": time.perf_counter() - t0,
            "samples": samples,
        }
        if score is None:
            out["skipped"] = "lm-eval scored no document at this length"
        return out


def cannot_build(task: str, length: int, tokenizer: Any) -> str | None:
    """Why lm-eval's generator of ``task`` cannot build a document at ``length`` with ``tokenizer`` (or would
    never finish), or None. Each check replays the generator's own sizing search with its own functions;
    the random state they use is set again before the documents are built (``simple_evaluate``'s seeds,
    :func:`reset_cwe_rng`).

    - ``ruler_vt`` sizes its noise in steps (5 for its 500-token in-context example, 10 for the prompt) and
      retries a sample forever once it is down to one step that does not fit: refused when either search
      ends below two steps.
    - ``ruler_cwe`` starts from 10 words (with a worked example) and has no document when those do not fit
      beside its 120 generated tokens (lm-eval then divides by zero when scoring)."""
    if task == "ruler_cwe":
        from lm_eval.tasks.ruler import cwe_utils

        example, text, answer = cwe_utils.generate_input_output(10, length)
        listed = " ".join(f"{i + 1}. {w}" for i, w in enumerate(answer))
        need = len(tokenizer(example + "\n" + text + " " + listed).input_ids) + 120
        if need > length:
            return f"lm-eval's common-words generator needs {need} tokens for its smallest list (10 words) with its example"
        return None
    if task != "ruler_vt":
        return None
    from lm_eval.tasks.ruler import vt_utils

    def noises(max_len: int, step: int, extra: int, icl: bool) -> tuple[int, str]:
        n, total, text = step, 0, ""
        while total + 30 + extra < max_len:
            text, answer = vt_utils.generate_input_output(n, 1, 4, is_icl=icl)
            total = len(tokenizer(text + f" {answer}").input_ids)
            if total + 30 + extra > max_len:
                return n - step, text
            n += step
        return n, text

    n_icl, icl_text = noises(500, 5, 0, True)
    if n_icl < 10:
        return "lm-eval's variable-tracking generator cannot fit its 500-token in-context example with this tokenizer"
    n, _ = noises(length, 10, len(tokenizer(icl_text).input_ids), False)
    if n < 20:
        return f"lm-eval's variable-tracking generator cannot fit a prompt beside its in-context example in {length} tokens"
    return None


# lm-eval's RULER generators of the local tasks, by module: each builds 500 documents per length
GENERATORS = (
    ("niah_utils", "generate_samples"),
    ("vt_utils", "sys_vartrack_w_noise_random"),
    ("cwe_utils", "sys_word_pair_random"),
    ("fwe_utils", "sys_kwext"),
)


@contextlib.contextmanager
def documents_up_to(limit: int) -> Iterator[None]:
    """lm-eval's RULER generators (:data:`GENERATORS`) build at most ``limit`` documents per length while the
    block runs, instead of 500 of which lm-eval scores the first ``limit``: every document draws from the
    random generators after the documents before it, so the first ``limit`` are the same documents
    (``tests/eval/test_harness_speed.py`` builds them both ways)."""
    patched = []
    for module_name, name in GENERATORS:
        for module in _ruler_modules(module_name):
            real = getattr(module, name)

            def capped(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
                kwargs["num_samples"] = min(int(kwargs.get("num_samples", 500)), limit)
                return _real(*args, **kwargs)

            setattr(module, name, capped)
            patched.append((module, name, real))
    try:
        yield
    finally:
        for module, name, real in patched:
            setattr(module, name, real)


def _ruler_modules(module_name: str) -> list[Any]:
    """Every loaded copy of ``lm_eval.tasks.ruler.<module_name>``: the one Python's import gives, and the one
    lm-eval's YAML loader gives its task configs (it executes a task module's file again, once, into
    ``sys.modules`` without updating the package's attribute); loaded here first, so the copy the tasks call
    is the one patched."""
    import importlib
    import sys

    full = f"lm_eval.tasks.ruler.{module_name}"
    imported = importlib.import_module(full)
    copies = [imported, getattr(importlib.import_module("lm_eval.tasks.ruler"), module_name, imported)]
    try:
        from lm_eval.tasks._yaml_loader import _load_module_with_cache
    except ImportError:  # another lm-eval layout: its loader imports the module as Python does
        pass
    else:
        copies.append(_load_module_with_cache(Path(str(imported.__file__))))
    copies.append(sys.modules.get(full, imported))
    return list({id(m): m for m in copies}.values())


@contextlib.contextmanager
def no_environment_report() -> Iterator[None]:
    """``simple_evaluate`` without its environment report while the block runs: lm-eval runs ``git describe``
    and torch's ``collect_env`` (``pip list`` and more, in subprocesses: about a second a cell) for fields of
    its results that archpool does not read."""
    from lm_eval import evaluator

    saved = evaluator.add_env_info, evaluator.get_git_commit_hash
    evaluator.add_env_info = lambda storage: None
    evaluator.get_git_commit_hash = lambda: None
    try:
        yield
    finally:
        evaluator.add_env_info, evaluator.get_git_commit_hash = saved


def run_lm_eval(lm: Any, task: str, length: int, limit: int, seed: int | None, model_dir: Path) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` of one RULER task at one length (its own seeds set afresh), its documents
    built up to ``limit`` (:func:`documents_up_to`), without lm-eval's environment report
    (:func:`no_environment_report`)."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks.ruler import common_utils

    common_utils.get_tokenizer.cache_clear()  # keyed by path: a directory rewritten in place is read again
    if task == "ruler_cwe":
        reset_cwe_rng()
    ruler_dir = Path(common_utils.__file__).parent
    metadata = {"max_seq_lengths": [length], "tokenizer": str(model_dir)}
    manager = TaskManager(include_defaults=False, include_path=str(ruler_dir), metadata=metadata)
    seeds = _seeds(seed)
    with documents_up_to(limit), no_environment_report():
        return _simple_evaluate(lm_eval, lm, task, limit, manager, seeds)


def _simple_evaluate(lm_eval: Any, lm: Any, task: str, limit: int, manager: Any, seeds: dict[str, int]) -> dict[str, Any]:
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=[task],
        limit=limit,
        log_samples=True,
        task_manager=manager,
        bootstrap_iters=0,
        random_seed=seeds["random"],
        numpy_random_seed=seeds["numpy"],
        torch_random_seed=seeds["torch"],
        verbosity="ERROR",
    )


def reset_cwe_rng() -> None:
    """``cwe_utils.RNG`` (a module-level ``Random(42)`` that no lm-eval seed resets) as a fresh process has it
    after import (one shuffle of its word list), so a cell's word lists do not depend on the cells before it."""
    import random

    from lm_eval.tasks.ruler import cwe_utils

    fresh = random.Random(42)
    fresh.shuffle(list(range(len(cwe_utils.WORDS))))
    cwe_utils.RNG.setstate(fresh.getstate())


def _sample(task: str, length: int, s: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """One lm-eval sample log entry as a JSON line: the prompt lm-eval sent, its document, the answer, the score."""
    args = s.get("arguments") or [[""]]
    prompt = args[0][0] if isinstance(args[0], (list, tuple)) else str(args[0])
    resps = s.get("filtered_resps") or s.get("resps") or []
    answer = resps[0] if resps and isinstance(resps[0], str) else (resps[0][0] if resps and resps[0] else "")
    score = s.get(str(length))
    row = {  # the keys of SAMPLE_KEYS
        "task": task,
        "length": length,
        "doc_id": s.get("doc_id"),
        "prompt": prompt,
        "prompt_tokens": len(tokenizer(prompt).input_ids),
        "answer": answer,
        "target": s.get("target"),
        "score": None if score is None else float(score),
        "doc": {k: v for k, v in sorted((s.get("doc") or {}).items()) if k != "input"},  # its input: the prompt's start
        "doc_hash": s.get("doc_hash"),
        "prompt_hash": s.get("prompt_hash"),
    }
    return json.loads(json.dumps(row, default=str))


def harness_request_from(
    settings: RulerSettings, lengths: Sequence[int], out_dir: Path | None, cache_dir: Path | None, allow_download: bool
) -> HarnessRequest:
    """A pool's ``eval.harness.ruler`` at a phase's ``lengths`` (when it names none) as a request."""
    return HarnessRequest(
        tasks=settings.tasks,
        lengths=settings.lengths or list(lengths),
        limit=settings.limit,
        allow_download=settings.allow_download and allow_download,
        out_dir=out_dir,
        cache_dir=cache_dir,
        batch_size=settings.batch_size,
        generation=settings.generation,
    )


__all__ = [
    "BOUNDED_TASKS", "DOWNLOADS", "GENERATION", "HARNESS_SUITE", "LOCAL_TASKS", "RULER_TASKS", "DownloadRefused", "HarnessRequest",
    "HarnessSettings", "RulerSettings", "answer_budget", "check_tasks", "harness_columns", "offline", "run_ruler",
]  # fmt: skip
