"""The ``datacheck`` command line: argument parsing and exit codes only.

``main(argv) -> int`` is testable in-process.  Exit codes (:class:`ExitCode`): 0 clean,
1 findings at or above ``--fail-on``, 2 usage or input error, 3 internal error.  A
:class:`~datacheck.errors.DatacheckError` becomes one line on stderr, never a traceback.  Each
subcommand is one module here exposing ``add_parser(subparsers)``; the library work it calls
lives in the command modules (:mod:`datacheck._scan`, :mod:`datacheck._logs`, ...).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from datacheck._escape import printable
from datacheck.cli._base import ExitCode, Parser, exit_codes_epilog, unrecognized
from datacheck.errors import DatacheckError

_SUBCOMMAND_MODULES: tuple[str, ...] = (
    "datacheck.cli._scan",
    "datacheck.cli._demo",
    "datacheck.cli._infer",
    "datacheck.cli._logs",
    "datacheck.cli._report",
)
"""One module per subcommand, each exposing ``add_parser(subparsers)``."""

_EXIT_1: dict[str, str | None] = {
    "scan": "findings at or above --fail-on (beyond any --max-bad-fraction tolerance)",
    "report": "the scan it shows failed (its findings at or above the scan's --fail-on)",
    "logs": "the log shows an early warning, a loss spike, divergence or NaN (blips alone: 0)",
    "infer": None,
    "demo": None,
}
"""What exit code 1 means for each subcommand (None: never exits 1), shown in ``--help``."""

__all__ = ["ExitCode", "build_parser", "console_main", "main"]


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a pre-empted job, ``scancel``, a pod being evicted), unwound like Ctrl-C."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def build_parser() -> argparse.ArgumentParser:
    from datacheck._version import __version__

    parser = Parser(
        prog="datacheck",
        description="Keep bad data and numerical blow-ups from killing long training runs.",
    )
    parser.add_argument("--version", action="version", version=f"datacheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    for command, subparser in sub.choices.items():
        subparser.epilog = exit_codes_epilog(_EXIT_1.get(command, "findings"))
    parser.epilog = "\n\n".join(
        ["'datacheck COMMAND --help' shows each command's options.", exit_codes_epilog()]
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of exiting.

    SIGTERM is handled like Ctrl-C: the scan stops, local workers are shut down, and the
    journal and parts stay in ``--out`` for ``--resume``; the exit code is 143.
    """
    previous = _install_sigterm()
    args = argparse.Namespace()
    try:
        parser = build_parser()
        try:
            args, extras = parser.parse_known_args(argv)
        except SystemExit as exc:  # --help / --version
            return int(exc.code or 0)
        if extras:
            raise unrecognized(_subparser(parser, args.command), extras)
        return int(args.func(args))
    except DatacheckError as exc:
        print(f"datacheck: error: {printable(exc)}", file=sys.stderr)  # always one line
        return ExitCode.USAGE
    except _Terminated:
        print(f"datacheck: terminated (SIGTERM){_how_to_finish(args)}", file=sys.stderr)
        return ExitCode.TERMINATED
    except KeyboardInterrupt:
        print(f"datacheck: interrupted{_how_to_finish(args)}", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # e.g. `datacheck scan ... | head`
        return ExitCode.OK
    except BaseException as exc:  # noqa: BLE001 - a bug in datacheck (or a SystemExit from user code)
        print(f"datacheck: internal error: {_one_line(exc)}; {_crash_log(exc)}", file=sys.stderr)
        return ExitCode.INTERNAL
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _how_to_finish(args: argparse.Namespace) -> str:
    """For a stopped scan: where its finished work is kept and how to finish it."""
    if getattr(args, "command", None) != "scan" or getattr(args, "resume", None) is None:
        return ""
    again = "the same command" if args.resume else "the same command with --resume"
    return f"; the finished work is kept in {printable(str(args.out))}: rerun {again} to finish"


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def _one_line(exc: BaseException) -> str:
    text = printable(f"{type(exc).__name__}: {exc}")
    return text if len(text) <= 200 else text[:197] + "..."


def _crash_log(exc: BaseException) -> str:
    """Write the traceback to a log file and say where it is (or why it could not be written)."""
    import tempfile
    import time
    import traceback

    path = os.path.join(
        tempfile.gettempdir(), f"datacheck-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    )
    try:
        with open(path, "w") as fh:
            fh.write(f"datacheck {_version()} {' '.join(sys.argv)}\n")
            traceback.print_exception(exc, file=fh)
    except OSError as err:
        return f"this is a bug in datacheck (traceback not saved: {err.strerror})"
    return f"this is a bug in datacheck; the traceback is in {path}"


def _version() -> str:
    from datacheck._version import __version__

    return __version__


def _install_sigterm() -> Any:
    """Route SIGTERM to :func:`_on_sigterm` (main thread only; else leave it alone)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def console_main() -> NoReturn:
    sys.exit(main())
