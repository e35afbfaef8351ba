"""The one error tree of datacheck.

Checks never raise: they return findings.  Exceptions happen at the edges only, and all of
them derive from :class:`DatacheckError`::

    DatacheckError                 base; the CLI turns it into one stderr line and exit code 2
    ├── UsageError                 bad option or argument combination
    ├── SchemaError                schema missing, unreadable, or invalid (unknown check, bad value)
    ├── InputError                 input path missing or unreadable, nothing to scan
    └── BadSampleError             a guarded batch holds bad samples and on_bad='raise'

Third-party errors are mapped at the boundary with ``raise ... from exc``.  A data file that
cannot be read is *not* an error: it becomes a ``corrupt`` finding.
"""

from __future__ import annotations

__all__ = ["BadSampleError", "DatacheckError", "InputError", "SchemaError", "UsageError"]


class DatacheckError(Exception):
    """Base class: a message that says what, where, and the fix."""


class UsageError(DatacheckError):
    """A command-line option or API argument is invalid."""


class SchemaError(DatacheckError):
    """A schema cannot be loaded or declares something datacheck cannot run."""


class InputError(DatacheckError):
    """An input path does not exist or holds nothing to scan."""


class BadSampleError(DatacheckError):
    """A guarded batch holds bad samples; ``indices`` are their dataset indices."""

    def __init__(self, message: str, indices: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.indices = indices
