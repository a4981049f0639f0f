"""Everything the attention stage measures, for one target, cached as JSON by checkpoint hash.

A target is a run directory (``run_config.json`` + ``milestones/final``), an archpool checkpoint
directory, or a Hugging Face model directory. Text is the held-out validation split
(``val_short`` + ``val_long``) of the pool's data store: the one the run's ``data:`` section names,
or ``store=`` explicitly. An HF model whose tokenizer differs from the store's gets the documents
decoded and re-encoded with its own tokenizer.

Measured (docs/evaluation.md §4–5), each "without BOS" (the document's own first token at position 0, as in
packed pretraining) and "with BOS" (``bos_id`` prepended; default: the store's EOS, the separator
every document follows in pretraining):

- ``sink``: sink rate at T = 64 (% of heads with α_1 > 0.3, over samples and layers), per layer;
- ``long``: at lengths pretraining context × (1, 2, 4), from the last ``queries`` queries of each
  sample: first-token mass, entropy (raw, / log|support|, sink-excluded), distance profile by layer
  type, per layer and head;
- ``retrieval`` (no BOS): retrieval-head scores, heads above 0.1, top-k, and NIAH accuracy with the
  top-k vs k random heads masked.

``metrics`` holds the flat scalars the pool puts into results.csv (``attn_*``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from archpool.attention.capture import Probe, probe_for
from archpool.attention.metrics import RowStats, sink_rate
from archpool.attention.rows import attention_rows
from archpool.attention.settings import SINK_EPS, Settings
from archpool.errors import DataError
from archpool.io import atomic_write_json, sha256_file, sha256_json

SCHEMA = "archpool.attention/1"
VERSION = 1  # bump when results change meaning: invalidates the cache
RESULT_NAME = "attention.json"
VARIANTS = ("no_bos", "bos")


# ------------------------------------------------------------------------------------------ text
@dataclass
class Corpus:
    """Held-out documents in the analysed model's tokens."""

    docs: list[np.ndarray]
    bos_id: int  # prepended in the "BOS" variant
    sep_id: int | None = None  # between packed documents (default: bos_id); the EOS for archpool stores
    special_ids: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def first_tokens(self, T: int, n: int, bos: bool) -> tuple[list[np.ndarray], bool]:
        """``n`` samples of length ``T``: the first tokens of documents at least that long (with a
        BOS the first T − 1); packed documents (separator between them) when too few are that long."""
        need = T - 1 if bos else T
        picked = [d[:need] for d in self.docs if len(d) >= need][:n]
        packed = len(picked) < n
        if packed:
            stream = self.stream()
            picked = [stream[i * need : (i + 1) * need] for i in range(min(n, len(stream) // need))]
            if not picked:
                raise DataError(f"held-out text has {len(stream)} tokens; a {T}-token sample needs more")
        if bos:
            picked = [np.concatenate([[self.bos_id], p]) for p in picked]
        return picked, packed

    def stream(self) -> np.ndarray:
        parts = []
        for d in self.docs:
            parts.extend([d, np.array([self.bos_id if self.sep_id is None else self.sep_id], dtype=d.dtype)])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def corpus_from_store(store_path: str | Path, tokenizer_dir: str | Path | None = None, max_docs: int = 2000) -> Corpus:
    """The store's validation documents; re-encoded when ``tokenizer_dir`` holds a different tokenizer."""
    from archpool.data.store import Store

    store = Store(store_path)
    idx = store.docs("val_short", "val_long")
    if len(idx) == 0:
        raise DataError(f"{store.path}: no held-out documents (val_short / val_long) in this store")
    idx = idx[:max_docs]
    tok = store.tokenizer
    info = {
        "source": "store",
        "store": str(store.path),
        "store_key": store.key,
        "split": ["val_short", "val_long"],
        "n_docs": len(idx),
        "tokenizer_hash": store.tokenizer_hash,
    }
    other = None
    if tokenizer_dir is not None and (Path(tokenizer_dir) / "tokenizer.json").is_file():
        from archpool.tokenizer import Tokenizer

        other = Tokenizer.load(tokenizer_dir)
        if other.hash == store.tokenizer_hash:
            other = None
    if other is None:
        docs = [np.asarray(store.doc(int(i)), dtype=np.int64) for i in idx]
        specials = sorted({tok.bos_id, tok.eos_id, tok.pad_id})
        return Corpus(docs, int(store.eos_id), int(store.eos_id), specials, info)
    docs = [np.asarray(ids, dtype=np.int64) for ids in other.encode_documents([store.text(int(i)) for i in idx])]
    info.update(reencoded=True, tokenizer_hash=other.hash)
    return Corpus(docs, int(other.eos_id), int(other.eos_id), sorted({other.bos_id, other.eos_id, other.pad_id}), info)


def corpus_from_texts(paths: Sequence[str | Path], tokenizer_dir: str | Path) -> Corpus:
    """Plain-text files, one document each, in the tokenizer found in ``tokenizer_dir``."""
    from archpool.tokenizer import Tokenizer

    tok = Tokenizer.load(tokenizer_dir)
    texts = [Path(p).read_text(errors="replace") for p in paths]
    docs = [np.asarray(ids, dtype=np.int64) for ids in tok.encode_documents(texts)]
    info = {"source": "files", "files": [str(p) for p in paths], "n_docs": len(docs), "tokenizer_hash": tok.hash}
    return Corpus(docs, int(tok.eos_id), int(tok.eos_id), sorted({tok.bos_id, tok.eos_id, tok.pad_id}), info)


# ------------------------------------------------------------------------------------------ analysis
def _long_lengths(s: Settings, seq_len: int) -> list[int]:
    return sorted(set(s.lengths or [seq_len * m for m in s.multiples]))


@torch.no_grad()
def sink_stats(probe: Probe, samples: Sequence[np.ndarray], eps: float = SINK_EPS) -> dict[str, Any]:
    """Sink rate from full maps of short samples: α_1 per (sample, layer, head) = mean over all
    queries of the first-token attention (every query sees token 0 at T ≤ window)."""
    device = next(probe.model.parameters()).device
    alphas = []
    for x in samples:
        ids = torch.as_tensor(np.asarray(x, dtype=np.int64))[None].to(device)
        per_layer = []
        for lq in probe.capture(ids):
            first = torch.zeros(lq.q.shape[1], dtype=torch.float64)
            for c in attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, scale=lq.scale):
                if len(c.k_pos) and int(c.k_pos[0]) == 0:
                    first += c.probs[0, :, :, 0].double().sum(-1).cpu()
            per_layer.append(first / ids.shape[1])
        alphas.append(torch.stack(per_layer))
    a = torch.stack(alphas)  # (N, L, H)
    types = probe.layer_types
    by_type = {t: sink_rate(a[:, [i for i, x in enumerate(types) if x == t]], eps) for t in sorted(set(types))}
    return {
        "rate": sink_rate(a, eps),
        "per_layer": [sink_rate(a[:, i], eps) for i in range(a.shape[1])],
        "by_layer_type": by_type,
        "alpha1_mean": float(a.mean()),
        "alpha1_per_head": [[round(float(v), 6) for v in row] for row in a.mean(0).tolist()],
        "n_samples": int(a.shape[0]),
        "T": len(samples[0]),
        "eps": eps,
    }


@torch.no_grad()
def long_stats(probe: Probe, samples: Sequence[np.ndarray], queries: int) -> dict[str, Any]:
    """First-token mass, entropies and distance profile from the last ``queries`` rows of each sample."""
    device = next(probe.model.parameters()).device
    T = len(samples[0])
    stats = RowStats(probe.n_layers, probe.n_heads, T)
    for x in samples:
        ids = torch.as_tensor(np.asarray(x, dtype=np.int64))[None].to(device)
        for layer, lq in enumerate(probe.capture(ids, keep_queries=queries)):
            for c in attention_rows(lq.q, lq.k, lq.q_pos, lq.k_pos, window=lq.window, scale=lq.scale):
                c.probs, c.q_pos, c.k_pos = c.probs.cpu(), c.q_pos.cpu(), c.k_pos.cpu()
                stats.add(layer, c, lq.window)
    out = stats.summary(probe.layer_types)
    out.update(T=T, n_samples=len(samples), queries=min(queries, T))
    return out


def analyze(
    model_or_probe, corpus: Corpus, settings: Settings | None = None, log: Callable[..., None] = lambda *a: None
) -> dict[str, Any]:
    """All attention statistics of a model (archpool ``Decoder`` or transformers causal LM) on ``corpus``."""
    s = settings or Settings()
    probe = model_or_probe if isinstance(model_or_probe, Probe) else probe_for(model_or_probe)
    cfg = getattr(probe.model, "cfg", None)
    max_seq = int(cfg.max_seq_len) if cfg is not None else int(getattr(probe.model.config, "max_position_embeddings", 0) or 0)
    seq_len = int(s.seq_len or max_seq or 2048)
    bos_id = corpus.bos_id if s.bos_id is None else int(s.bos_id)
    corpus = dataclasses.replace(corpus, bos_id=bos_id)
    for d in corpus.docs[:50]:
        if len(d) and int(d.max()) >= probe.vocab_size:
            raise DataError(
                f"held-out text has token id {int(d.max())} >= the model's vocabulary ({probe.vocab_size}): wrong tokenizer?"
            )
    t0 = time.time()
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "version": VERSION,
        "settings": {**s.to_dict(), "seq_len": seq_len, "bos_id": bos_id},
        "model": {**probe.describe(), **_model_axes(probe)},
        "text": corpus.info,
    }
    result["sink"], result["long"], packed = {}, {}, {}
    lengths = _long_lengths(s, seq_len)
    for v in VARIANTS:
        bos = v == "bos"
        samples, packed[f"sink_{v}"] = corpus.first_tokens(s.sink_len, s.sink_samples, bos)
        result["sink"][v] = sink_stats(probe, samples, s.sink_eps)
        log(f"sink rate ({v}): {result['sink'][v]['rate']:.1f}%")
        result["long"][v] = {}
        for T in lengths:
            samples, packed[f"{T}_{v}"] = corpus.first_tokens(T, s.long_samples, bos)
            result["long"][v][str(T)] = long_stats(probe, samples, s.queries)
            r = result["long"][v][str(T)]
            log(
                f"T={T} ({v}): first-token mass {r['first_token_mass']:.3f}, entropy {r['entropy']:.3f} (norm {r['entropy_norm']:.3f})"
            )
    result["text"] = {**corpus.info, "packed": packed}
    if s.retrieval:
        from archpool.attention.retrieval import make_trials, retrieval_heads

        long_ctx = int(s.long_ctx or max(max_seq, seq_len))
        r_lengths = s.retrieval_lengths or tuple(sorted({int(round(x)) for x in np.linspace(long_ctx / 4, long_ctx, 4)}))
        hay = corpus.stream()[: 2 * max(r_lengths) + 16]
        trials = make_trials(
            hay, r_lengths, key_len=s.key_len, value_len=s.value_len, exclude=corpus.special_ids + [bos_id], seed=s.seed
        )
        n_heads = probe.n_layers * probe.n_heads
        mask_k = s.mask_k if s.mask_k is not None else max(1, round(0.03 * n_heads))
        result["retrieval"] = retrieval_heads(probe, trials, top_k=s.top_k, mask_k=mask_k, seed=s.seed, log=log)
        log(
            f"retrieval: {result['retrieval']['n_successful']}/{len(trials)} successful, "
            f"{result['retrieval']['n_heads_above']} heads > {result['retrieval']['threshold']}"
        )
    result["metrics"] = flat_metrics(result)
    result["per_layer"] = per_layer(result)
    result["seconds"] = round(time.time() - t0, 2)
    return result


def _model_axes(probe: Probe) -> dict[str, Any]:
    cfg = getattr(probe.model, "cfg", None)
    if cfg is not None:
        return {
            "qk_norm": cfg.qk_norm,
            "norm": cfg.norm,
            "window": cfg.window,
            "max_seq_len": cfg.max_seq_len,
            "family": cfg.family,
        }
    c = probe.model.config
    from archpool.model.hf import FAMILIES

    fam = FAMILIES.get(getattr(c, "model_type", ""))
    return {
        "qk_norm": fam.qk_norm if fam else "unknown",
        "norm": fam.norm if fam else "unknown",
        "window": getattr(c, "sliding_window", None),
        "max_seq_len": getattr(c, "max_position_embeddings", None),
        "family": getattr(c, "model_type", None),
    }


def flat_metrics(r: dict[str, Any]) -> dict[str, float]:
    """The scalar ``attn_*`` columns for results.csv."""
    m: dict[str, float] = {}
    m["attn_sink_rate"] = r["sink"]["no_bos"]["rate"]
    m["attn_sink_rate_bos"] = r["sink"]["bos"]["rate"]
    for t, v in r["sink"]["no_bos"]["by_layer_type"].items():
        m[f"attn_sink_rate_{t.split('_')[0]}"] = v
    lengths = sorted(r["long"]["no_bos"], key=int)
    seq = int(r["settings"]["seq_len"])
    for T in lengths:
        sfx = "" if int(T) == seq else (f"_x{int(T) // seq}" if int(T) % seq == 0 else f"_T{T}")
        for v, vs in (("no_bos", ""), ("bos", "_bos")):
            x = r["long"][v][T]
            m[f"attn_first_token_mass{vs}{sfx}"] = x["first_token_mass"]
            if v == "no_bos":
                for key in ("entropy", "entropy_norm", "entropy_sinkless", "entropy_sinkless_norm"):
                    m[f"attn_{key}{sfx}"] = x[key]
                for t, d in x["distance"]["by_layer_type"].items():
                    m[f"attn_first_token_mass_{t.split('_')[0]}{sfx}"] = d["first_token_mass"]
    if "attn_entropy" not in m:  # no length equal to seq_len: the shortest is the headline
        base = r["long"]["no_bos"][lengths[0]]
        m.update(
            attn_first_token_mass=base["first_token_mass"], attn_entropy=base["entropy"], attn_entropy_norm=base["entropy_norm"]
        )
    if "retrieval" in r:
        rt = r["retrieval"]
        m.update(attn_retrieval_heads=rt["n_heads_above"], attn_retrieval_topk=rt["topk_mean"], attn_niah_acc=rt["accuracy"])
        if "ablation" in rt:
            m["attn_niah_acc_top_masked"] = rt["ablation"]["top_masked"]["accuracy"]
            m["attn_niah_acc_random_masked"] = rt["ablation"]["random_masked"]["accuracy"]
    return {k: (round(float(v), 6) if v == v else v) for k, v in m.items()}


def per_layer(r: dict[str, Any]) -> dict[str, list[float]]:
    """Per-layer arrays at the pretraining length (no BOS), for the report's profiles."""
    seq = str(r["settings"]["seq_len"])
    x = r["long"]["no_bos"].get(seq) or r["long"]["no_bos"][sorted(r["long"]["no_bos"], key=int)[0]]
    out = {
        "sink_rate": [round(v, 4) for v in r["sink"]["no_bos"]["per_layer"]],
        "layer_types": r["model"]["layer_types"],
        **x["per_layer"],
    }
    if "retrieval" in r:
        out["retrieval_score_max"] = [max(row) for row in r["retrieval"]["scores"]]
    return out


# ------------------------------------------------------------------------------------------ targets
@dataclass
class Target:
    path: Path
    kind: str  # run | checkpoint | hf
    model_dir: Path
    data_cfg: dict[str, Any] | None = None
    name: str = ""


def resolve_target(path: str | Path) -> Target:
    """A run directory (its final checkpoint), an archpool checkpoint, or a Hugging Face model directory."""
    from archpool.rundir import resolve_target as resolve_path

    found = resolve_path(path)
    p = found.path
    name = p.parent.parent.name if found.kind == "checkpoint" and p.name == "final" else p.name
    return Target(p, found.kind, found.checkpoint, found.data_cfg, name=name)


def store_for(target: Target, store: str | Path | None) -> Path | None:
    """The data store to read held-out text from: explicit, the run's ``data.store``, or the store its config names."""
    if store is not None:
        return Path(store)
    from archpool.data.section import section_store_path

    d = target.data_cfg or {}
    path = section_store_path(d)
    if path is None or d.get("store") or (path / "manifest.json").is_file():
        return path
    raise DataError(f"{target.path}: the run's data store {path} is not prepared; run `archpool data prepare` or pass --store")


def weights_digest(model_dir: Path) -> str:
    """Content hash of a checkpoint from its bytes on disk (config.json + weights), each file checked
    against MANIFEST.json when there is one: a corrupt file is a CheckpointError naming it."""
    from archpool.model.checkpoint import CONFIG_NAME, is_archpool_checkpoint, verify_checkpoint, verify_files

    if is_archpool_checkpoint(model_dir):
        return sha256_json(verify_checkpoint(model_dir))
    from archpool.model.hf import read_hf_config, weight_files

    read_hf_config(model_dir)  # custom-code configs refused
    return sha256_json(verify_files(model_dir, [f.name for f in weight_files(model_dir)] + [CONFIG_NAME]))


def cache_dir() -> Path:
    from archpool.data.config import default_cache_root

    return default_cache_root() / "attention"


def load_model(target: Target, backend: str = "auto", device: str = "cpu", verified: bool = False):
    """Our ``Decoder`` for archpool targets; for HF directories the transformers model itself
    (``backend='hf'``, the default) or its import into our Decoder (``backend='archpool'``).
    ``verified``: the caller already checked the files (``weights_digest``), so they are not hashed again."""
    if target.kind in ("run", "checkpoint"):
        from archpool.model.checkpoint import load_checkpoint

        return load_checkpoint(target.model_dir, device=device, verify=not verified)
    if backend == "archpool":
        from archpool.model.hf import import_hf

        return import_hf(target.model_dir).to(device)
    from archpool.attention.capture import load_hf_for_capture

    return load_hf_for_capture(target.model_dir, device=device, dtype=torch.float32 if device == "cpu" else None)


def analyze_target(
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
    """Analyse a run / checkpoint / HF directory; the result is cached by (weights, text, settings)."""
    s = settings if isinstance(settings, Settings) else Settings.from_dict(settings)
    target = resolve_target(path)
    digest = weights_digest(target.model_dir)  # verified first, once; the key never trusts a manifest's word
    store_path_ = store_for(target, store)
    tok_dir = target.model_dir if (target.model_dir / "tokenizer.json").is_file() else None
    if store_path_ is not None:
        text_id: dict[str, Any] = {
            "store": _store_key(store_path_),
            "tokenizer_dir": None if tok_dir is None else _tok_hash(tok_dir),
        }
    elif texts:
        if tok_dir is None:
            raise DataError(f"{target.path}: --text needs the model's tokenizer.json beside it")
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
            "settings": s.to_dict(),
            "backend": backend if target.kind == "hf" else "archpool",
        }
    )[:20]
    cached = cache_dir() / f"{key}.json"
    if use_cache and cached.is_file():
        result = json.loads(cached.read_text())
        log(f"attention: cached result {cached}")
    else:
        corpus = corpus_from_store(store_path_, tok_dir) if store_path_ is not None else corpus_from_texts(texts or [], tok_dir)
        model = load_model(target, backend, device, verified=True)
        result = analyze(model, corpus, s, log=log)
        result.update(cache_key=key, checkpoint_sha256=digest)
        if use_cache:
            atomic_write_json(cached, result)
    result.update(target=str(target.path), kind=target.kind, name=target.name)  # a cache hit may come from a copy
    if out is not None:
        atomic_write_json(out, result)
    return result


