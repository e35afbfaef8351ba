"""What every subcommand shares: the exit codes and an argparse that raises instead of exiting."""

from __future__ import annotations

import argparse
import difflib
import enum
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from datacheck.errors import UsageError

__all__ = [
    "EXIT_CODES",
    "ExitCode",
    "Parser",
    "add_show_argument",
    "exit_codes_epilog",
    "non_negative_float",
    "non_negative_int",
    "positive_int",
    "unrecognized",
]


class ExitCode(enum.IntEnum):
    """The process exit codes of every ``datacheck`` command."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130
    TERMINATED = 143


EXIT_CODES = {
    ExitCode.OK: "success: nothing at or above the gate",
    ExitCode.FINDINGS: "findings at or above the gate",
    ExitCode.USAGE: "usage or input error (one line on stderr: what, where, the fix)",
    ExitCode.INTERNAL: "internal error, a bug in datacheck (stderr names the traceback's log file)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.TERMINATED: "terminated (SIGTERM)",
}
"""What each exit code means (each subcommand says what its 1 means: ``EXIT_1``)."""


def exit_codes_epilog(exit_1: str | None = EXIT_CODES[ExitCode.FINDINGS]) -> str:
    """The ``exit codes:`` block every ``--help`` ends with (``exit_1=None``: 1 is unused)."""
    lines = ["exit codes:"]
    for code, text in EXIT_CODES.items():
        if code == ExitCode.FINDINGS:
            if exit_1 is None:
                continue
            text = exit_1
        lines.append(f"  {int(code):<4} {text}")
    return "\n".join(lines)


class _Formatter(argparse.HelpFormatter):
    """Wraps prose paragraphs; keeps indented lines (tables, lists) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if any(line[:1].isspace() for line in lines[1:]) or para.endswith(":"):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(super()._fill_text(para, width, indent))
        return "\n\n".join(out)


_INVALID_CHOICE = re.compile(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting; errors suggest the closest
    choice, every ``--help`` ends with the exit codes, and a description may be built only
    when help is shown (``late_description=``: e.g. the list of registered formats)."""

    def __init__(
        self,
        *args: Any,
        late_description: Callable[[], str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("epilog", exit_codes_epilog())
        super().__init__(*args, **kwargs)
        self._late_description = late_description

    def format_help(self) -> str:
        if self._late_description is not None:
            self.description = self._late_description()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match:
            arg, value, choices = match.groups()
            names = [c.strip().strip("'") for c in choices.split(",")]
            close = difflib.get_close_matches(value, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = "command" if arg == "COMMAND" else f"argument {arg}"
            message = f"{what}: invalid choice {value!r}{hint}; choose from {', '.join(names)}"
        raise UsageError(f"{message} (see '{self.prog} --help')")


def unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> UsageError:
    """The error for arguments no option takes, naming the closest option of ``parser``."""
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    parts = []
    for arg in extras:
        flag = arg.split("=", 1)[0]
        close = difflib.get_close_matches(flag, options, n=1) if flag.startswith("-") else []
        parts.append(f"{arg!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    noun = "argument" if len(parts) == 1 else "arguments"
    return UsageError(f"unrecognized {noun} {', '.join(parts)} (see '{parser.prog} --help')")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def add_show_argument(parser: argparse.ArgumentParser) -> None:
    """``--show N``: sample findings per check under the summary table."""
    from datacheck.report._text import SHOW

    parser.add_argument(
        "--show",
        type=non_negative_int,
        default=SHOW,
        metavar="N",
        help="show the first N findings of each check (file:row, column, value or message) "
        "under the table; 0 hides them (default: %(default)s)",
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (the error names the flag the user typed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
