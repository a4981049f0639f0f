"""Score the transfer design search by its committed rule and write the record (docs/results/transfer/rule.md).

Each training setup is a pool run (``archpool run bench/pools/transfer/<setup>.yaml``) in ``out/transfer-<setup>``;
each is read with the rule's five measures. For every design this writes the transfer score with its interval,
eligibility (every run mastered its own length), compute (node-minutes from the pool's event log) and the per-feature
standardised effects at the paper's 64K against the paper's, then applies the rule::

    .venv/bin/python scripts/transfer_search.py demo samedist hilr deep wide

writes ``docs/results/transfer/search.csv``, ``docs/results/transfer/search.md`` and each setup's results table
(``docs/results/transfer/<setup>-results.csv``), from which ``archpool transfer`` recomputes any row.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

from archpool.analysis.carry import CARRY_FEATURES, carry_summary
from archpool.analysis.table import default_short_ctx, load_results
from archpool.axes import FEATURE_NAMES

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "transfer"
TIE = 0.01  # designs within this of the best lower bound are broken by compute

# the rule's five measures: (name, column at the longest length, the four pool lengths)
MEASURES = (
    ("acc@ext12", "mqar_rebind_acc@1024[d>512]#ext12", (128, 256, 512, 1024)),
    ("lp@ext12", "mqar_rebind_lp@1024[d>512]#ext12", (128, 256, 512, 1024)),
    ("acc@ext0", "mqar_rebind_acc@1024[d>512]#ext0", (128, 256, 512, 1024)),
    ("lp@ext0", "mqar_rebind_lp@1024[d>512]#ext0", (128, 256, 512, 1024)),
    ("acc@ext12x4", "mqar_rebind_acc@4096[d>2048]#ext12", (512, 1024, 2048, 4096)),
)


def node_minutes(pool_dir: Path, runs: set[str] | None = None) -> float:
    """The compute a pool's run took (of ``runs`` only, when given): the sum over its stages of their wall
    time, in minutes."""
    start: dict[str, float] = {}
    total = 0.0
    for line in (pool_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if runs is not None and e.get("run") not in runs:
            continue
        if e.get("kind") == "start":
            start[e["node"]] = e["t"]
        elif e.get("kind") == "done" and e.get("node") in start:
            total += e["t"] - start.pop(e["node"])
    return total / 60


def score_setup(setup: str, out: Path) -> list[dict]:
    pool_dir = out / f"transfer-{setup}"
    df = load_results(pool_dir)
    short = default_short_ctx(df)
    mastered = pd.to_numeric(df["mastered"], errors="coerce")
    eligible = bool((mastered == 1).all())
    minutes = node_minutes(pool_dir)
    RECORD.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pool_dir / "results.csv", RECORD / f"{setup}-results.csv")
    rows = []
    for name, column, lengths in MEASURES:
        c = carry_summary(df, column, short, lengths=lengths, keep_unmastered=True)  # mastery is judged apart: eligibility
        g = c["groups"][0] if c else None
        row = {
            "design": f"{setup}/{name}",
            "setup": setup,
            "measure": name,
            "column": column,
            "lengths": "/".join(map(str, lengths)),
            "eligible": eligible,
            "mastery_min": float(pd.to_numeric(df["mastery_acc"], errors="coerce").min()),
            "node_minutes": round(minutes, 1),
            "score": g["score"] if g else None,
            "ci_lo": g["ci95"][0] if g else None,
            "ci_hi": g["ci95"][1] if g else None,
            "resolved_8x": len(g["resolved_8x"]) if g else 0,
            "resolved_features": " ".join(g["resolved_8x"]) if g else "",
        }
        for cell in g["cells"] if g else []:
            if cell["multiple"] == 8:
                row[f"z_{cell['feature']}"] = cell["z"]
                row[f"paper_z_{cell['feature']}"] = cell["paper_z"]
                row[f"effect_{cell['feature']}"] = cell["effect"]
                row[f"ci_{cell['feature']}"] = cell["ci95"]
        rows.append(row)
    return rows


def choose(rows: list[dict]) -> dict | None:
    """The rule: the eligible design with the highest lower bound; ties within TIE broken by compute."""
    ok = [r for r in rows if r["eligible"] and r["ci_lo"] is not None]
    if not ok:
        return None
    best = max(r["ci_lo"] for r in ok)
    return min((r for r in ok if r["ci_lo"] >= best - TIE), key=lambda r: (r["node_minutes"], -r["ci_lo"]))


def _fmt(v: float | None, spec: str = "+.2f") -> str:
    return "—" if v is None or v != v else format(v, spec)


def write_record(rows: list[dict], chosen: dict | None) -> None:
    frame = pd.DataFrame(rows)
    frame.drop(columns=[c for c in frame.columns if c.startswith("ci_") and c not in ("ci_lo", "ci_hi")]).to_csv(
        RECORD / "search.csv", index=False
    )
    lines = [
        "# The transfer design search: every design and its score",
        "",
        "> Generated by `scripts/transfer_search.py` from the setups' pool runs; the rule is",
        "> [rule.md](rule.md). Each setup's results table is beside this page",
        "> (`<setup>-results.csv`): `archpool transfer docs/results/transfer/<setup>-results.csv --measure COLUMN",
        "> --lengths N,N,N,N` recomputes a row.",
        "",
        "| design | eligible (min mastery) | node-min | transfer score [95% CI] | resolved at ×8 (paper's direction) | "
        + " | ".join(f"{FEATURE_NAMES[f]} ×8 z (paper)" for f in CARRY_FEATURES)
        + " |",
        "|---|---|---:|---|---|" + "---|" * len(CARRY_FEATURES),
    ]
    for r in sorted(rows, key=lambda r: -(r["ci_lo"] if r["ci_lo"] is not None else -9)):
        mark = " **(chosen)**" if chosen is not None and r["design"] == chosen["design"] else ""
        zs = " | ".join(f"{_fmt(r.get(f'z_{f}'))} ({_fmt(r.get(f'paper_z_{f}'))})" for f in CARRY_FEATURES)
        lines.append(
            f"| {r['design']}{mark} | {'yes' if r['eligible'] else 'no'} ({r['mastery_min']:.3f}) | {r['node_minutes']:.0f} | "
            f"{_fmt(r['score'])} [{_fmt(r['ci_lo'])}, {_fmt(r['ci_hi'])}] | {r['resolved_8x']} of 4 "
            f"{('(' + ', '.join(FEATURE_NAMES[f] for f in r['resolved_features'].split()) + ')') if r['resolved_features'] else ''} | {zs} |"
        )
    lines += [
        "",
        "Each setup's pool and the scoring, as run (2 cores, `--jobs 2`):",
        "",
        "```bash",
        *(f".venv/bin/archpool run bench/pools/transfer/{s}.yaml --jobs 2" for s in dict.fromkeys(r["setup"] for r in rows)),
        f".venv/bin/python scripts/transfer_search.py {' '.join(dict.fromkeys(r['setup'] for r in rows))}",
        "```",
        "",
        "Node-minutes are the sum of the setup's stage wall times on 2 cores running two jobs, some of it beside other",
        "CPU work: a guide to relative cost, not a benchmark.",
        "",
    ]
    if chosen is None:
        lines.append("No design is eligible: the rule chooses none.")
    else:
        lines.append(
            f"**Chosen by the rule:** `{chosen['design']}` (lower bound {_fmt(chosen['ci_lo'])}; measure "
            f"`{chosen['column']}` at {chosen['lengths']} tokens)."
        )
    (RECORD / "search.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "setups", nargs="+", help="training setups (bench/pools/transfer/<setup>.yaml), run into OUT/transfer-<setup>"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "out", help="where the pools ran (default: out/)")
    args = ap.parse_args()
    rows = [row for setup in args.setups for row in score_setup(setup, args.out)]
    chosen = choose(rows)
    write_record(rows, chosen)
    print((RECORD / "search.md").read_text())


if __name__ == "__main__":
    main()
