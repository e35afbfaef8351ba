"""Which column is the log's step counter: found by what it does, names only break ties.

A step counter is a column of whole numbers that rises across the readings.  The candidates
are every such column a reader kept (a counter by name, ``Up.``, a bare first column, a
number in brackets, a progress bar's position), and every pair of a coarse counter with a
finer one that restarts whenever the coarse one moves on (``Epoch [1/5] Step [0900/1915]``,
MindSpore's ``epoch: 2 step: 100``, ImageNet's ``Epoch: [0][ 10/5005]``), combined as
``(epoch - base) x period + step`` where the period is the printed total (``/1915``) or, when
none is printed, the span of the sub-steps seen plus their usual gap (0, 10, ..., 90: 100).  Of the candidates that rise over the whole log
(a few falls allowed: a resumed run starts its counter again), the finest wins (the most
distinct values over the readings); near-ties go to the known counter names
(:func:`~datacheck.history._table.counter_rank`).  The choice comes with its reason in words.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from datacheck.history._table import (
    MISSING,
    Columns,
    counter_like,
    counter_rank,
    is_positional,
    role_of,
    unix_time,
)

__all__ = ["Counter", "as_array", "choose_counter", "counter_from_key", "row_steps"]

_FALLS = 0.02
"""Falls a rising counter may have, as a share of its readings (a resumed run restarts it)."""
_TIE = 0.98
"""Counters with at least this share of the finest one's distinct values are near-ties."""


@dataclass(frozen=True)
class Counter:
    """A step counter: a column, or an epoch combined with a sub-counter."""

    key: str
    """As shown: ``iteration``, or ``(epoch-1)*1915+step``."""
    coarse: str | None
    fine: str
    period: float = 0.0
    base: float = 0.0
    reason: str = ""

    def first_row(self, cols: Columns) -> int:
        """The first row where the counter has a value (0 when it has none)."""
        firsts = []
        for key in (self.fine, self.coarse):
            if key is None:
                continue
            col = cols.cols.get(key)
            if col is None:
                return 0
            firsts.append(next((i for i, v in enumerate(col) if v != MISSING), 0))
        return max(firsts)

    def values(self, cols: Columns) -> NDArray[np.float64] | None:
        """The counter on every row of ``cols``, forward-filled (NaN before the first), or
        ``None`` when ``cols`` lacks its columns."""
        if self.coarse is None:
            col = cols.cols.get(self.fine)
            if col is not None and len(col) and MISSING not in col:
                return np.frombuffer(col, dtype=np.float64)  # the column itself, no copy
        fine = _filled(cols, self.fine)
        if fine is None:
            return None
        if self.coarse is None:
            return fine
        coarse = _filled(cols, self.coarse)
        if coarse is None:
            return None
        return (coarse - self.base) * self.period + fine


def _column(cols: Columns, key: str) -> NDArray[np.float64] | None:
    """The column with NaN where a row lacks it (a view of its buffer when none does)."""
    col = cols.cols.get(key)
    if col is None:
        return None
    arr = np.frombuffer(col, dtype=np.float64) if len(col) else np.empty(0)
    if MISSING not in col:
        return arr
    return np.where(arr == MISSING, np.nan, arr)


def _filled(cols: Columns, key: str) -> NDArray[np.float64] | None:
    """The column forward-filled: each row takes the last value at or before it."""
    arr = _column(cols, key)
    return None if arr is None else _ffill(arr)


@dataclass
class _Stats:
    key: str
    ups: int
    falls: int
    readings: int
    distinct: int
    whole: bool

    @property
    def rising(self) -> bool:
        return self.ups >= 1 and self.falls <= max(2, _FALLS * self.readings)


_CHUNK = 1 << 12
"""Values compared at a time (NumPy temporaries of ~100 KB whatever the log's length)."""


def _stats(key: str, arr: NDArray[np.float64], data: NDArray[np.bool_]) -> _Stats:
    """How a candidate behaves, a chunk at a time (no copy of a column on every row)."""
    ups = falls = changes = readings = 0
    whole = True
    last = np.empty(0)
    for a in range(0, len(arr), _CHUNK):
        part = arr[a : a + _CHUNK]
        valid = (part != MISSING) & ~np.isnan(part)
        part = part if valid.all() else part[valid]
        if not len(part):
            continue
        seq = np.concatenate((last, part)) if len(last) else part
        ups += int(np.count_nonzero(seq[1:] > seq[:-1]))
        falls += int(np.count_nonzero(seq[1:] < seq[:-1]))
        changes += int(np.count_nonzero(seq[1:] != seq[:-1]))
        whole = whole and bool(np.all(np.floor(part) == part)) and bool(np.all(part >= 0))
        readings += len(part)
        last = part[-1:]
    if not falls:  # rising: the values that change, counted (the readings see them all)
        distinct = changes + bool(readings)
    else:
        filled = _ffill(np.where(arr == MISSING, np.nan, arr))[data]
        distinct = int(np.unique(filled[~np.isnan(filled)]).size)
    return _Stats(key, ups, falls, readings, distinct, whole)


