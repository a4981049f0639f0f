"""HELMET's own data and metrics (princeton-nlp/HELMET) over a Hugging Face model directory, from a local copy
of HELMET's released data (``data.tar.gz`` as its ``scripts/download_data.sh`` unpacks it: a ``data/``
directory). archpool's ``helmet`` suite (``archpool.tasks.helmet``) is HELMET-*style*: archpool's own
templates for tiny models; this module reads HELMET's files and applies HELMET's prompts, truncation and
metrics (``data.py``, ``model_utils.tokenize``, ``utils.py`` of its repository), reimplemented here.

- Categories (:data:`CATEGORIES`) and their datasets, as HELMET's ``configs/{recall,rag,rerank}*.yaml``:
  ``recall`` (RULER ``niah_multikey_2``, ``niah_multikey_3``, ``niah_multivalue``; ``json_kv``), ``rag`` (KILT
  NQ, TriviaQA, HotpotQA, PopQA with HELMET's popularity threshold 3), ``rerank`` (MS MARCO passages).
- Files (:func:`test_file`): RULER ``ruler/<task>/validation_<L>.jsonl``; the others by HELMET's table of
  passages / key-value pairs per length (:data:`K_BY_LENGTH`, 4k to 128k), e.g. ``json_kv/test_k105_dep6.jsonl``
  at 8192. A length without a file of its own uses the file of the next HELMET length above it (4096's below
  4096), and HELMET's truncation cuts its context to fit: the cell records the file it read and the share
  of samples whose gold answer is still in the prompt (``gold_kept``).
- Prompts: HELMET's templates, its demos (``shots``, default 2; RULER none), and its truncation: a prompt
  longer than ``L - generation budget`` tokens loses the end of its context (the documents, the JSON, the
  haystack), never the instruction or the demos. A cell whose prompt does not fit even with an empty
  context is recorded as skipped with the reason.
- Generation: greedy, ``transformers`` ``generate`` with HELMET's budget per dataset (:data:`DATASETS`),
  stopping at a newline where HELMET does (RAG, re-rank).
- Metrics (× 100, as HELMET's ``averaged_metrics``): RULER recall (the share of gold strings found in the
  output, case-insensitive); substring exact match on normalised text (JSON KV, KILT; the better of the
  raw and the parsed output); NDCG@10 of the parsed ranking (trec_eval's ``ndcg_cut``, linear gains).
- Samples: HELMET's ``max_test_samples`` rule (``limit``, default 100) with its ``seed`` (default 42):
  RULER and JSON KV a seeded permutation (as ``datasets.Dataset.shuffle``), KILT and MS MARCO a seeded
  sample of distinct questions with every row of each kept.
- Columns (:func:`helmet_data_columns`): ``helmet_data_<dataset>@L``, ``helmet_data_<category>@L`` (the
  mean of its datasets, when all scored), ``helmet_data@L`` (the mean over the categories scored) and
  ``helmet_data_categories@L`` (how many of HELMET's 7 categories that mean covers).
- Cache: one entry per dataset × length keyed by (the whole model's sha256: weights, config.json, generation
  settings and tokenizer files, :func:`archpool.eval.hfdir.model_sha256`; the tokenizer files' sha256,
  dataset, length, limit, seed, shots, the data files' sha256, transformers' version), with its per-sample log.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archpool.config import Config
from archpool.errors import ConfigError, DataError
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

SUITE = "helmet-data"  # the --suite name
HELMET_CATEGORIES_TOTAL = 7  # HELMET's categories: Recall, RAG, Re-rank, Cite, LongQA, Summ, ICL
HELMET_LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)  # the lengths HELMET's files are built for
K_BY_LENGTH = {  # passages / key-value pairs per HELMET length (scripts/generate_configs.py)
    "json_kv": (50, 105, 220, 440, 900, 1800),
    "kilt": (20, 50, 105, 220, 440, 1000),
    "msmarco": (14, 50, 130, 285, 600, 1000),
}
DEFAULT_LIMIT = 100  # HELMET's max_test_samples for these categories
DEFAULT_SEED = 42
DEFAULT_SHOTS = 2
FORMAT_VERSION = 1  # bump when a cell's result or its cache key changes
LINE_MAX_BYTES = 64 << 20  # one JSONL record (a 128k-token KILT row is a few MB)
LINE_MAX_NODES = 1_000_000  # values in one record (1,000 passages hold ~6,000)
SAMPLE_KEYS = ("dataset", "length", "index", "id", "prompt_tokens", "truncated_tokens", "prompt_head", "prompt_tail",
               "output", "parsed_output", "answer", "gold_in_prompt", "score")  # fmt: skip


@dataclass(frozen=True)
class Dataset:
    """One HELMET dataset: its category, file pattern, generation budget and prompt kind."""

    name: str
    category: str
    kind: str  # ruler | json_kv | kilt | msmarco
    stem: str  # the test file under the data directory: {L} the length, {k} the table's count
    demo: str | None  # the demo file (KILT, MS MARCO)
    gen: int  # HELMET's generation_max_length
    stop_newline: bool


DATASETS = (
    Dataset("ruler_niah_mk_2", "recall", "ruler", "ruler/niah_multikey_2/validation_{L}.jsonl", None, 50, False),
    Dataset("ruler_niah_mk_3", "recall", "ruler", "ruler/niah_multikey_3/validation_{L}.jsonl", None, 100, False),
    Dataset("ruler_niah_mv", "recall", "ruler", "ruler/niah_multivalue/validation_{L}.jsonl", None, 50, False),
    Dataset("json_kv", "recall", "json_kv", "json_kv/test_k{k}_dep6.jsonl", None, 100, False),
    Dataset("kilt_nq", "rag", "kilt", "kilt/nq-dev-multikilt_1000_k{k}_dep6.jsonl",
            "kilt/nq-train-multikilt_1000_k3_dep6.jsonl", 20, True),
    Dataset("kilt_triviaqa", "rag", "kilt", "kilt/triviaqa-dev-multikilt_1000_k{k}_dep6.jsonl",
            "kilt/triviaqa-train-multikilt_1000_k3_dep6.jsonl", 20, True),
    Dataset("kilt_hotpotqa", "rag", "kilt", "kilt/hotpotqa-dev-multikilt_1000_k{k}_dep3.jsonl",
            "kilt/hotpotqa-train-multikilt_1000_k3_dep3.jsonl", 20, True),
    Dataset("kilt_popqa_3", "rag", "kilt", "kilt/popqa_test_1000_k{k}_dep6.jsonl",
            "kilt/popqa_test_1000_k3_dep6.jsonl", 20, True),
    Dataset("msmarco_rerank_psg", "rerank", "msmarco", "msmarco/test_reranking_data_k{k}_dep3.jsonl",
            "msmarco/test_reranking_data_k10_dep3.jsonl", 200, True),
)  # fmt: skip
CATEGORIES = ("recall", "rag", "rerank")
POPQA_THRESHOLD = 3.0  # log10 popularity below which a PopQA question is kept (HELMET's kilt_popqa_3)


def datasets_of(category: str) -> list[Dataset]:
    return [d for d in DATASETS if d.category == category]


# ---------------------------------------------------------------------------------------------- settings
def check_categories(categories: Any, field: str) -> list[str]:
    if isinstance(categories, str) or not isinstance(categories, (list, tuple)) or not categories:
        raise ConfigError(field, f"a non-empty list of HELMET categories, got {categories!r}; allowed: {', '.join(CATEGORIES)}")
    out: list[str] = []
    for c in categories:
        if c not in CATEGORIES:
            raise ConfigError(field, f"unknown HELMET category {c!r}; allowed: {', '.join(CATEGORIES)}")
        if c not in out:
            out.append(c)
    return out


def _check_int(value: Any, field: str, lo: int, hi: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(field, f"{what}: an integer from {lo} to {hi:,}, got {value!r}")


@dataclass(frozen=True)
class HelmetDataSettings(Config):
    """``eval.harness.helmet_data:`` — HELMET's own data and metrics (a local copy of its released ``data/``
    directory) on each evaluated model, exported to Hugging Face format first."""

    PATH = "eval.harness.helmet_data"
    KEY = "setting"

    path: str = ""  # HELMET's data directory (absolute, or relative to the pool file)
    categories: list[str] = field(default_factory=lambda: list(CATEGORIES))
    lengths: list[int] | None = None  # tokens; default: the eval stage's lengths of the phase
    limit: int = DEFAULT_LIMIT  # HELMET's max_test_samples
    shots: int = DEFAULT_SHOTS  # HELMET's demos (JSON KV, KILT, MS MARCO; RULER has none)
    seed: int = DEFAULT_SEED

    def validate(self) -> None:
        check_settings(self.path, self.categories, self.lengths, self.limit, self.shots, self.seed, self.PATH)


def check_settings(path: Any, categories: Any, lengths: Any, limit: Any, shots: Any, seed: Any, prefix: str) -> None:
    """ConfigError naming ``prefix.<field>`` for the first field out of its rule."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{prefix}.path", f"HELMET's data directory (the data/ of its data.tar.gz), got {path!r}")
    check_categories(categories, f"{prefix}.categories")
    if lengths is not None:
        check_lengths(lengths, f"{prefix}.lengths")
    _check_int(limit, f"{prefix}.limit", 1, 100_000, "samples per dataset and length")
    _check_int(shots, f"{prefix}.shots", 0, 10, "demos per prompt")
    _check_int(seed, f"{prefix}.seed", 0, 2**31 - 1, "the sampling seed")


