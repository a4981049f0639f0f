"""The `archpool` command: the command layer, above every stage. One module per stage
(``archpool.cli.<stage>``) registers that stage's subcommands; this file wires them and is the one
error boundary: archpool's own errors (a config field, an input file, a checkpoint) end as
one line naming what is wrong and exit code 2; anything else is a bug and keeps its traceback.
``--debug`` (or ``ARCHPOOL_DEBUG=1``) shows the traceback of every error.

It is also the process boundary. SIGINT (Ctrl-C), SIGTERM and SIGHUP end a command with one line on
stderr and exit code 128 + the signal's number (130, 143, 129), after the command's own cleanup ran
(``archpool run`` stops its workers first). A closed or full stdout or stderr (``| head``,
``> /dev/full``) ends it quietly: exit code 141 for a closed pipe, 1 for another write error (named in
one line on stderr when stderr still works)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

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


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread the way SIGINT raises ``KeyboardInterrupt``, so every
    ``finally`` and interrupt handler on the way out (stopping workers, releasing locks) runs for them too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame) -> None:
    raise Interrupted(signum)


class OutputError(OSError):
    """A write to stdout or stderr failed: a closed pipe (``| head``), a full device (``> /dev/full``)."""

    def __init__(self, stream: str, error: OSError):
        super().__init__(error.errno, error.strerror)
        self.stream = stream


class _GuardedOutput:
    """``sys.stdout`` / ``sys.stderr`` for one command: a failed write or flush raises ``OutputError``
    naming the stream, so the boundary tells a broken output apart from any other ``OSError``. The
    failure is also kept (``failed``): code that swallows write errors (argparse's help, tqdm) does not
    hide from the boundary that output was lost."""

    def __init__(self, stream, name: str):
        self._stream, self._name = stream, name
        self.failed: OutputError | None = None

    def _error(self, e: OSError) -> OutputError:
        self.failed = self.failed or OutputError(self._name, e)
        return OutputError(self._name, e)

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as e:
            raise self._error(e) from e

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise self._error(e) from e

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _process_boundary() -> Iterator[None]:
    """For one command: stdout and stderr guarded, SIGTERM and SIGHUP raising ``Interrupted`` (in the
    main thread, and only where the signal is not ignored, e.g. under ``nohup``); restored after."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (
        s if s is None else _GuardedOutput(s, n) for s, n in ((sys.stdout, "stdout"), (sys.stderr, "stderr"))
    )
    saved = {}
    if threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
                saved[signum] = signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sys.stdout, sys.stderr = streams


def _say(line: str) -> None:
    """One line on stderr, if stderr still takes it."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _silence(stream) -> None:
    """Point a broken stream's descriptor at /dev/null, so the interpreter's last flush of what it
    still buffers does not fail again at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)


def _check_output() -> None:
    """Flush stdout, then raise the first write error either stream met, if any: a failure still in
    stdout's buffer, or one that the code writing swallowed, surfaces here, inside the boundary."""
    if sys.stdout is not None:
        sys.stdout.flush()
    for stream in (sys.stdout, sys.stderr):
        failed = getattr(stream, "failed", None)
        if failed is not None:
            raise failed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("ARCHPOOL_DEBUG", "") not in ("", "0")
    invoked: list[str] = []  # the command's name for the one-line messages, once parsed
    with _process_boundary():
        try:
            try:
                return _dispatch(argv, invoked)
            finally:
                _check_output()
        except KeyboardInterrupt as e:  # SIGINT, or SIGTERM / SIGHUP (Interrupted)
            if debug:
                raise
            signum = getattr(e, "signum", signal.SIGINT)
            name = " ".join(invoked) or "archpool"
            hint = "; finished stages are kept: run it again to resume" if invoked[1:2] == ["run"] else ""
            _say(f"{name}: interrupted by {signal.Signals(signum).name}{hint}")
            return 128 + signum
        except OutputError as e:  # a reader that went away is no error; a full disk is named where it can be
            _silence(sys.stdout if e.stream == "stdout" else sys.stderr)
            if e.stream == "stdout" and e.errno != errno.EPIPE:
                _say(f"{' '.join(invoked) or 'archpool'}: error: cannot write to stdout: {e.strerror}")
            return 128 + signal.SIGPIPE if e.errno == errno.EPIPE else 1


def _dispatch(argv: list[str], invoked: list[str]) -> int:
    """Parse ``argv`` and run the command it names; archpool's own errors end as one line and exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `archpool` (or `archpool --debug`): the default command
        args = parser.parse_args([*argv, DEFAULT_COMMAND])
    sub = next((getattr(args, k) for k in SUBCOMMAND_DESTS if getattr(args, k, None)), None)
    invoked[:] = ["archpool", *filter(None, [args.command, sub])]
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    debug = args.debug or os.environ.get("ARCHPOOL_DEBUG", "") not in ("", "0")
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        if debug:
            raise
        message = " ".join(str(e).split("\n"))  # one line, whatever the error quotes
        print(f"{' '.join(invoked)}: error: {message}", file=sys.stderr)
        return 2
