"""The NumPy body of the value checks: masks over a flat buffer, mapped back to rows.

Values arrive flat (a scalar column, or the child values of a list / fixed-size-list column, or
a tensor viewed as ``[n_samples, -1]``).  A :class:`RowMap` says which row each value belongs
to, so a bad element of an embedding vector is reported at the row that holds the vector.
Everything here is vectorised: no Python loop runs over rows or values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datacheck.checks._registry import Severity
from datacheck.checks._rules import Allowed, ColumnRules, Range, range_holds


@dataclass(frozen=True)
class RowMap:
    """Maps a flat value index to its row: identity, a fixed stride, or explicit parents."""

    n_rows: int
    stride: int = 1
    parents: Any = None
    """Indexable (array, or lazily computed) parent row of every value."""
    fn: Callable[[np.ndarray], np.ndarray] | None = None
    """General mapping (nested lists): value indices -> rows."""

    @property
    def identity(self) -> bool:
        return self.stride == 1 and self.parents is None and self.fn is None

    def rows(self, idx: np.ndarray) -> np.ndarray:
        if self.fn is not None:
            return self.fn(idx)
        if self.parents is not None:
            return self.parents[idx]
        if self.stride == 1:
            return idx
        return idx // self.stride


@dataclass
class Hits:
    """Bad values of one check in one column, grouped by row (rows ascending).

    ``rows`` are chunk-relative; ``counts`` the number of bad values in each row;
    ``values`` the first bad value of each row (float64), or None for nulls.
    """

    check: str
    severity: Severity
    rows: np.ndarray
    counts: np.ndarray
    values: np.ndarray | None

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def group_by_row(
    check: str, severity: Severity, mask: np.ndarray, rowmap: RowMap, values: np.ndarray | None
) -> Hits | None:
    """Turn a mask over flat values into per-row hits, or None when the mask is all False."""
    return group_indices(check, severity, np.flatnonzero(mask), rowmap, values)


def group_indices(
    check: str, severity: Severity, idx: np.ndarray, rowmap: RowMap, values: np.ndarray | None
) -> Hits | None:
    """Per-row hits from ascending flat value indices, or None when there are none."""
    if idx.size == 0:
        return None
    rows = rowmap.rows(idx)
    if rowmap.identity:
        firsts = np.arange(idx.size)
        counts = np.ones(idx.size, dtype=np.int64)
    else:
        # rows is non-decreasing: a new row starts wherever it changes.
        starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
        counts = np.diff(np.append(starts, idx.size)).astype(np.int64)
        firsts = starts
        rows = rows[starts]
    with np.errstate(invalid="ignore"):  # a signalling NaN (a damaged file) sets the flag
        first_vals = None if values is None else values[idx[firsts]].astype(np.float64, copy=False)
    return Hits(check, severity, rows.astype(np.int64, copy=False), counts, first_vals)


def _quick_clean(values: np.ndarray, rules: ColumnRules, minmax: Any = None) -> bool:
    """One cheap pass (min/max, which propagate NaN) proving there is nothing to find."""
    if values.size == 0:
        return True
    if rules.allowed:
        return False
    lo, hi = minmax if minmax is not None else (values.min(), values.max())
    if values.dtype.kind == "f":  # compare in the data's precision, as the exact pass does
        lo, hi = values.dtype.type(lo), values.dtype.type(hi)
    return range_holds(rules, lo, hi, values.dtype.kind == "f")


def _range_mask(values: np.ndarray, r) -> np.ndarray:
    bad = np.zeros(values.shape, dtype=bool)
    if r.min is not None:
        bad |= values < r.min if r.include_min else values <= r.min
    if r.max is not None:
        bad |= values > r.max if r.include_max else values >= r.max
    return bad


class _Sites:
    """Bad flat-value indices per check: one check flagging a value twice (two overlapping
    ranges, a z-score bound and ``max_abs``) is one site; an error wins over a warning."""

    def __init__(self) -> None:
        self.idx: dict[str, dict[Severity, list[np.ndarray]]] = {}

    def add(self, check: str, severity: Severity, idx: np.ndarray) -> None:
        if idx.size:
            self.idx.setdefault(check, {}).setdefault(severity, []).append(idx)

    def hits(self, rowmap: RowMap, values: np.ndarray | None) -> list[Hits]:
        out = []
        for check, by_sev in self.idx.items():
            taken = np.empty(0, dtype=np.int64)
            for sev in (Severity.ERROR, Severity.WARNING):
                parts = by_sev.get(sev)
                if not parts:
                    continue
                idx = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
                if taken.size:
                    idx = np.setdiff1d(idx, taken, assume_unique=True)
                taken = np.union1d(taken, idx) if taken.size else idx
                h = group_indices(check, sev, idx, rowmap, values)
                if h is not None:
                    out.append(h)
        return out


def _magnitude_hits(
    values: np.ndarray, valid: np.ndarray | None, rules: ColumnRules, is_float: bool, sites: _Sites
) -> None:
    """``nan``, ``inf`` and the magnitude bounds from one pass: what is not within the smallest
    bound (NaN and Inf included) picks the candidates, which are few; each check then looks
    at those only."""
    want_nan = is_float and rules.nan is not None
    want_inf = is_float and rules.inf is not None
    if not rules.bounds and not want_inf:
        if want_nan and rules.nan is not None:
            sites.add("nan", rules.nan, _valid_only(np.flatnonzero(np.isnan(values)), valid))
        return
    if rules.bounds:
        lim = _below(values.dtype, min(b.max_abs for b in rules.bounds))
        inside = values <= lim  # NaN compares False: a candidate (no |x| temporary: ~2x faster)
        inside &= values >= -lim
        cand = np.flatnonzero(np.logical_not(inside, out=inside))
    else:
        cand = np.flatnonzero(~np.isfinite(values))
    cand = _valid_only(cand, valid)
    if cand.size == 0:
        return
    picked = values[cand]
    if is_float:
        nan = np.isnan(picked)
        if want_nan and rules.nan is not None:
            sites.add("nan", rules.nan, cand[nan])
        if nan.any():
            keep = ~nan
            cand, picked = cand[keep], picked[keep]
    infinite = np.isinf(picked) if is_float else np.zeros(cand.size, dtype=bool)
    if want_inf and rules.inf is not None:
        sites.add("inf", rules.inf, cand[infinite])
    for b in rules.bounds:
        over = np.abs(picked) > _below(values.dtype, b.max_abs)
        sites.add(b.check, b.severity, cand[~infinite & over])


def _valid_only(idx: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    return idx if valid is None else idx[valid[idx]]


def _below(dtype: np.dtype, bound: float) -> Any:
    """The largest value of a float ``dtype`` that is <= ``bound``: ``x > bound`` exactly.

    A Python float compared with a float32/float16 array is rounded to the array's type
    first (NEP 50), so ``float32(65520.0) > 65519.99999999999`` is False: the fp16 overflow
    bound would let exactly 65520 through.  Integer arrays compare in float64 already.
    """
    if dtype.kind != "f":
        return bound
    b = dtype.type(bound)
    return np.nextafter(b, dtype.type(-np.inf)) if float(b) > bound else b


def _rule_mask(
    values: np.ndarray, valid: np.ndarray | None, rule: Range | Allowed, finite: np.ndarray | None
) -> np.ndarray:
    """A range or membership rule's failures, with pandera's ``ignore_na``: by default a
    null or NaN is skipped; with ``ignore_na: false`` it is compared as pandas compares it
    (it fails, except ``notin``/``not_equal_to``: NaN is no forbidden value).  Inf is skipped
    by ranges (it is always an ``inf`` finding).  ``finite``: ``np.isfinite(values)`` for
    float data."""
    if isinstance(rule, Range):
        mask = _range_mask(values, rule)
    else:
        mask = np.isin(values, np.asarray(rule.values), invert=not rule.negate)
    skip_na = rule.ignore_na or (isinstance(rule, Allowed) and rule.negate)
    if finite is not None:
        if skip_na:
            mask &= finite if isinstance(rule, Range) else ~np.isnan(values)
        else:
            mask &= finite | np.isnan(values) if isinstance(rule, Range) else True
            mask |= np.isnan(values)
    if valid is not None:
        if skip_na:
            mask &= valid
        else:
            mask |= ~valid
    return mask


def check_values(
    values: np.ndarray,
    valid: np.ndarray | None,
    rowmap: RowMap,
    rules: ColumnRules,
    minmax: Any = None,
) -> list[Hits]:
    """Run the value rules on a flat numeric buffer.

    Args:
        values: flat numeric values; entries where ``valid`` is False are ignored.
        valid: validity mask (False = null) or None when there are no nulls.
        rowmap: maps each value to its row.
        rules: what to check.
        minmax: ``(values.min(), values.max())`` if the caller has it already (the profile).

    Returns:
        One :class:`Hits` per check (and severity) that found something; a value is reported
        at most once per check.
    """
    out: list[Hits] = []
    if valid is not None and rules.null is not None:
        h = group_by_row("null", rules.null, ~valid, rowmap, None)
        if h is not None:
            out.append(h)
    value_rules: tuple[Range | Allowed, ...] = (*rules.ranges, *rules.allowed)
    strict_na = any(not r.ignore_na for r in value_rules)
    if valid is None and not strict_na and _quick_clean(values, rules, minmax):
        return out
    is_float = values.dtype.kind == "f"
    sites = _Sites()
    _magnitude_hits(values, valid, rules, is_float, sites)
    finite = np.isfinite(values) if is_float and value_rules else None
    for rule in value_rules:
        mask = _rule_mask(values, valid, rule, finite)
        sites.add(rule.check, rule.severity, np.flatnonzero(mask))
    return out + sites.hits(rowmap, values)
