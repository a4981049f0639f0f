"""``python -m bench``: run the maintained benchmarks and write one results file.

python -m bench --list                      # every maintained benchmark, one line each
python -m bench --only train head_loss      # some of them, full size
python -m bench --quick                     # all of them at tiny sizes (a smoke run, not a measurement)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.suite import LATEST, LATEST_QUICK, benchmarks, run_suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the maintained benchmarks and exit")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks that each runs, measures nothing")
    ap.add_argument("--out", type=Path, help=f"results file (default {LATEST}, with --quick {LATEST_QUICK})")
    args = ap.parse_args(argv)
    known = benchmarks()
    if args.list:
        width = max(map(len, known))
        for name, module in known.items():
            print(f"{name:<{width}}  {module.DESCRIPTION}")
        return 0
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        ap.error(f"--only: no benchmark named {', '.join(unknown)} (python -m bench --list names them)")
    out = args.out or (LATEST_QUICK if args.quick else LATEST)
    results = run_suite(list(args.only or known), args.quick, out)
    failed = [name for name in args.only or known if "error" in results[name]]
    print(f"results: {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