@dataclass
class HelmetDataRequest:
    """One run over an HF model directory; checked when built (ConfigError naming ``helmet_data.<field>``)."""

    data_dir: Path
    categories: Sequence[str] = CATEGORIES
    lengths: Sequence[int] = (4096,)
    limit: int = DEFAULT_LIMIT
    shots: int = DEFAULT_SHOTS
    seed: int = DEFAULT_SEED
    out_dir: Path | None = None
    cache_dir: Path | None = None
    device: str | None = None  # None: cuda when available, else cpu

    def __post_init__(self) -> None:
        check_settings(str(self.data_dir), list(self.categories), list(self.lengths), self.limit, self.shots, self.seed,
                       "helmet_data")  # fmt: skip
        self.data_dir = Path(self.data_dir).expanduser()
        self.categories = tuple(check_categories(list(self.categories), "helmet_data.categories"))
        self.lengths = tuple(check_lengths(list(self.lengths), "helmet_data.lengths"))
        self.out_dir = None if self.out_dir is None else Path(self.out_dir)
        self.cache_dir = None if self.cache_dir is None else Path(self.cache_dir)


def request_from(settings: HelmetDataSettings, lengths: Sequence[int], base_dir: Path, out_dir: Path | None,
                 cache_dir: Path | None) -> HelmetDataRequest:  # fmt: skip
    """A pool's ``eval.harness.helmet_data`` at a phase's ``lengths`` (when it names none); a relative
    ``path`` is read from the pool file's directory."""
    p = Path(settings.path).expanduser()
    return HelmetDataRequest(
        data_dir=p if p.is_absolute() else Path(base_dir) / p,
        categories=settings.categories,
        lengths=settings.lengths or list(lengths),
        limit=settings.limit,
        shots=settings.shots,
        seed=settings.seed,
        out_dir=out_dir,
        cache_dir=cache_dir,
    )


