"""``python -m archpool.pool COMMAND``: the pool commands alone (run, demo, status, pool)."""
import argparse
import sys

from archpool.pool import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m archpool.pool")
    cli.register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(argv if argv is not None else sys.argv[1:] or ["run"])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
