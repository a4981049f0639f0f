"""Short-context metrics of a run: final pretraining loss, extension-phase loss, and held-out
perplexity on each validation split at the pretraining context (the task suites at the
pretraining length come from the runner)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from archpool import study
from archpool.errors import ConfigError
from archpool.safeload import load_json, read_text_bounded

TEXTS_MAX_BYTES = 1 << 30  # a held-out text file (--texts)


def final_loss(checkpoint: Path) -> float | None:
    """A training checkpoint's final loss, by the study's one rule (:func:`archpool.study.final_loss`);
    the training state is verified against the checkpoint's manifest before it is read."""
    from archpool.train.checkpoint import load_train_state

    state_path = Path(checkpoint) / "train_state.pt"
    if not state_path.is_file():
        return None
    losses = list(load_train_state(checkpoint).get("losses") or [])
    return study.final_loss(losses) if losses else None


def training_losses(target) -> dict[str, Any]:
    """``pretrain_loss`` and ``extension_loss`` (per extension) of a run / checkpoint target."""
    from archpool.rundir import extension_root, run_dir_final

    out: dict[str, Any] = {}
    rec = target.record or {}
    if rec.get("kind") == "extension":
        out["extension_loss"] = final_loss(target.checkpoint)
        src = rec.get("source")
        if src:
            out["pretrain_loss"] = final_loss(Path(src))
    else:
        out["pretrain_loss"] = final_loss(target.checkpoint)
        if target.run_dir is not None:
            exts = {}
            for ext in sorted(extension_root(target.run_dir).glob("*")):
                loss = final_loss(run_dir_final(ext))
                if loss is not None:
                    exts[ext.name] = loss
            if exts:
                out["extension_loss"] = exts
    return out


def validation_perplexity(lm, store, seq_len: int, max_sequences: int = 32) -> dict[str, Any]:
    """Perplexity on each held-out split (``short``, ``long``) at ``seq_len``."""
    from archpool.data.streams import validation_sequences
    from archpool.errors import DataError

    out: dict[str, Any] = {}
    for kind in ("short", "long"):
        try:
            rows = validation_sequences(store, seq_len, kind, max_sequences)
        except DataError as e:
            out[kind] = {"skipped": str(e)}
            continue
        nll = lm.token_nll(rows)
        out[kind] = {"ppl": math.exp(float(nll.mean())), "n_token": nll.numel(), "n_seq": rows.shape[0], "seq_len": seq_len}
    return out


def open_store(path: str | Path | None, record: dict | None = None):
    """A prepared data store from an explicit path, else the run's own, else None."""
    from archpool.data.store import Store

    if path:
        return Store(path)
    if record:
        from archpool.data.section import section_store_path

        p = section_store_path(record.get("data"))
        return Store(p) if p is not None and (p / "manifest.json").is_file() else None
    return None


def read_texts(path: str | Path) -> list[str]:
    """Held-out texts from a .txt file (documents separated by two blank lines, i.e. three newlines, so
    that a document may hold paragraphs) or a .jsonl file (``text`` field)."""
    p = Path(path)
    text = read_text_bounded(p, TEXTS_MAX_BYTES)
    if p.suffix == ".jsonl":
        return [_jsonl_text(line, f"{p}:{i}") for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    return [d for d in text.split("\n\n\n") if d.strip()]


def _jsonl_text(line: str, where: str) -> str:
    """The ``text`` field of one .jsonl line; ConfigError naming the file and line when there is none."""
    row = load_json(line, where)
    text = row.get("text") if isinstance(row, dict) else None
    if not isinstance(text, str):
        raise ConfigError(where, "a JSON object with a string field 'text' expected")
    return text