# ---------------------------------------------------------------------------------------------- files
def nominal_length(length: int) -> int:
    """The HELMET length whose files serve ``length``: the smallest one at or above it (128k above 128k)."""
    return next((h for h in HELMET_LENGTHS if h >= length), HELMET_LENGTHS[-1])


def test_file(data_dir: Path, ds: Dataset, length: int) -> Path:
    """The test file of ``ds`` at ``length``; DataError naming the expected path(s) when absent."""
    nominal = nominal_length(length)
    k = K_BY_LENGTH[ds.kind][HELMET_LENGTHS.index(nominal)] if ds.kind in K_BY_LENGTH else 0
    candidates = [data_dir / ds.stem.format(L=length, k=k)]
    if ds.kind == "ruler" and nominal != length:
        candidates.append(data_dir / ds.stem.format(L=nominal, k=k))
    for c in candidates:
        if c.is_file():
            return c
    raise DataError(
        f"HELMET {ds.category} ({ds.name}) at {length} tokens: no file {' or '.join(str(c) for c in candidates)} "
        f"(the layout of HELMET's data.tar.gz; leave out category {ds.category!r} if you do not have it)"
    )


def demo_file(data_dir: Path, ds: Dataset) -> Path:
    p = data_dir / str(ds.demo)
    if not p.is_file():
        raise DataError(f"HELMET {ds.category} ({ds.name}): no demo file {p} (or set shots to 0)")
    return p


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, each line within :data:`LINE_MAX_BYTES` and
    :data:`LINE_MAX_NODES`; DataError naming the file and line otherwise."""
    from archpool.safeload import load_json

    out: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            for i, line in enumerate(_lines(f, path), start=1):
                if not line.strip():
                    continue
                try:
                    rec = load_json(line, f"{path}:{i}", max_nodes=LINE_MAX_NODES)
                except ConfigError as e:
                    raise DataError(f"{e.field}: {e.message}") from None
                if not isinstance(rec, dict):
                    raise DataError(f"{path}:{i}: a JSON object per line, got {type(rec).__name__}")
                out.append(rec)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if not out:
        raise DataError(f"{path}: no records")
    return out


def _lines(f: Any, path: Path) -> Iterator[bytes]:
    n = 0
    while True:
        line = f.readline(LINE_MAX_BYTES + 1)
        if not line:
            return
        n += 1
        if len(line) > LINE_MAX_BYTES and not line.endswith(b"\n"):
            raise DataError(f"{path}:{n}: a record longer than {LINE_MAX_BYTES >> 20} MiB")
        yield line


def _need(rec: dict[str, Any], key: str, path: Path, i: int, kind: type | tuple[type, ...]) -> Any:
    v = rec.get(key)
    if not isinstance(v, kind) or isinstance(v, bool):
        raise DataError(f"{path}: record {i} has no {key!r} of HELMET's layout (got {type(v).__name__})")
    return v


# ---------------------------------------------------------------------------------------------- metrics
def normalize_answer(s: str) -> str:
    """SQuAD / DrQA normalisation: lowercase, punctuation and articles removed, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _golds(answers: Any) -> list[str]:
    if isinstance(answers, str):
        return [answers]
    flat: list[str] = []
    for a in answers:
        flat.extend([str(x) for x in a] if isinstance(a, list) else [str(a)])
    return flat


def substring_exact_match(prediction: str, answers: Any) -> float:
    """1.0 when a normalised gold answer is a substring of the normalised prediction (the best gold); a gold
    that normalises to nothing is a substring of every prediction, so it earns no credit."""
    pred = normalize_answer(prediction)
    return float(any(g and g in pred for g in (normalize_answer(a) for a in _golds(answers))))


