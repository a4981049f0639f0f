"""A small pool's scored answers with known structure, and the results table made from them, for the
tests of the answers-based statistics."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from archpool.analysis.answers import ANSWER_COLUMNS
from archpool.pool.results import ladder_auc, ladder_means

ARMS = {  # arm -> design columns
    "base": dict(swa=0, qk_norm="none", norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=128),
    "gqa": dict(swa=0, qk_norm="none", norm="pre", n_kv_heads=1, n_heads=4, pretrain_ctx=128),
    "qknorm": dict(swa=0, qk_norm="layerwise", norm="pre", n_kv_heads=4, n_heads=4, pretrain_ctx=128),
}
RUNGS = (0, 25, 50)
DOCS = 16

# P(correct) of an answer: (arm, seed, eval, doc, distance) -> probability; eval is "base@L" or "ext<N>@L"
Accuracy = Callable[[str, int, str, int, int], float]


def default_accuracy(arm: str, seed: int, where: str, doc: int, distance: int) -> float:
    if where.startswith("base@128"):
        return 0.97
    if where.startswith("base@"):
        return 0.3
    rung = int(where.split("@")[0].removeprefix("ext"))
    return {"base": 0.6, "gqa": 0.55, "qknorm": 0.6}[arm] + 0.004 * rung - 0.02 * (doc % 3)


def make_answers(
    seeds: int = 3, accuracy: Accuracy = default_accuracy, arms: tuple[str, ...] = ("base", "gqa", "qknorm"), rng_seed: int = 0
) -> pd.DataFrame:
    """Answers of every run: before extension at 128 and 1,024 (prefix ``base_``), after extension on a
    ladder (``ext0``, ``ext25``, ``ext50``) at 1,024; the same documents and distances for every run."""
    rng = np.random.default_rng(rng_seed)
    layout = {L: [rng.integers(2, L, size=int(rng.integers(12, 30))) for _ in range(DOCS)] for L in (128, 1024)}
    evals = [("base_", "", 128), ("base_", "", 1024)] + [("", f"ext{r}", 1024) for r in RUNGS]
    rows = []
    for arm in arms:
        for s in range(seeds):
            run = f"{arm}_s{s}"
            for prefix, rung, L in evals:
                where = f"{'base' if prefix else rung}@{L}"
                for d, dists in enumerate(layout[L]):
                    for q, dist in enumerate(dists):
                        p = float(np.clip(accuracy(arm, s, where, d, int(dist)), 0, 1))
                        ok = float(rng.random() < p)
                        rows.append(
                            dict(
                                run=run,
                                arch=arm,
                                seed=s,
                                recipe="base" if prefix else "ntk",
                                prefix=prefix,
                                rung=rung,
                                milestone="",
                                task="mqar",
                                mode="dense",
                                length=L,
                                doc=d,
                                query=q,
                                distance=int(dist),
                                hop=1,
                                chain=-1,
                                correct=ok,
                                lp=float(np.log(0.9 if ok else 0.05)),
                            )
                        )
    return pd.DataFrame(rows)[list(ANSWER_COLUMNS)]


def _metrics(g: pd.DataFrame, length: int) -> dict[str, float]:
    """Accuracy and gold log-probability over all answers and beyond distance 128, as the pool names them."""
    out = {}
    for filt, sel in (("", g), ("[d>128]", g[g.distance > 128])):
        if len(sel):
            out[f"mqar_acc@{length}{filt}"] = round(float(sel.correct.mean()), 6)
            out[f"mqar_lp@{length}{filt}"] = round(float(sel.lp.mean()), 6)
    return out


def results_from(answers: pd.DataFrame) -> pd.DataFrame:
    """results.csv of the runs, made from their answers as a pool makes it (rounded to 6 decimals)."""
    rows = []
    for run, g in answers.groupby("run", sort=False):
        arm = str(g.arch.iloc[0])
        row = {"run": run, "arch": arm, "seed": int(g.seed.iloc[0]), **ARMS[arm], "short_ctx": 64, "state": "done"}
        ladder = []
        for (prefix, rung, length), e in g.groupby(["prefix", "rung", "length"], sort=False):
            metrics = _metrics(e, int(length))
            row.update({f"{prefix}{k}" + (f"#{rung}" if rung else ""): v for k, v in metrics.items()})
            if rung:
                ladder.append((int(rung.removeprefix("ext")), metrics))
        row.update({f"{k}#ladder_mean": v for k, v in ladder_means([v for _, v in ladder]).items()})
        row.update({f"{k}#ladder_auc": v for k, v in ladder_auc(ladder).items()})
        rows.append(row)
    return pd.DataFrame(rows)
