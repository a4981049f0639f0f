"""The scale ladder of the chosen transfer design: each feature's standardised effect against model width.

Each rung is a pool run of the chosen design's single-feature arms at one d_model (heads of 16); their results
tables are read together, one group per width (:func:`archpool.analysis.carry.transfer_scores`)::

    .venv/bin/python scripts/transfer_ladder.py --measure 'mqar_rebind_acc@1024[d>512]#ext12' \\
        --lengths 128,256,512,1024 out/transfer-demo out/transfer-wide out/transfer-ladder

writes docs/results/transfer/ladder.{md,csv,png} and the evidence the report reads
(archpool/analysis/transfer_ladder.json): per feature and width the effect at the paper's 64K with its
interval, whether it has the paper's sign and is resolved, and the smallest width from which it is.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from archpool.analysis.carry import CARRY_FEATURES, transfer_scores
from archpool.analysis.table import default_short_ctx, load_results
from archpool.axes import FEATURE_NAMES
from archpool.columns import lower_is_better

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "transfer"
EVIDENCE = ROOT / "archpool" / "analysis" / "transfer_ladder.json"
sys.path.insert(0, str(ROOT / "scripts"))
from transfer_search import node_minutes  # noqa: E402


def rung_cost(pool_dir: Path, width: int) -> tuple[float, int]:
    """Node-minutes of one width's runs in a pool directory (its event log), and how many runs."""
    df = load_results(pool_dir)
    runs = set(df.loc[pd.to_numeric(df["d_model"], errors="coerce") == width, "run"])
    return node_minutes(pool_dir, runs), len(runs)