def ruler_recall(prediction: str, answers: Any) -> float:
    """The share of gold strings found in the prediction, case-insensitive (HELMET's ``ruler_recall``); blank
    golds (found in every prediction) are not counted, and no gold at all scores 0."""
    golds = [a for a in _golds(answers) if a.strip()]
    return sum(a.lower() in prediction.lower() for a in golds) / len(golds) if golds else 0.0


def check_gold(ds: Dataset, answer: Any, path: Path, i: int) -> Any:
    """``answer`` when every gold string in it can be told from an empty one by ``ds``'s metric (a
    non-blank string for RULER's recall, one with a word left after normalisation for the exact match);
    DataError naming the file and record otherwise: an empty gold is found in any output and would score
    a model that answered nothing."""
    golds = _golds(answer) if isinstance(answer, (str, list)) else []
    empty = [g for g in golds if not (g.strip() if ds.kind == "ruler" else normalize_answer(g))]
    if not golds or empty:
        what = "no gold answer" if not golds else f"an empty gold answer {empty[0]!r}"
        raise DataError(f"{path}: record {i} has {what}; it would give credit to any output")
    return answer


def parse_output(output: str, prefix: str = "Answer:") -> str:
    """The text after ``prefix`` up to the line's end, else the first line (HELMET's ``parse_output``)."""
    for pat in (re.compile(f"(?:{re.escape(prefix)})(.*)(?:\n|$)", re.IGNORECASE), re.compile(r"(?:^)(.*)(?:\n|$)")):
        m = pat.search(output)
        if m is not None:
            return re.sub(f"^{re.escape(prefix)}", "", m[1].strip(), flags=re.IGNORECASE).strip()
    return output  # unreachable: the second pattern always matches


def parse_rankings(output: str) -> dict[str, int]:
    """HELMET's ranking parse: the longest ``3 > 1 > 2`` chain of integers (brackets, colons and ``id``
    removed) as {document id: score}, the first place scoring highest; repeats keep their first place."""
    text = re.sub(r"[\[\]:]", "", output).lower().replace("id", "")
    longest = ""
    for m in re.finditer(r"(\d+)(?:\s*>\s*(\d+))*", text):
        if len(m.group(0)) > len(longest):
            longest = m.group(0)
    ranks = [n.strip() for n in longest.split(">") if n.strip().isdigit()] if longest else [text]
    out: dict[str, int] = {}
    for i, r in enumerate(ranks):
        out.setdefault(r, len(ranks) - i)
    return out


