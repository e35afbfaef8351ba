"""What every subcommand shares: the exit codes and an argparse that raises instead of exiting."""

from __future__ import annotations

import argparse
import enum
from typing import NoReturn

from datacheck.errors import UsageError

__all__ = ["ExitCode", "Parser"]


class ExitCode(enum.IntEnum):
    """The process exit codes of every ``datacheck`` command."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130
    TERMINATED = 143


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")
