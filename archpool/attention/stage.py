"""The attention analysis of a target, cached as JSON by (the model's files, text, settings), and the pool's
attention node.

A target is a run directory (``run_config.json`` + ``milestones/final``), an archpool checkpoint
directory, or a Hugging Face model directory (``archpool.rundir.resolve_target``). Text is the held-out
validation split of the pool's data store: the one the run's ``data:`` section names, or ``store=``
explicitly; or plain-text files (``texts=``), which an explicit ``store=`` alone overrides, so models
of every format can read one text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archpool.attention.corpus import corpus_from_store, corpus_from_texts
from archpool.attention.runner import load_model, store_for
from archpool.attention.settings import Settings, analysis_settings
from archpool.attention.stats import VERSION, analyze
from archpool.errors import DataError
from archpool.io import atomic_write_json, read_cache_entry, sha256_file, sha256_json, write_cache_entry
from archpool.rundir import Target, resolve_target
from archpool.safeload import read_json_object

RESULT_NAME = "attention.json"
TRIALS_SUFFIX = ".trials.jsonl"  # beside a cached result: the finished trials of its retrieval-head search while it runs
# settings that change when an analysis stops, not what it finds: a complete result is the same under any budget
UNKEYED = ("retrieval_budget_s",)


def weights_digest(model_dir: Path) -> str:
    """Content hash of a model from its bytes on disk: config.json, the weights and the files beside them
    that change what it computes or reads (generation settings, tokenizer files;
    :func:`archpool.model.hf.model_file_hashes`), each checked against MANIFEST.json when there is one: a
    corrupt file is a CheckpointError naming it, a custom-code HF config is refused."""
    from archpool.model.hf import model_file_hashes

    return sha256_json(model_file_hashes(model_dir))


def text_source(target: Target, store: str | Path | None, texts: Sequence[str | Path] | None) -> tuple[Path | None, Path | None]:
    """(store to read, tokenizer directory) for a target: an explicit ``store`` first, then explicit
    ``texts`` (so models of every format can read the same text), then the run's own data store. Texts
    are tokenised with the tokenizer beside the model, else with the run's data store's tokenizer."""
    beside = target.checkpoint if (target.checkpoint / "tokenizer.json").is_file() else None
    if store is None and texts:
        return None, beside if beside is not None else store_for(target, None)
    return store_for(target, store), beside


def cache_dir() -> Path:
    from archpool.data.config import default_cache_root

    return default_cache_root() / "attention"


def analyze_target(  # noqa: PLR0913 — keyword-only options, one per `archpool attention` flag
    path: str | Path,
    settings: Settings | dict | None = None,
    *,
    store: str | Path | None = None,
    texts: Sequence[str | Path] | None = None,
    out: str | Path | None = None,
    use_cache: bool = True,
    backend: str = "auto",
    device: str = "cpu",
    log: Callable[..., None] = lambda *a: None,
) -> dict[str, Any]:
    """Analyse a run / checkpoint / HF directory; the result is cached by (weights, text, settings), except
    one whose retrieval-head search its time budget ended (``retrieval_budget_s``): that search's trials stay
    in its journal, so the next analysis resumes and extends it."""
    s = settings if isinstance(settings, Settings) else Settings.from_dict(settings)
    target = resolve_target(path)
    digest = weights_digest(target.checkpoint)  # verified first, once; the key never trusts a manifest's word
    store_path_, tok_dir = text_source(target, store, texts)
    if store_path_ is not None:
        text_id: dict[str, Any] = {
            "store": _store_key(store_path_),
            "tokenizer_dir": None if tok_dir is None else _tok_hash(tok_dir),
        }
    elif texts:
        if tok_dir is None:
            raise DataError(f"{target.path}: --text needs the model's tokenizer.json beside it, or the run's data store")
        text_id = {"files": [sha256_file(t) for t in texts]}
    else:
        raise DataError(
            f"{target.path}: no held-out text: the target names no data store; pass --store STORE_DIR (or --text FILES)"
        )
    key = sha256_json(
        {
            "version": VERSION,
            "weights": digest,
            "text": text_id,
            "settings": {k: v for k, v in s.to_dict().items() if k not in UNKEYED},
            "backend": backend if target.kind == "hf" else "archpool",
        }
    )[:20]
    cached = cache_dir() / f"{key}.json"
    result = _cached_result(cached) if use_cache else None
    if result is not None:
        log(f"attention: cached result {cached}")
    else:
        corpus = corpus_from_store(store_path_, tok_dir) if store_path_ is not None else corpus_from_texts(texts or [], tok_dir)
        model = load_model(target, backend, device, verified=True)
        journal = cache_dir() / f"{key}{TRIALS_SUFFIX}" if use_cache else None  # the search's finished trials
        result = analyze(model, corpus, s, log=log, journal=journal)
        result.update(cache_key=key, checkpoint_sha256=digest)
        if use_cache and result.get("retrieval", {}).get("complete", True):
            write_cache_entry(cached, result)
            journal.unlink(missing_ok=True)  # type: ignore[union-attr]  # the result is kept: its trials are not needed
        elif use_cache:  # a search its time budget ended: not cached, its trials kept for the next analysis to resume
            log(f"attention: the retrieval-head search is not complete; its trials are kept in {journal} for the next run")
    # a cache hit may come from a copy: the target is this one, its path resolved
    result.update(target=str(target.path.resolve()), kind=target.kind, name=target.name)
    if out is not None:
        atomic_write_json(out, result)
    return result


def _cached_result(path: Path) -> dict[str, Any] | None:
    """The cached result in ``path`` when its content hash matches (``archpool.io.read_cache_entry``); None
    when there is none, it is damaged or edited (it is then recomputed, an edit with a warning)."""
    return read_cache_entry(path)


def _store_key(path: Path) -> str:
    m = path / "manifest.json"
    key = read_json_object(m).get("key") if m.is_file() else None
    return key if isinstance(key, str) else str(path)


def _tok_hash(d: Path) -> str:
    return sha256_file(d / "tokenizer.json")


def pool_stage(
    model_dir: str | Path,
    out_dir: str | Path,
    *,
    store: str | Path | None,
    settings: Settings | None = None,
    seq_len: int | None = None,
    long_ctx: int | None = None,
    log: Callable[..., None] = print,
) -> dict[str, Any]:
    """For the pool's attention node: analyse ``model_dir`` and write ``OUT/attention.json``;
    returns ``{"metrics": {attn_*: …}, "json": path}``. ``seq_len`` / ``long_ctx`` fill settings left unset."""
    s = analysis_settings(settings or Settings(), seq_len, long_ctx)
    out = Path(out_dir) / RESULT_NAME
    r = analyze_target(model_dir, s, store=store, out=out, log=log)
    return {"metrics": r["metrics"], "json": str(out)}