def _store_key(path: Path) -> str:
    m = path / "manifest.json"
    return json.loads(m.read_text()).get("key", str(path)) if m.is_file() else str(path)


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
    s = settings or Settings()
    s = dataclasses.replace(
        s, seq_len=s.seq_len if s.seq_len is not None else seq_len, long_ctx=s.long_ctx if s.long_ctx is not None else long_ctx
    )
    out = Path(out_dir) / RESULT_NAME
    r = analyze_target(model_dir, s, store=store, out=out, log=log)
    return {"metrics": r["metrics"], "json": str(out)}


# ------------------------------------------------------------------------------------------ display
ROWS = [
    ("sink rate, T=64, no BOS (%)", ("sink", "no_bos", "rate")),
    ("sink rate, T=64, BOS (%)", ("sink", "bos", "rate")),
]


def summaries_table(results: Sequence[dict[str, Any]]) -> str:
    """A side-by-side text table of several results (one column per target)."""
    names = [r.get("name") or Path(str(r.get("target", "?"))).name for r in results]
    rows: list[tuple[str, list[str]]] = [
        ("qk_norm", [str(r["model"].get("qk_norm")) for r in results]),
        ("norm", [str(r["model"].get("norm")) for r in results]),
    ]
    for label, path in ROWS:
        rows.append((label, [_fmt(_get(r, path)) for r in results]))
    lengths = sorted({T for r in results for T in r["long"]["no_bos"]}, key=int)
    for T in lengths:
        for v in VARIANTS:
            rows.append(
                (
                    f"first-token mass, T={T}, {v.replace('_', ' ')}",
                    [_fmt(_get(r, ("long", v, T, "first_token_mass"))) for r in results],
                )
            )
        for key, label in (
            ("entropy", "entropy (nats)"),
            ("entropy_norm", "entropy / log i"),
            ("entropy_sinkless", "entropy, sink excluded"),
            ("entropy_sinkless_norm", "entropy / log, sink excl."),
        ):
            rows.append((f"{label}, T={T}", [_fmt(_get(r, ("long", "no_bos", T, key))) for r in results]))
    if any("retrieval" in r for r in results):
        rows.append(("NIAH accuracy (needle test)", [_fmt(_get(r, ("retrieval", "accuracy"))) for r in results]))
        rows.append(("retrieval heads (score > 0.1)", [_fmt(_get(r, ("retrieval", "n_heads_above"))) for r in results]))
        rows.append(("top-k retrieval score (mean)", [_fmt(_get(r, ("retrieval", "topk_mean"))) for r in results]))
        rows.append(
            (
                "NIAH acc., top-k heads masked",
                [_fmt(_get(r, ("retrieval", "ablation", "top_masked", "accuracy"))) for r in results],
            )
        )
        rows.append(
            (
                "NIAH acc., k random masked",
                [_fmt(_get(r, ("retrieval", "ablation", "random_masked", "accuracy"))) for r in results],
            )
        )
    w = max(len(label) for label, _ in rows)
    cw = [max(10, len(n)) for n in names]
    lines = [" " * w + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cw))]
    for label, vals in rows:
        lines.append(label.ljust(w) + "  " + "  ".join(v.rjust(c) for v, c in zip(vals, cw)))
    return "\n".join(lines)


def _get(r: dict, path: tuple) -> Any:
    for p in path:
        if not isinstance(r, dict) or p not in r:
            return None
        r = r[p]
    return r


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)
