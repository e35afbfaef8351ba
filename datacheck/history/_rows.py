"""Signals the rows of a history hold, beside the readings themselves: the NaN-iteration and
skipped-step counters, a falling loss-scale column, the first NaN/Inf of each field that could
be the objective or the grad norm, and a loss the trainer left out of its line."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from datacheck.history._keys import Keys
from datacheck.history._table import MISSING, Columns, is_eval_key, role_of

__all__ = ["left_out", "nonfinite", "reading_index", "row_signals"]


def left_out(cols: Columns, keys: Keys) -> list[dict[str, Any]]:
    """A line with the LR but neither the loss nor the grad norm, after lines that always had
    both, holding only fields the line before it held (its shape less the two, 3 fields at
    least), and no skip counted on it: the trainer left a non-finite loss out (Megatron prints a
    loss only ``if avg > 0.0``, which NaN is not, and a grad norm only for a step taken)."""
    if len(keys.loss) != 1 or keys.grad_norm is None or keys.lr is None:
        return []
    loss, grad, lr = (
        np.frombuffer(cols.cols[k], np.float64) for k in (*keys.loss, keys.grad_norm, keys.lr)
    )
    both = (loss != MISSING) & (grad != MISSING)
    bare = np.flatnonzero((lr != MISSING) & (loss == MISSING) & (grad == MISSING))
    if (
        not len(bare)
        or both[: bare[0]].sum() < 2
        or not both[: bare[0]][lr[: bare[0]] != MISSING].all()
    ):
        return []
    skips = [
        np.frombuffer(c, np.float64) for k, c in cols.cols.items() if role_of(k) == "skipped_count"
    ]
    row = int(bare[0])
    if any(s[row] != MISSING and s[row] > 0 for s in skips):
        return []  # a skipped step (an fp16 overflow): counted as such
    before = int(np.flatnonzero(both[:row])[-1])
    has = {k for k, c in cols.cols.items() if c[row] != MISSING}
    if len(has) < 3 or not has <= {k for k, c in cols.cols.items() if c[before] != MISSING}:
        return []  # not the loss line's shape less the two (an LR printed on its own line)
    text = (
        f"{keys.loss[0]} and {keys.grad_norm} left out of a line that prints them (Megatron "
        "prints a loss only when it is > 0, which NaN is not)"
    )
    return [{"kind": "nonfinite", "text": text, "row": row}]


def reading_index(rows: NDArray[np.int64] | int, row: int) -> int:
    """The reading of ``row``, or the first after it (an event line before its step line);
    the number of readings for an event after every reading.  ``rows``: the rows that are
    readings, or their number when every row is one."""
    if isinstance(rows, int):
        return max(min(row, rows), 0)
    return int(np.searchsorted(rows, row))


def _present(
    cols: Columns, key: str, steps: NDArray[np.float64]
) -> tuple[NDArray[np.int64] | None, NDArray[np.float64]]:
    """(rows, values) where ``key`` has a value and the row a step; ``rows`` is ``None`` when
    that is every row (``values`` is then the column itself, no copy)."""
    arr = np.frombuffer(cols.cols[key], np.float64)
    has = (arr != MISSING) & ~np.isnan(steps)
    if has.all():
        return None, arr
    rows = np.flatnonzero(has)
    return rows, arr[rows]


def _changes(
    cols: Columns, key: str, steps: NDArray[np.float64], test: Any
) -> list[tuple[int, float, float]]:
    """(row, value, previous value) where ``test(value, previous)`` holds, in row order."""
    rows, values = _present(cols, key, steps)
    if len(values) < 2:
        return []
    hit = np.flatnonzero(test(values[1:], values[:-1])) + 1
    return [
        (int(i if rows is None else rows[i]), float(values[i]), float(values[i - 1])) for i in hit
    ]


def row_signals(cols: Columns, steps: NDArray[np.float64]) -> list[dict[str, Any]]:
    """The events the rows' counters signal: NaN iterations, skipped steps, a falling scale
    (NumPy finds the few rows that signal; only those become events)."""
    nans, skipped, scale = (
        next((k for k in sorted(cols.cols) if role_of(k) == role), None)
        for role in ("nan_count", "skipped_count", "scale")
    )
    events: list[dict[str, Any]] = []
    if nans is not None:
        arr = np.frombuffer(cols.cols[nans], np.float64)
        for i in np.flatnonzero((arr != MISSING) & (arr != 0) & ~np.isnan(steps)):
            events.append(
                {"kind": "nonfinite", "step": float(steps[i]), "count": arr[i], "row": int(i)}
            )
    skips: dict[int, float] = {}
    if skipped == "skipped":  # DeepSpeed's "skipped=N" counts since the start
        skips = {i: v - b for i, v, b in _changes(cols, skipped, steps, np.not_equal)}
    elif skipped is not None:
        arr = np.frombuffer(cols.cols[skipped], np.float64)
        hit = np.flatnonzero((arr != MISSING) & (arr != 0) & ~np.isnan(steps))
        skips = {int(i): float(arr[i]) for i in hit}
    falls = {} if scale is None else {i: v for i, v, _ in _changes(cols, scale, steps, np.less)}
    for row in sorted(set(skips) | set(falls)):
        ev = {"kind": "overflow", "step": float(steps[row]), "count": skips.get(row, 0.0)}
        events.append({**ev, "row": row, "scale": falls.get(row), "fell": row in falls})
    return events


def nonfinite(
    cols: Columns, steps: NDArray[np.float64], rows: NDArray[np.int64] | int
) -> list[dict[str, Any]]:
    """The first NaN/Inf of each training field that could be the objective or the grad norm."""
    out = []
    for key in sorted(cols.cols):
        if role_of(key) not in ("loss", "grad_norm") or is_eval_key(key):
            continue
        arr = np.frombuffer(cols.cols[key], np.float64)
        bad = np.flatnonzero((arr != MISSING) & ~np.isfinite(arr) & ~np.isnan(steps))
        if len(bad):
            row = int(bad[0])
            out.append(
                {
                    "key": key,
                    "step": float(steps[row]),
                    "index": reading_index(rows, row),
                    "value": float(arr[row]),
                }
            )
    return sorted(out, key=lambda d: (d["index"], d["key"]))
