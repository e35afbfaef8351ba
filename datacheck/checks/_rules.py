"""What to check on one column: the plan a schema (or the defaults) compiles to.

A :class:`ColumnRules` is backend-neutral data; the NumPy body in :mod:`._numpy` and the torch
body in ``datacheck.torch`` both execute it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from datacheck.checks._registry import FP16_MAX, Severity


@dataclass(frozen=True)
class Bound:
    """A magnitude bound: ``|x| > max_abs`` is a finding under ``check``."""

    max_abs: float
    check: str = "extreme"
    severity: Severity = Severity.WARNING


@dataclass(frozen=True)
class Range:
    """An interval bound; either side may be open (None)."""

    check: str
    severity: Severity
    min: float | None = None
    max: float | None = None
    include_min: bool = True
    include_max: bool = True


@dataclass(frozen=True)
class Allowed:
    """A set-membership rule: ``isin`` (values must be in) or ``notin``."""

    check: str
    severity: Severity
    values: tuple[Any, ...]
    negate: bool = False


@dataclass(frozen=True)
class ColumnRules:
    """Everything datacheck runs on one column, per value (element by element for lists)."""

    nan: Severity | None = Severity.ERROR
    inf: Severity | None = Severity.ERROR
    null: Severity | None = None
    bounds: tuple[Bound, ...] = ()
    ranges: tuple[Range, ...] = ()
    allowed: tuple[Allowed, ...] = ()
    dtype: str | None = None
    """Expected Arrow-compatible dtype name from the schema (``schema`` finding on mismatch)."""
    pandas_checks: tuple[Any, ...] = field(default=())
    """pandera ``Check`` objects with no Arrow body; run on the batch as pandas."""


def default_rules(is_float: bool, is_numeric: bool) -> ColumnRules:
    """Rules used without a schema: NaN/Inf errors, fp16 overflow and numeric nulls warnings."""
    return ColumnRules(
        null=Severity.WARNING if is_numeric else None,
        bounds=(Bound(FP16_MAX),) if is_float else (),
    )