def ndcg_at_k(scores: dict[str, float], qrels: dict[str, int], k: int = 10) -> float:
    """trec_eval's ``ndcg_cut.k`` (as HELMET computes it through pytrec_eval): documents ranked by score
    (ties by id, descending), gain = the relevance label, discount log2(rank + 1), divided by the DCG of
    the judged labels in order; 0 when no document is relevant."""
    ranked = sorted(scores, key=lambda d: (-scores[d], _neg_id(d)))[:k]
    dcg = sum(max(qrels.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted((max(r, 0) for r in qrels.values()), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def _neg_id(d: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in d)


# ---------------------------------------------------------------------------------------------- prompts
NIAH_ONE = (
    "A special magic {type_needle_v} is hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {type_needle_v} afterwards.\n{context}\nWhat is the special magic {type_needle_v} for {query} mentioned "
    "in the provided text?\nThe special magic {type_needle_v} for {query} mentioned in the provided text is"
)
NIAH_ALL = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz "
    "you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?\nThe special magic {type_needle_v} for {query} mentioned in the provided text are"
)
JSON_KV = "{context}\n\nExtract the value corresponding to the specified key in the JSON object below.\n\n{demos}Key: {question}\nCorresponding value:"
QA = (
    "Use the given documents to write a concise and short answer to the question. Write your answer in the following "
    "format:\nAnswer: [answer]\n\n{demos}{context}\n\nQuestion: {question}\nAnswer:"
)
RERANK = (
    "You are provided with a list of documents, each indicated by their ID. Rank each document based on their "
    "relevance to the question in descending order from most relelvant to least relevant texts. Include all documents "
    "in the rankings. Write your answer using the unique IDs, with the following format:\nRanking: ID3 > ID1 > ID2"
    "\n\n{demos}{context}\n\nQuery: {question}\nRanking:"
)  # HELMET's wording, its typo included


def permutation(n: int, seed: int) -> list[int]:
    """``datasets.Dataset.shuffle(seed=seed)``'s order of ``n`` rows."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


def _row_seed(key: Any) -> int:
    return int(hashlib.sha256(str(key).encode("utf-8")).hexdigest(), 16) % 2**31


def _pick_keys(rows: list[dict[str, Any]], key: str, limit: int, seed: int) -> list[dict[str, Any]]:
    """The rows of ``limit`` distinct ``key`` values sampled with ``random.Random(seed)`` (file order kept)."""
    keys = sorted({str(r.get(key)) for r in rows})
    chosen = set(random.Random(seed).sample(keys, min(limit, len(keys))))
    return [r for r in rows if str(r.get(key)) in chosen]


def _demos(pool: list[dict[str, Any]], key: str, seed_key: Any, shots: int) -> list[dict[str, Any]]:
    """HELMET's demos: the pool shuffled with the row's sha256 seed, repeats of ``key`` dropped, the first ``shots``."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for i in permutation(len(pool), _row_seed(seed_key)):
        k = str(pool[i].get(key))
        if k not in seen:
            seen.add(k)
            out.append(pool[i])
        if len(out) == shots:
            break
    return out


def build_items(ds: Dataset, path: Path, demo_path: Path | None, limit: int, shots: int, seed: int) -> list[dict[str, Any]]:
    """HELMET's test items of ``ds`` from its files: each {template, fields (``context`` truncatable),
    answer, id}."""
    rows = read_jsonl(path)
    items: list[dict[str, Any]] = []
    if ds.kind == "ruler":
        for i in permutation(len(rows), seed)[:limit]:
            r = rows[i]
            answer = r.get("answer", r.get("outputs"))
            if not isinstance(answer, (str, list)) or not answer:
                raise DataError(f"{path}: record {i} has no 'answer' or 'outputs' of HELMET's layout")
            check_gold(ds, answer, path, i)
            fields = {k: str(_need(r, k, path, i, (str, int))) for k in ("context", "query", "type_needle_v")}
            tpl = NIAH_ALL if ds.name == "ruler_niah_mv" else NIAH_ONE
            items.append({"template": tpl, "fields": fields, "answer": answer, "id": r.get("index", i)})
    elif ds.kind == "json_kv":
        for i in permutation(len(rows), seed)[:limit]:
            r = rows[i]
            pairs = r.get("demos") or []
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise DataError(f"{path}: record {i}: 'demos' is a list of [key, value] pairs in HELMET's layout")
            demos = "\n\n".join(f"Key: {k}\nCorresponding value: {v}" for k, v in pairs[:shots]) + ("\n\n" if shots else "")
            fields = {"context": _need(r, "context", path, i, str), "question": str(_need(r, "question", path, i, (str, int))),
                      "demos": demos}  # fmt: skip
            answer = check_gold(ds, _need(r, "answer", path, i, (str, list)), path, i)
            items.append({"template": JSON_KV, "fields": fields, "answer": answer, "id": i})
    elif ds.kind == "kilt":
        demo_rows = read_jsonl(demo_path) if shots and demo_path is not None else []
        if ds.name.startswith("kilt_popqa"):
            rows, demo_rows = _popular(rows, path), _popular(demo_rows, demo_path)
        key = "id" if all("id" in r for r in rows) else "question"
        for i, r in enumerate(_pick_keys(rows, key, limit, seed)):
            pool = [d for d in demo_rows if not (ds.name.startswith("kilt_popqa") and d.get(key) == r.get(key))]
            demos = [_kilt_demo(d, demo_path, j) for j, d in enumerate(_demos(pool, key, r.get(key), shots))]
            ctxs = _need(r, "ctxs", path, i, list)
            fields = {"context": "\n\n".join(_passage(c, path, i) for c in ctxs),
                      "question": str(_need(r, "question", path, i, str)),
                      "demos": "\n\n".join(demos) + "\n\n" if demos else ""}  # fmt: skip
            answer = check_gold(ds, _need(r, "answers", path, i, list), path, i)
            items.append({"template": QA, "fields": fields, "answer": answer, "id": r.get(key)})
    else:  # msmarco
        demo_rows = read_jsonl(demo_path) if shots and demo_path is not None else []
        key = "qid" if all("qid" in r for r in rows) else "query"
        picked = _pick_keys(rows, key, limit, seed)
        qids = {r.get("qid") for r in picked}
        if len(demo_rows) > 2 * len(picked):  # HELMET drops the test questions from a large enough demo pool once
            demo_rows = [d for d in demo_rows if d.get("qid") not in qids]
        for i, r in enumerate(picked):
            ctxs = _need(r, "ctxs", path, i, list)
            tpl = "[ID: {id}] Document (Title: {title}): {text}" if ctxs and "title" in ctxs[0] else "[ID: {id}] Document: {text}"
            pool = [d for d in demo_rows if d.get("qid") != r.get("qid")]
            demo = "".join(
                "\n\n".join(_fmt(tpl, c, demo_path, j) for c in _need(d, "ctxs", demo_path, j, list))
                + f"\n\nQuery: {d.get('query')}\nRanking: {_gold_ranking(d['ctxs'])}\n\n"
                for j, d in enumerate(_demos(pool, "qid", r.get("qid"), shots))
            )
            qrels = {str(_need(c, "id", path, i, (str, int))): int(_need(c, "label", path, i, (int, float))) for c in ctxs}
            fields = {"context": "\n\n".join(_fmt(tpl, c, path, i) for c in ctxs),
                      "question": str(_need(r, "query", path, i, str)), "demos": demo}  # fmt: skip
            items.append({"template": RERANK, "fields": fields, "answer": _gold_ranking(ctxs), "qrels": qrels, "id": r.get(key)})
    return items


def _popular(rows: list[dict[str, Any]], path: Path | None) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        pop = r.get("s_pop")
        if isinstance(pop, bool) or not isinstance(pop, (int, float)) or pop <= 0:
            raise DataError(f"{path}: record {i} has no positive 's_pop' (PopQA's popularity, HELMET's filter)")
        if math.log10(pop) < POPQA_THRESHOLD:
            out.append(r)
    return out


def _fmt(tpl: str, c: Any, path: Path | None, i: int) -> str:
    if not isinstance(c, dict):
        raise DataError(f"{path}: record {i}: each of 'ctxs' is an object in HELMET's layout")
    try:
        return tpl.format(**c)
    except KeyError as e:
        raise DataError(f"{path}: record {i}: a passage without {e.args[0]!r}") from None


def _passage(c: Any, path: Path | None, i: int) -> str:
    return _fmt("Document (Title: {title}): {text}", c, path, i)


def _kilt_demo(d: dict[str, Any], path: Path | None, i: int) -> str:
    answers = d.get("answers")
    if not isinstance(answers, list) or not answers:
        raise DataError(f"{path}: record {i} has no 'answers' of HELMET's layout")
    docs = "\n\n".join(_passage(c, path, i) for c in d.get("ctxs") or [])
    return f"{docs}\n\nQuestion: {d.get('question')}\nAnswer: {answers[0]}"


def _gold_ranking(ctxs: list[dict[str, Any]]) -> str:
    """The ids by relevance label, highest first (a stable sort: ties keep the file's order)."""

    def label(c: dict[str, Any]) -> float:
        v = c.get("label")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    return " > ".join(str(c.get("id")) for c in sorted(ctxs, key=label, reverse=True))


def score_item(ds: Dataset, item: dict[str, Any], output: str) -> tuple[float, Any]:
    """(HELMET's metric of ``ds`` on ``output`` in [0, 1], the parsed output)."""
    if ds.kind == "ruler":
        return ruler_recall(output, item["answer"]), output
    if ds.kind == "msmarco":
        ranking = parse_rankings(output)
        return ndcg_at_k({d: float(s) for d, s in ranking.items()}, item["qrels"], 10), ranking
    parsed = parse_output(output, "corresponding value:" if ds.kind == "json_kv" else "Answer:")
    return max(substring_exact_match(output, item["answer"]), substring_exact_match(parsed, item["answer"])), parsed


# ---------------------------------------------------------------------------------------------- model
@dataclass
class _Model:
    model_dir: Path
    device: str | None
    tok: Any = None
    lm: Any = None

    def load(self) -> None:
        if self.lm is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tok = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        self.lm = AutoModelForCausalLM.from_pretrained(str(self.model_dir), local_files_only=True, torch_dtype=dtype)
        self.lm.to(device).eval()

    def stop_ids(self, newline: bool) -> list[int]:
        """The model's end-of-sequence ids, and with ``newline`` the newline tokens HELMET stops at."""
        eos = self.lm.generation_config.eos_token_id
        ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if self.tok.eos_token_id is not None and self.tok.eos_token_id not in ids:
            ids.append(self.tok.eos_token_id)
        if newline:
            vocab = self.tok.get_vocab()
            ids += [vocab[t] for t in ("\n", "Ċ", "ĊĊ", "<0x0A>") if t in vocab and vocab[t] != self.tok.unk_token_id]
        return sorted(set(ids))

    def prompt(self, item: dict[str, Any], length: int, gen: int) -> tuple[str, list[int], int] | str:
        """HELMET's ``tokenize``: the prompt's ids, the end of its context cut so that it fits ``length - gen``
        tokens; a string (why) when it cannot fit even with no context."""
        fields = dict(item["fields"])
        text = item["template"].format(**fields)
        ids = self.tok(text).input_ids
        budget = length - gen
        if len(ids) <= budget:
            return text, ids, 0
        empty = len(self.tok(item["template"].format(**{**fields, "context": ""})).input_ids)
        if empty > budget:
            return f"its prompt without a context needs {empty} tokens, above {length} - {gen} (the answer's budget)"
        cut = len(ids) - budget
        ctx = fields["context"]
        if getattr(self.tok, "is_fast", False):
            offsets = self.tok([ctx], return_offsets_mapping=True)["offset_mapping"][0]
            fields["context"] = ctx[: offsets[-cut][0]] if cut <= len(offsets) else ""
        else:
            cids = self.tok(ctx).input_ids
            fields["context"] = self.tok.decode(cids[:-cut]) if cut < len(cids) else ""
        text = item["template"].format(**fields)
        return text, self.tok(text).input_ids, cut

    def generate(self, ids: list[int], gen: int, stops: list[int]) -> str:
        import torch

        x = torch.tensor([ids], device=self.lm.device)
        with torch.no_grad():
            out = self.lm.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=gen,
                do_sample=False,
                eos_token_id=stops or None,
                pad_token_id=self.tok.pad_token_id,
            )
        return self.tok.decode(out[0, len(ids) :], skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------- running
def run_helmet_data(
    model_dir: str | Path, request: HelmetDataRequest, progress: bool = False, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """HELMET's datasets of ``request.categories`` at each length on the HF model in ``model_dir``; the result
    (``columns``, ``cells``) also goes to ``out_dir/results.json`` with ``out_dir/samples.jsonl``. Each cell
    goes to the cache as it finishes, so a stopped run resumes at the first unfinished cell; ``log`` (or
    standard error with ``progress``) gets one line per cell."""
    t0 = time.perf_counter()
    log = cell_logger(log, progress)
    model_dir = hf_model_dir(model_dir)
    check_tokenizer_files(model_dir)
    plan, files, demos = check_data(request.data_dir, request.categories, request.lengths, request.limit, request.shots,
                                    request.seed)  # fmt: skip
    import transformers

    model_hash, tok_hash = model_sha256(model_dir), tokenizer_sha256(model_dir)
    hashes: dict[Path, str] = {}
    model = _Model(model_dir, request.device)
    cells: list[dict[str, Any]] = []
    for L, ds in plan:
        path, dpath = files[L, ds.name], demos.get(ds.name)
        for p in (path, dpath):
            if p is not None and p not in hashes:
                hashes[p] = file_sha256(p)
        key = _key(model_hash, tok_hash, ds, L, request, hashes[path], hashes.get(dpath) if dpath else None,
                   transformers.__version__)  # fmt: skip
        cpath = request.cache_dir / f"helmet_data_{key}.json" if request.cache_dir else None
        cells.append(
            cached_cell(
                cpath,
                lambda p, key=key: _cached(p, key),
                lambda ds=ds, L=L, path=path, dpath=dpath, key=key: {
                    **_cell(model, ds, L, path, dpath, request),
                    "cache_key": key,
                },
            )
        )
        report_cell(log, SUITE, len(cells), len(plan), f"{ds.name}@{L}", cells[-1])
    result = {
        "suite": SUITE,
        "target": str(model_dir),
        "data_dir": str(request.data_dir),
        "model_hash": model_hash,
        "tokenizer_hash": tok_hash,
        "categories": list(request.categories),
        "lengths": list(request.lengths),
        "limit": request.limit,
        "shots": request.shots,
        "seed": request.seed,
        "columns": helmet_data_columns(cells, request.categories),
        "cells": [{k: v for k, v in c.items() if k != "samples"} for c in cells],
        "wall_s": time.perf_counter() - t0,
    }
    if request.out_dir is not None:
        from archpool.io import atomic_write_json, atomic_write_text

        rows = [{k: s.get(k) for k in SAMPLE_KEYS} for c in cells for s in c.get("samples") or []]
        atomic_write_text(request.out_dir / "samples.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        atomic_write_json(request.out_dir / "results.json", result)
    return result


def check_data(
    data_dir: Path, categories: Sequence[str], lengths: Sequence[int], limit: int, shots: int, seed: int
) -> tuple[list[tuple[int, Dataset]], dict[tuple[int, str], Path], dict[str, Path]]:
    """Every cell (length, dataset) of the categories at ``lengths`` with its test file and demo file, each
    file found and its scored records read whole (JSON lines in UTF-8, HELMET's fields, gold answers that
    are not empty: :func:`build_items`); DataError naming the file and record otherwise. Run before a model
    loads, so bad data is refused before any cell generates."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: no HELMET data directory (the data/ that HELMET's data.tar.gz unpacks)")
    plan = [(L, ds) for L in lengths for c in categories for ds in datasets_of(c)]
    files = {(L, ds.name): test_file(data_dir, ds, L) for L, ds in plan}
    demos = {ds.name: demo_file(data_dir, ds) for _, ds in plan if ds.demo and shots}
    for L, ds in plan:
        build_items(ds, files[L, ds.name], demos.get(ds.name), limit, 0 if ds.kind == "ruler" else shots, seed)
    return plan, files, demos


def _key(model_hash: str, tok_hash: str, ds: Dataset, length: int, r: HelmetDataRequest, data: str, demo: str | None,
         tf_version: str) -> str:  # fmt: skip
    from archpool.io import sha256_json

    shots = 0 if ds.kind == "ruler" else r.shots
    return sha256_json({"v": FORMAT_VERSION, "suite": SUITE, "model": model_hash, "tokenizer": tok_hash, "dataset": ds.name,
                        "length": length, "limit": r.limit, "seed": r.seed, "shots": shots, "data": data, "demo": demo,
                        "transformers": tf_version})[:24]  # fmt: skip


def _cached(path: Path, key: str) -> dict[str, Any] | None:
    from archpool.io import read_cache_entry
    from archpool.safeload import read_record

    r = read_cache_entry(path, reader=read_record)
    if r is None or r.get("cache_key") != key:
        return None
    score = r.get("score")
    ok = score is None or (isinstance(score, (int, float)) and not isinstance(score, bool))
    return r if ok and isinstance(r.get("samples", []), list) else None


def _cell(model: _Model, ds: Dataset, length: int, path: Path, dpath: Path | None, r: HelmetDataRequest) -> dict[str, Any]:
    t0 = time.perf_counter()
    shots = 0 if ds.kind == "ruler" else r.shots
    base = {"suite": SUITE, "dataset": ds.name, "category": ds.category, "length": length, "file": str(path),
            "nominal_length": nominal_length(length), "limit": r.limit, "seed": r.seed, "shots": shots,
            "generation_max_length": ds.gen}  # fmt: skip
    items = build_items(ds, path, dpath, r.limit, shots, r.seed)
    model.load()
    stops = model.stop_ids(ds.stop_newline)
    prepared = []
    for item in items:
        p = model.prompt(item, length, ds.gen)
        if isinstance(p, str):
            return {**base, "score": None, "n": 0, "skipped": p, "wall_s": time.perf_counter() - t0}
        prepared.append((item, *p))
    samples, scores = [], []
    for index, (item, text, ids, cut) in enumerate(prepared):
        output = model.generate(ids, ds.gen, stops)
        s, parsed = score_item(ds, item, output)
        scores.append(s)
        kept = None if ds.kind == "msmarco" else any(g.lower() in text.lower() for g in _golds(item["answer"]))
        samples.append(json.loads(json.dumps({
            "dataset": ds.name, "length": length, "index": index, "id": item["id"], "prompt_tokens": len(ids),
            "truncated_tokens": cut, "prompt_head": model.tok.decode(ids[:500]), "prompt_tail": model.tok.decode(ids[-500:]),
            "output": output, "parsed_output": parsed, "answer": item["answer"], "gold_in_prompt": kept,
            "score": s}, default=str)))  # fmt: skip
    kept = [s["gold_in_prompt"] for s in samples if s["gold_in_prompt"] is not None]
    metric = {"ruler": "ruler_recall", "msmarco": "NDCG@10"}.get(ds.kind, "substring_exact_match")
    return {
        **base,
        "score": 100.0 * sum(scores) / len(scores),
        "metric": f"{metric} x 100 (HELMET's)",
        "n": len(samples),
        "truncated": sum(1 for s in samples if s["truncated_tokens"] > 0),
        "gold_kept": None if not kept else sum(kept) / len(kept),
        "prompt_tokens_max": max(s["prompt_tokens"] for s in samples),
        "wall_s": time.perf_counter() - t0,
        "samples": samples,
    }


def helmet_data_columns(cells: Sequence[dict[str, Any]], categories: Sequence[str] = CATEGORIES) -> dict[str, float]:
    """``helmet_data_<dataset>@L`` per scored cell; ``helmet_data_<category>@L`` where each of the category's
    datasets scored at L; ``helmet_data@L`` (their mean) and ``helmet_data_categories@L`` (how many)."""
    out: dict[str, float] = {}
    got: dict[tuple[str, int], float] = {}
    for c in cells:
        score = c.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            got[c["dataset"], int(c["length"])] = float(score)
            out[f"helmet_data_{c['dataset']}@{c['length']}"] = round(float(score), 6)
    for L in sorted({int(c["length"]) for c in cells}):
        means = []
        for cat in categories:
            vals = [got.get((d.name, L)) for d in datasets_of(cat)]
            if all(v is not None for v in vals):
                m = sum(vals) / len(vals)  # type: ignore[arg-type]
                out[f"helmet_data_{cat}@{L}"] = round(m, 6)
                means.append(m)
        if means:
            out[f"helmet_data@{L}"] = round(sum(means) / len(means), 6)
            out[f"helmet_data_categories@{L}"] = float(len(means))
    return out


def format_table(result: dict[str, Any]) -> str:
    """Markdown: one row per dataset and category, one column per length."""
    cols, lengths = result["columns"], result["lengths"]
    skipped = {(c["dataset"], c["length"]): c["skipped"] for c in result["cells"] if "skipped" in c}

    def cell(stem: str, L: int) -> str:
        v = cols.get(f"helmet_data_{stem}@{L}")
        return "skip" if (stem, L) in skipped else ("" if v is None else f"{v:.1f}")

    lines = ["| dataset | " + " | ".join(str(L) for L in lengths) + " |", "|---|" + "---|" * len(lengths)]
    for cat in result["categories"]:
        lines += [f"| {d.name} | " + " | ".join(cell(d.name, L) for L in lengths) + " |" for d in datasets_of(cat)]
        lines.append(f"| **{cat}** | " + " | ".join(cell(cat, L) for L in lengths) + " |")
    mean = " | ".join(
        f"{cols[f'helmet_data@{L}']:.1f} ({int(cols[f'helmet_data_categories@{L}'])}/{HELMET_CATEGORIES_TOTAL} categories)"
        if f"helmet_data@{L}" in cols else "" for L in lengths
    )  # fmt: skip
    lines.append(f"| **helmet_data** | {mean} |")
    lines += [f"- skipped {d} at {L}: {why}" for (d, L), why in skipped.items()]
    return "\n".join(lines)


__all__ = [
    "CATEGORIES", "DATASETS", "HELMET_CATEGORIES_TOTAL", "SUITE", "HelmetDataRequest", "HelmetDataSettings",
    "helmet_data_columns", "ndcg_at_k", "parse_rankings", "request_from", "ruler_recall", "run_helmet_data",
    "substring_exact_match", "test_file",
]  # fmt: skip
