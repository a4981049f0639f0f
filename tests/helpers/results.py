"""Generated results tables and pool directories with known structure, for the analysis and report tests."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

FEATURES = ("qk_norm", "gqa", "swa", "short_ctx")


def make_table(
    seeds: int = 1, noise: float = 1.0, effects: dict[str, float] | None = None, swa_gqa: float = 0.0, rng_seed: int = 0
) -> pd.DataFrame:
    """Full factorial of the four features (16 configs) × ``seeds``.

    target ``helmet`` = 50 + Σ effect[f]·f (default −5 each, i.e. 50 − 5·count) + swa_gqa·swa·gqa + noise·N(0, 1).
    """
    eff = {f: -5.0 for f in FEATURES} | (effects or {})
    rng = np.random.default_rng(rng_seed)
    rows = []
    for qk, gqa, swa, short in itertools.product([0, 1], repeat=4):
        on = dict(qk_norm=qk, gqa=gqa, swa=swa, short_ctx=short)
        name = f"{'LQK' if qk else 'pre'}_{8 if gqa else 32}kv_{'4k' if short else '8k'}{'_SWA' if swa else ''}"
        for s in range(seeds):
            rows.append(
                dict(
                    run=f"{name}_s{s}" if seeds > 1 else name,
                    swa=swa,
                    qk_norm="layerwise" if qk else "none",
                    norm="pre",
                    n_kv_heads=8 if gqa else 32,
                    n_heads=32,
                    pretrain_ctx=4096 if short else 8192,
                    seed=s,
                    init="G",
                    helmet=50 + sum(eff[f] * on[f] for f in FEATURES) + swa_gqa * swa * gqa + noise * rng.standard_normal(),
                    pretrain_loss=3.0 + 0.02 * sum(on.values()) + 0.05 * rng.standard_normal(),
                    base_helmet_8k=40 - 1.0 * sum(on.values()) + 3 * rng.standard_normal(),
                )
            )
    return pd.DataFrame(rows)


@pytest.fixture
def table():
    """The table generator, :func:`make_table`."""
    return make_table


def make_pool(root, seeds: int = 2):
    """A pool directory: results.csv with score-by-length and attention columns, one run named ``<script>``,
    one failed run in the table and one failed only in its status.json."""
    import json

    df = make_table(seeds=seeds, noise=1.0, swa_gqa=-4.0, rng_seed=7)
    rng = np.random.default_rng(0)
    qk = (df.qk_norm != "none").to_numpy()
    for length in (256, 512, 1024):
        df[f"ruler@{length}_pre"] = 80 - 20 * (length > 512) + rng.standard_normal(len(df))
        df[f"ruler@{length}_post"] = df.helmet + 20 - length / 100 + rng.standard_normal(len(df))
    df["attn_sink_rate"] = 0.5 - 0.3 * qk + 0.02 * rng.standard_normal(len(df))
    df["attn_entropy"] = 2 + 0.5 * qk + 0.05 * rng.standard_normal(len(df))
    df["state"], df["error"] = "done", ""
    df.loc[0, "run"] = "<script>alert('x')</script>"
    df.loc[4, "run"] = "price_$x$_run"  # would be a mathtext formula in matplotlib labels
    df.loc[1, ["state", "error", "helmet"]] = ["failed", "OOM in <b>extend</b>", np.nan]
    root.mkdir(parents=True, exist_ok=True)
    df.to_csv(root / "results.csv", index=False)
    status = root / "runs" / df.run[2] / "status.json"
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"state": "failed", "error": "NaN loss", "stage": "eval"}))
    return root


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    """A pool directory from :func:`make_pool`, shared by a module's tests."""
    return make_pool(tmp_path_factory.mktemp("pool") / "pool")
