"""The `archpool` command. Each pipeline stage registers its own subcommands; this file only wires them."""
from __future__ import annotations

import argparse
import importlib
import sys

# Stage modules that expose ``register(subparsers)``. Each registers parsers with
# ``set_defaults(func=handler)``, where ``handler(args) -> int`` imports heavy modules lazily.
COMMAND_MODULES = [
    "archpool.model.cli",
    "archpool.data.cli",
    "archpool.train.cli",
    "archpool.eval.cli",
    "archpool.attention.cli",
    "archpool.analysis.cli",
    "archpool.pool.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="archpool",
        description="Controlled architecture pools: pretrain, extend, evaluate and explain model families.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name or name.startswith(str(e.name) + "."):
                continue  # stage not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        default = getattr(args, "command", None)
        if default is None and "run" in parser._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
            return main(["run"])
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