def _ffill(arr: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each row takes the last value at or before it (NaN before the first)."""
    valid = ~np.isnan(arr)
    if valid.all():
        return arr
    idx = np.where(valid, np.arange(len(arr)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = arr[np.maximum(idx, 0)]
    out[idx < 0] = np.nan
    return out


def _candidates(cols: Columns) -> list[str]:
    """Counters by name, by position, or by behaviour (kept as such when the columns settled;
    every column of a log too short to settle is judged here)."""
    out = []
    for key in sorted(cols.cols):
        if key.endswith("_total"):
            continue
        role = role_of(key)
        if role not in (None, "step"):
            continue  # named a loss, an LR, a scale ...: that is what it is
        if _CLOCK & set(key.split("_")):
            continue  # a clock rises line by line too: never the step counter
        if role != "step" and unix_time(cols.cols[key]):
            continue  # nor does a column of Unix times, however it is named
        named = role == "step" or key in cols.extra or is_positional(key)
        judged = cols.probing or key in cols.pending
        if named or (judged and counter_like(cols.cols[key])):
            out.append(key)
    return out


_CLOCK = frozenset(
    {"time", "eta", "elapsed", "duration", "remaining", "timestamp", "clock", "wall", "date"}
    | {"sec", "secs", "seconds", "ms", "hours", "minutes", "s"}
)
"""Words of a clock's name (``elapsed 1847``, ``timestamp 1700000000``, ``time_ms``): a
clock or an ETA rises (or falls) with the lines, but it is no counter."""


def _combine(
    cols: Columns, coarse: _Stats, fine: _Stats, arrays: dict[str, NDArray[np.float64]]
) -> tuple[Counter, NDArray[np.float64]] | None:
    """``coarse x period + fine`` when ``fine`` restarts where ``coarse`` moves on."""
    c, f = arrays[coarse.key], arrays[fine.key]
    both = ~np.isnan(f)
    cf = _ffill(c)[both]
    fv = f[both]
    if len(fv) < 3 or np.isnan(cf).any():
        return None
    falls = np.diff(fv) < 0
    moved = np.diff(cf) > 0
    if not falls.any() or (falls & moved).sum() < 0.8 * falls.sum():
        return None  # the sub-counter does not restart with the coarse one
    if (falls & moved).sum() < 0.5 * moved.sum():
        return None
    total = _column(cols, fine.key + "_total")
    printed = total is not None and not np.isnan(total).all()
    if printed:
        assert total is not None
        period = float(np.nanmax(total))
    else:  # the sub-steps an epoch holds: from the first to the last seen, one gap more
        gaps = np.diff(fv)
        gaps = gaps[gaps > 0]
        gap = float(np.median(gaps)) if len(gaps) else 1.0
        period = float(fv.max() - fv.min()) + gap
    if not period > 0:
        return None
    base = 0.0 if np.nanmin(c) == 0 else 1.0
    shown = f"({coarse.key}-1)" if base else coarse.key
    counter = Counter(
        f"{shown}*{period:g}+{fine.key}",
        coarse.key,
        fine.key,
        period,
        base,
        f"{fine.key} restarts whenever {coarse.key} moves on ({int(falls.sum())} times), so "
        f"the two combine: step = {shown} x {period:g} + {fine.key}, {period:g} "
        + ("the printed total" if printed else f"the {fine.key}s an epoch spans")
        + (f"; {coarse.key} counts from 1" if base else ""),
    )
    combined = (_ffill(c) - base) * period + f
    return counter, combined


def choose_counter(cols: Columns, data: NDArray[np.bool_]) -> Counter | None:
    """The step counter of ``cols`` (``data`` marks the rows with a reading), or ``None``."""
    stats = {}
    for key in _candidates(cols):
        col = cols.cols.get(key)
        arr = np.frombuffer(col, dtype=np.float64) if col is not None and len(col) else None
        if arr is not None:
            st = _stats(key, arr, data)
            if st.readings >= 2 and (st.whole or _fractional(key)):
                stats[key] = st
        del arr  # one candidate's temporaries at a time
    arrays = {k: a for k, s in stats.items() if s.falls and (a := _column(cols, k)) is not None}
    options: list[tuple[Counter, _Stats]] = []
    for s in stats.values():
        if s.rising:
            options.append((Counter(s.key, None, s.key), s))
    for fine in stats.values():
        if not fine.falls or not fine.ups:
            continue
        for coarse in stats.values():
            if coarse is fine or not coarse.rising or coarse.ups >= fine.ups + fine.falls:
                continue  # the coarse counter must move less often than the fine one
            if coarse.key not in arrays:
                arrays[coarse.key] = _column(cols, coarse.key)  # type: ignore[assignment]
            made = _combine(cols, coarse, fine, arrays)
            if made is not None:
                counter, combined = made
                options.append((counter, _stats(counter.key, combined, data)))
    if not options:
        return _named_only(cols, data)
    finest = max(s.distinct for _, s in options)
    near = [(c, s) for c, s in options if s.distinct >= _TIE * finest]
    on_rows = {c.fine: _on_data_rows(cols, c.fine, data) for c, _ in near}
    best, bs = min(  # a counter on the readings' own lines before one carried from other lines
        near,
        key=lambda cs: (counter_rank(cs[0].fine), -on_rows[cs[0].fine], cs[1].falls, cs[0].key),
    )
    if best.reason:
        return best
    others = sorted(
        (c.key for c, s in options if c.key != best.key and s.distinct >= 0.5 * finest),
        key=lambda k: (counter_rank(k), k),
    )[:3]
    why = f"{best.key}: rises over the log ({bs.distinct:,} values on {data.sum():,} lines"
    why += f", {bs.falls} restart(s)" if bs.falls else ""
    why += "), the finest counter"
    if len(near) > 1:
        why += "; its name breaks the tie with " + ", ".join(
            c.key for c, _ in near if c.key != best.key
        )
    elif others:
        why += "; also rising: " + ", ".join(others)
    return Counter(best.key, None, best.key, reason=why)


def _on_data_rows(cols: Columns, key: str, data: NDArray[np.bool_]) -> int:
    """Data rows on which ``key`` itself has a value (not carried from a line before)."""
    col = cols.cols.get(key)
    if col is None or not len(col):
        return 0
    return int(((np.frombuffer(col, np.float64) != MISSING) & data).sum())


def _named_only(cols: Columns, data: NDArray[np.bool_]) -> Counter | None:
    """A log too short to show a counter rising: a counter by name on the readings."""
    for key in sorted(cols.cols, key=lambda k: (counter_rank(k), k)):
        if role_of(key) != "step" or key.endswith("_total"):
            continue
        arr = _column(cols, key)
        assert arr is not None
        if int((~np.isnan(_ffill(arr)) & data).sum()) * 2 >= max(int(data.sum()), 1):
            return Counter(
                key,
                None,
                key,
                reason=f"{key}: named a step counter (too few readings to see it rise)",
            )
    arr = _column(cols, "column_1")  # ``print(f"{iter_num} | loss ...")``: the counter first
    if arr is not None and (has := ~np.isnan(arr) & data).any():
        first = arr[has]
        if bool(np.all((first >= 0) & (np.floor(first) == first))) and has.sum() == data.sum():
            return Counter(
                "column_1",
                None,
                "column_1",
                reason="column_1: the whole number opening every reading's line (too few "
                "readings to see it rise)",
            )
    return None


def _fractional(key: str) -> bool:
    """A counter name that may hold fractions (Hugging Face's ``epoch``: 0.25, 0.5, ...)."""
    return role_of(key) == "step"


def counter_from_key(key: str, reason: str) -> Counter:
    """The counter a format fixes or the user named."""
    return Counter(key, None, key, reason=reason)


def row_steps(cols: Columns, counter: Counter | None) -> NDArray[np.float64]:
    """The step of every row: the counter forward-filled, or the row number without one."""
    if counter is not None and (values := counter.values(cols)) is not None:
        return values
    return np.arange(cols.n, dtype=np.float64)


def as_array(values: NDArray[np.float64]) -> array[float]:
    """A NumPy float array as an ``array('d')`` (the history's series type)."""
    out = array("d")
    out.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return out
