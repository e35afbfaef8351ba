"""The per-sample body for tensors: ``[n, k]`` rows, a cheap prefilter, exact checks on the rest.

Most samples are clean, so the exact checks (:func:`check_values`: NaN/Inf/bound/range masks,
several passes) run only on rows a one-pass prefilter cannot clear:

* float32/float64 without range rules: the per-row sum of squares (``einsum``, one pass).  A
  row whose sum of squares is finite and below ``bound**2`` has every value finite and within
  the bound (the sum of non-negative terms never rounds below its largest term); other rows go
  on to the next filter;
* otherwise: per-row min and max, which propagate NaN and bound every value.

The result is identical to running :func:`check_values` on the whole array (a test pins it).
"""

from __future__ import annotations

import numpy as np

from datacheck.checks._numpy import Hits, RowMap, check_values
from datacheck.checks._rules import ColumnRules

MIN_ROW = 16
"""Rows shorter than this are checked flat: per-row reductions do not pay off."""


def sample_hits(x: np.ndarray, rules: ColumnRules) -> list[Hits]:
    """Findings of ``rules`` on ``x`` (``[n, k]``), one row per sample."""
    n, k = x.shape
    if x.dtype == np.float16:  # exact in float32, and bounds above 65504 stay representable
        x = x.astype(np.float32)
    is_float = x.dtype.kind == "f"
    if not is_float and not (rules.bounds or rules.ranges or rules.allowed):
        return []  # integers with nothing to check
    if k < MIN_ROW or rules.allowed:
        return check_values(x.reshape(-1), None, RowMap(n, stride=k), rules)
    dirty = _dirty_rows(x, rules)
    if dirty.size == 0:
        return []
    if dirty.size == n:
        return check_values(x.reshape(-1), None, RowMap(n, stride=k), rules)
    rowmap = RowMap(n, fn=lambda idx: dirty[idx // k])
    return check_values(x[dirty].reshape(-1), None, rowmap, rules)


def _dirty_rows(x: np.ndarray, rules: ColumnRules) -> np.ndarray:
    """Sorted indices of the rows that may hold a finding."""
    if x.dtype in (np.float32, np.float64) and not rules.ranges:
        limit = min((b.max_abs for b in rules.bounds), default=np.inf)
        squares = np.einsum("ij,ij->i", x, x)
        clear = np.isfinite(squares) & (squares < _threshold(limit, x.dtype))
        candidates = np.flatnonzero(~clear)
        if candidates.size * 4 <= len(x):
            return (
                candidates[_minmax_dirty(x[candidates], rules)] if candidates.size else candidates
            )
    return _minmax_dirty(x, rules)


def _threshold(limit: float, dtype: np.dtype) -> float:
    """A value ``t`` of ``dtype`` with ``|v| > limit`` => ``fl(v*v) >= t`` (rounding-safe)."""
    square = limit * limit
    if not np.isfinite(square) or square >= float(np.finfo(dtype).max):
        return np.inf  # then any |v| > limit squares to Inf, which is not "clear"
    return float(np.nextafter(dtype.type(square), dtype.type(0)))


def _minmax_dirty(x: np.ndarray, rules: ColumnRules) -> np.ndarray:
    """Rows whose min or max breaks a rule (NaN propagates; bounds and ranges are monotone)."""
    lo, hi = x.min(axis=1), x.max(axis=1)
    pairs = np.stack([lo, hi], axis=1).reshape(-1)
    hits = check_values(pairs, None, RowMap(len(x), stride=2), rules)
    if not hits:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate([h.rows for h in hits]))
