"""The `archpool` command: the command layer, above every stage. One module per stage
(``archpool.cli.<stage>``) registers that stage's subcommands; this file wires them and is the one
error boundary: archpool's own errors (a config field, an input file, a checkpoint) end as
one line naming what is wrong and exit code 2; anything else is a bug and keeps its traceback.
``--debug`` (or ``ARCHPOOL_DEBUG=1``) shows the traceback of every error."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys

from archpool.errors import CheckpointError, ConfigError, DataError

# Stage modules that expose ``register(subparsers)``. Each registers parsers with
# ``set_defaults(func=handler)``, where ``handler(args) -> int`` imports heavy modules lazily.
COMMAND_MODULES = [
    "archpool.cli.model",
    "archpool.cli.data",
    "archpool.cli.train",
    "archpool.cli.eval",
    "archpool.cli.attention",
    "archpool.cli.analysis",
    "archpool.cli.pool",
]
USER_ERRORS = (ConfigError, DataError, CheckpointError)
DEFAULT_COMMAND = "run"
SUBCOMMAND_DESTS = ("pool_command", "data_command", "model_command")  # named in the one-line error


def did_you_mean(word: str, choices, n: int = 3) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the choices closest to ``word`` (difflib), else ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class Parser(argparse.ArgumentParser):
    """argparse with did-you-mean suggestions for a mistyped choice (subcommands, ``choices=`` options).
    Subparsers are built with the parent's class, so every level suggests."""

    def _check_value(self, action: argparse.Action, value) -> None:
        if action.choices is not None and value not in action.choices:
            shown = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{did_you_mean(value, action.choices)} (choose from {shown})"
            )


class _Version(argparse.Action):
    """``--version``: computed only when asked (the git commit costs a subprocess)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from archpool.version import version_string

        print(version_string())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="archpool",
        description="Controlled architecture pools: pretrain, extend, evaluate and explain model families.",
    )
    parser.add_argument("--version", action=_Version, help="the archpool version (and git commit of a checkout)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.command is None:  # bare `archpool` (or `archpool --debug`): the default command
        args = parser.parse_args([*argv, DEFAULT_COMMAND])
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    debug = args.debug or os.environ.get("ARCHPOOL_DEBUG", "") not in ("", "0")
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        if debug:
            raise
        sub = next((getattr(args, k) for k in SUBCOMMAND_DESTS if getattr(args, k, None)), None)
        message = " ".join(str(e).split("\n"))  # one line, whatever the error quotes
        print(f"archpool {args.command}{' ' + sub if sub else ''}: error: {message}", file=sys.stderr)
        return 2