def _pool_file(pool_dir: Path) -> str:
    """The pool file of a rung's output directory ``out/transfer-NAME``: ``NAME.yaml`` under bench/pools/transfer/."""
    return pool_dir.name.removeprefix("transfer-") + ".yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pools", nargs="+", type=Path, help="pool directories whose runs form the rungs (any widths)")
    ap.add_argument("--measure", required=True, help="the chosen design's column at the longest length")
    ap.add_argument("--lengths", required=True, help="the four pool lengths for the paper's 8K/16K/32K/64K")
    ap.add_argument("--design", required=True, help="the chosen design's name (docs/results/transfer/search.md)")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    from archpool.analysis.carry import Measure

    measure = Measure.of(args.measure)
    cols = [measure.column(n) for n in lengths]
    tables = [load_results(p) for p in args.pools]
    df = pd.concat(tables, ignore_index=True)
    df = df.drop_duplicates(["run", "d_model"], keep="first")  # a run at one width read from two pools counts once
    df["run"] = [f"{r}@d{int(d)}" for r, d in zip(df["run"], df["d_model"])]
    df["arch"] = [f"{a}@d{int(d)}" for a, d in zip(df["arch"], df["d_model"])]
    scores = transfer_scores(df, cols, default_short_ctx(df), sign=-1.0 if lower_is_better(args.measure) else 1.0)
    costs: dict[int, tuple[float, int]] = {}
    for p, t in zip(args.pools, tables):
        for w in sorted(set(pd.to_numeric(t["d_model"], errors="coerce").dropna().astype(int))):
            m, n = rung_cost(p, w)
            if n:
                costs[w] = (m, n)
    widths_of = pd.to_numeric(df["d_model"], errors="coerce")
    mastery = {
        int(w): (float(g["mastery_acc"].min()), int((g["mastered"].astype(str).isin(["1", "1.0", "True"])).sum()), len(g))
        for w, g in df.assign(_w=widths_of).groupby("_w")
    }
    rows = []
    for s in scores:
        width = int(next(g.split("=")[1] for g in s.group if g.startswith("d_model=")))
        for c in s.cells:
            if c["multiple"] != 8:
                continue
            lo, hi = c["ci95"]
            sd = c["effect"] / c["z"] if c["z"] else None
            resolved = (
                lo is not None and hi is not None and ((c["paper_effect"] < 0 and hi < 0) or (c["paper_effect"] > 0 and lo > 0))
            )
            opposite = (
                lo is not None and hi is not None and ((c["paper_effect"] < 0 and lo > 0) or (c["paper_effect"] > 0 and hi < 0))
            )
            rows.append(
                {
                    "d_model": width,
                    "feature": c["feature"],
                    "effect": c["effect"],
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "z": c["z"],
                    "z_lo": lo / sd if sd and lo is not None else None,
                    "z_hi": hi / sd if sd and hi is not None else None,
                    "paper_z": c["paper_z"],
                    "paper_sign_resolved": resolved,
                    "opposite_resolved": opposite,
                    "transfer_score": s.score,
                    "score_lo": s.ci95[0],
                    "score_hi": s.ci95[1],
                    "node_minutes": round(costs.get(width, (float("nan"), 0))[0], 1),
                    "runs": costs.get(width, (0, 0))[1],
                }
            )
    table = pd.DataFrame(rows)
    table = table.assign(_order=table.feature.map(CARRY_FEATURES.index)).sort_values(["_order", "d_model"]).drop(columns="_order")
    RECORD.mkdir(parents=True, exist_ok=True)
    table.to_csv(RECORD / "ladder.csv", index=False)
    widths = sorted(int(w) for w in table["d_model"].unique())
    # the evidence: rungs whose every run masters its own length (a rung that cannot learn the task measures no extension)
    measured = [w for w in widths if w in mastery and mastery[w][1] == mastery[w][2]]
    smallest = {}
    for f in CARRY_FEATURES:
        t = table[table.feature == f].set_index("d_model")
        resolved = {w: w in t.index and bool(t.at[w, "paper_sign_resolved"]) for w in measured}
        # the smallest width from which every larger rung also resolves the paper's sign
        first = next((w for w in measured if all(resolved[v] for v in measured if v >= w)), None)
        smallest[f] = None if first is None else int(first)
    evidence = {
        "design": args.design,
        "measure": args.measure,
        "lengths": lengths,
        "widths": [int(w) for w in measured],
        "features": {
            f: {
                "smallest_width": smallest[f],
                "per_width": {
                    str(int(r.d_model)): {
                        "effect": r.effect,
                        "ci95": [r.ci_lo, r.ci_hi],
                        "z": r.z,
                        "paper_z": r.paper_z,
                        "paper_sign_resolved": bool(r.paper_sign_resolved),
                        "opposite_resolved": bool(r.opposite_resolved),
                    }
                    for r in table[table.feature == f].itertuples()
                    if int(r.d_model) in measured
                },
            }
            for f in CARRY_FEATURES
        },
    }
    EVIDENCE.write_text(json.dumps(evidence, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, f in enumerate(CARRY_FEATURES):
        t = table[table.feature == f]
        x = [w * (1 + 0.04 * (i - 2)) for w in t.d_model]
        ax.errorbar(x, t.z, yerr=[t.z - t.z_lo, t.z_hi - t.z], marker="o", capsize=3, label=FEATURE_NAMES[f], color=f"C{i}")
        ax.axhline(t.paper_z.iloc[0], color=f"C{i}", linestyle=":", linewidth=1)
    ax.axhline(0, color="k", linewidth=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_xlabel("d_model")
    ax.set_ylabel("standardised effect at 8x (SD between the arms)")
    ax.set_title(f"{args.design}: each feature's effect against width (dotted: the paper's, 7B)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RECORD / "ladder.png", dpi=110)
    lines = [
        "# The scale ladder: each feature's effect against width",
        "",
        "> Generated by `scripts/transfer_ladder.py` from the rungs' pool runs; the design is the one the rule chose",
        f"> ([search.md](search.md)): `{args.design}`, measure `{args.measure}` at {'/'.join(map(str, lengths))} tokens.",
        "",
        "```bash",
        *[f".venv/bin/archpool run bench/pools/transfer/{_pool_file(p)} --jobs 2" for p in args.pools],
        ".venv/bin/python scripts/transfer_ladder.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "```",
        "",
        "![standardised effect against d_model](ladder.png)",
        "",
        "| feature | d_model | effect at ×8 (95% CI, seeds pooled) | z (paper's z) | the paper's sign, resolved |",
        "|---|---:|---|---|---|",
    ]
    for r in table.itertuples():
        ci = "[—]" if pd.isna(r.ci_lo) or pd.isna(r.ci_hi) else f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]"
        lines.append(
            f"| {FEATURE_NAMES[r.feature]} | {r.d_model} | {r.effect:+.3f} {ci} | "
            f"{r.z:+.2f} ({r.paper_z:+.2f}) | {'yes' if r.paper_sign_resolved else 'opposite, resolved' if r.opposite_resolved else 'no'} |"
        )
    lines += [
        "",
        "| d_model | transfer score [95% CI] | runs | runs that master their own length (lowest accuracy) | node-minutes (2 cores, 2 jobs) |",
        "|---:|---|---:|---|---:|",
    ]
    for w in widths:
        r = table[table.d_model == w].iloc[0]
        low, n_ok, n = mastery.get(w, (float("nan"), 0, 0))
        ci = "[—]" if pd.isna(r.score_lo) or pd.isna(r.score_hi) else f"[{r.score_lo:+.2f}, {r.score_hi:+.2f}]"
        score = "—" if pd.isna(r.transfer_score) else f"{r.transfer_score:+.2f} {ci}"
        lines.append(f"| {w} | {score} | {r.runs} | {n_ok} of {n} ({low:.3f}) | {r.node_minutes} |")
    lines += [
        "",
        "A rung whose arms do not master their own length (the pool's mastery rule: accuracy ≥ 0.90 at it, overall",
        "and in every distance bucket) measures extension on models that never learned the task; the search's rule",
        "makes such a setup ineligible, and its effects are shown here but are not evidence of transfer.",
    ]
    lines += [
        "",
        "The smallest width from which a feature's effect has the paper's sign and is resolved at every larger rung (rungs whose runs all master their own length):",
        "",
    ]
    for f in CARRY_FEATURES:
        lines.append(
            f"- {FEATURE_NAMES[f]}: {('d_model ' + str(smallest[f])) if smallest[f] else 'none up to d_model ' + str(measured[-1])}"
        )
    (RECORD / "ladder.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
