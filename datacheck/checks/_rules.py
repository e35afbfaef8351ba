"""What to check on one column: the plan a schema (or the defaults) compiles to.

A :class:`ColumnRules` is backend-neutral data; the NumPy body in :mod:`._numpy` and the torch
body in ``datacheck.torch`` both execute it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
    ignore_na: bool = True
    """pandera's ``ignore_na``: False makes a null or NaN fail the check too."""


@dataclass(frozen=True)
class Allowed:
    """A set-membership rule: ``isin`` (values must be in) or ``notin``."""

    check: str
    severity: Severity
    values: tuple[Any, ...]
    negate: bool = False
    ignore_na: bool = True
    """pandera's ``ignore_na``: False makes a null or NaN fail the check too."""


ZSCORE_MAX = 6.0
"""Default z-score bound of ``reference_stats``: beyond it a value is ``extreme``."""


def _stat(stats: Mapping[str, Any], key: str, default: float, positive: bool = True) -> float:
    """A numeric statistic of a schema check, its default when absent (None)."""
    value = stats.get(key)
    if value is None:
        return default
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {value!r}") from None
    if math.isnan(value) or (positive and not value > 0):
        raise ValueError(f"{key} must be {'> 0' if positive else 'a number'}, got {value!r}")
    return value


@dataclass(frozen=True)
class Reference:
    """Reference statistics of a column (``reference_stats``) and the ``drift`` thresholds.

    A shard drifts when its mean moves more than ``max_mean_shift`` reference standard
    deviations, its std is off by more than a factor ``max_std_ratio``, it is constant where the
    reference varies, or it is all null.
    """

    mean: float
    std: float
    zscore_max: float = ZSCORE_MAX
    """Value-level bound: ``|x - mean| > zscore_max * std`` is ``extreme`` (``.inf``: off)."""
    max_mean_shift: float = 3.0
    max_std_ratio: float = 3.0
    severity: Severity = Severity.ERROR

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any], severity: Severity) -> Reference:
        """Build from a pandera check's statistics (missing thresholds take the defaults)."""
        if stats.get("mean") is None or stats.get("std") is None:
            raise ValueError("reference_stats needs both mean and std")
        std = _stat(stats, "std", 0.0, positive=False)
        if not 0 <= std < math.inf:
            raise ValueError(f"std must be finite and >= 0, got {std!r}")
        return cls(
            mean=_stat(stats, "mean", 0.0, positive=False),
            std=std,
            zscore_max=_stat(stats, "zscore_max", ZSCORE_MAX),
            max_mean_shift=_stat(stats, "max_mean_shift", cls.max_mean_shift),
            max_std_ratio=_stat(stats, "max_std_ratio", cls.max_std_ratio),
            severity=severity,
        )

    def zscore_range(self) -> Range | None:
        """The value-level ``extreme`` interval, or None (constant reference, or bound off)."""
        if not self.std > 0 or math.isinf(self.zscore_max):
            return None
        half = self.zscore_max * self.std
        return Range("extreme", Severity.WARNING, self.mean - half, self.mean + half)


@dataclass(frozen=True)
class Normalized:
    """A column that should be standardised (``normalized``): mean ~ ``mean``, std ~ ``std``.

    Each shard whose mean is more than ``max_mean_shift * std`` from ``mean``, or whose std is
    off by more than a factor ``max_std_ratio``, is an ``unnormalized`` finding.
    """

    mean: float = 0.0
    std: float = 1.0
    max_mean_shift: float = 0.5
    max_std_ratio: float = 2.0
    severity: Severity = Severity.ERROR

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any], severity: Severity) -> Normalized:
        """Build from a pandera check's statistics (missing ones take the defaults)."""
        return cls(
            mean=_stat(stats, "mean", cls.mean, positive=False),
            std=_stat(stats, "std", cls.std),
            max_mean_shift=_stat(stats, "max_mean_shift", cls.max_mean_shift),
            max_std_ratio=_stat(stats, "max_std_ratio", cls.max_std_ratio),
            severity=severity,
        )


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
    reference: Reference | None = None
    """Reference statistics for the column-level ``drift`` checks (``reference_stats``)."""
    normalized: Normalized | None = None
    """The column should be standardised (``unnormalized`` checks)."""


def default_rules(
    is_float: bool, is_numeric: bool, null: Severity | None = Severity.ERROR
) -> ColumnRules:
    """Rules used without a schema: NaN/Inf errors, fp16 overflow a warning, and a null in a
    numeric column at ``null`` (an error by default: a loader turns it into NaN)."""
    return ColumnRules(
        null=null if is_numeric else None,
        bounds=(Bound(FP16_MAX),) if is_float else (),
    )


def range_holds(rules: ColumnRules, lo: Any, hi: Any, is_float: bool) -> bool:
    """True when every value in ``[lo, hi]`` (a column's min and max) passes the bounds and
    ranges.  Shared by the NumPy and torch bodies for their one-pass clean check; a NaN
    min/max (NaN propagates through both) fails it.  ``lo``/``hi`` keep the data's type (a
    NumPy scalar) so a float32 value at a bound compares as in the exact pass and in pandas."""
    if is_float and not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    if any(float(lo) < -b.max_abs or float(hi) > b.max_abs for b in rules.bounds):
        return False  # magnitude bounds exactly (float32 65520 > the fp16 bound 65519.99...)
    for r in rules.ranges:
        if r.min is not None and (lo < r.min or (lo == r.min and not r.include_min)):
            return False
        if r.max is not None and (hi > r.max or (hi == r.max and not r.include_max)):
            return False
    return True
