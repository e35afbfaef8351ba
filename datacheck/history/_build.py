"""From a reader's table to a :class:`History`: steps, the chosen series, events with steps.

**Every reading is kept, in the order the log wrote it.**  A step may hold several readings
(micro-batches, ranks, gradient accumulation, a record printed over several lines) and the
counter may go back (a resumed run appending to its log): nothing is merged or dropped, the
timeline judges the readings in log order, and a note says when either happened.  Readers
whose format marks a resume (the guard's ``resume`` record, TensorBoard's ``purge_step``)
replace the abandoned readings themselves, as the format's own tools do.

The series are arrays of 8-byte floats (:mod:`datacheck.history._series`), so a history of a
1 GB log takes tens of bytes a reading, not the ~150 of Python lists of float objects.
"""

from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from datacheck.errors import InputError
from datacheck.history._counters import (
    Counter,
    as_array,
    choose_counter,
    counter_from_key,
    row_steps,
)
from datacheck.history._keys import Keys, Overrides, choose_keys, eval_loss_key
from datacheck.history._rows import left_out, nonfinite, reading_index, row_signals
from datacheck.history._series import Floats, Series
from datacheck.history._table import MISSING, Columns, Table, is_eval_key, norm_key, role_of

__all__ = ["History", "build"]


@dataclass
class History:
    """A training history: the readings under the chosen keys, in log order, and events.

    The series are read-only: they may be the reader's columns themselves, and the series
    without a key may share one all-``None`` array.
    """

    source: str
    format: str
    steps: Floats = field(default_factory=Floats)
    """The step of each reading, in log order (repeated for several readings of a step, going
    back where a resumed run restarted its counter)."""
    loss: Series = field(default_factory=Series)
    grad_norm: Series = field(default_factory=Series)
    lr: Series = field(default_factory=Series)
    keys: dict[str, str | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    """Why each key was taken for its role, in words a user can check."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Guard events and signals found in the log (``checkpoint``, ``overflow``, ``nonfinite``),
    each with a ``step`` and, where known, the ``index`` of the reading it comes at."""
    eval_steps: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    step_source: str = "row number"
    """The counter the steps come from, or ``row number`` when the log has none."""
    notes: list[str] = field(default_factory=list)
    nonfinite: list[dict[str, Any]] = field(default_factory=list)
    """The first NaN/Inf of every field that could be the objective or the grad norm (chosen
    or not): ``key``, ``step``, ``index``, ``value``."""

    _sorted: bool | None = field(default=None, repr=False, compare=False)

    @property
    def readings(self) -> int:
        """Readings in the history (a step with several readings counts each)."""
        return len(self.steps)

    def index_of_step(self, step: float) -> int:
        """The first reading at or after ``step`` in log order (for events that name a step)."""
        steps = self.steps.data
        arr = np.frombuffer(steps, np.float64) if len(steps) else np.empty(0)
        if self._sorted is None:
            self._sorted = bool(np.all(arr[1:] >= arr[:-1]))
        if self._sorted:
            return bisect.bisect_left(steps, step)
        hits = np.flatnonzero(arr >= step)
        return int(hits[0]) if len(hits) else len(steps)


def _column(cols: Columns, key: str | None) -> NDArray[np.float64] | None:
    col = cols.cols.get(key) if key is not None else None
    return None if col is None else np.frombuffer(col, dtype=np.float64)


def _loss_values(cols: Columns, keys: Keys) -> NDArray[np.float64] | array[float] | None:
    """The loss column: the key's own array, the sum of its components (NaN if one is NaN,
    missing if one is missing), or the natural log of a perplexity."""
    if not keys.loss:
        return None
    if len(keys.loss) == 1 and not keys.log_loss:
        return cols.cols[keys.loss[0]]
    parts = [_column(cols, k) for k in keys.loss]
    arrays = [p for p in parts if p is not None]
    missing = np.zeros(cols.n, dtype=bool)
    total = np.zeros(cols.n)
    for p in arrays:
        missing |= p == MISSING
        total = total + np.where(p == MISSING, 0.0, p)
    if keys.log_loss:
        with np.errstate(all="ignore"):
            total = np.log(total)
    total[missing] = MISSING
    return total


def _data_rows(cols: Columns, keys: Keys) -> NDArray[np.bool_]:
    """Rows holding a reading of the loss, the grad norm or the LR."""
    mask = np.zeros(cols.n, dtype=bool)
    for key in (*keys.loss, keys.grad_norm, keys.lr):
        if (arr := _column(cols, key)) is not None:
            mask |= arr != MISSING
    return mask


def _counter(table: Table, overrides: Overrides, cols: Columns) -> Counter | None:
    if overrides.step:
        key = norm_key(overrides.step)
        if key not in cols.cols:
            seen = ", ".join(sorted(cols.cols)[:20]) or "none"
            raise InputError(f"no key '{overrides.step}' for --step (keys seen: {seen})")
        return counter_from_key(key, f"{key}: named with --step")
    if table.counter:
        return counter_from_key(table.counter, f"{table.counter}: the format's own step")
    mask = np.zeros(cols.n, dtype=bool)
    for key, col in cols.cols.items():
        if role_of(key) in ("loss", "grad_norm", "lr") and not is_eval_key(key):
            mask |= np.frombuffer(col, np.float64) != MISSING
    return choose_counter(cols, mask)


def _drop_preamble(table: Table, counter: Counter) -> None:
    """Rows before the first one with the step counter (a printed config or source) go."""
    first = counter.first_row(table.train)
    if first <= 0:
        return
    for ev in table.events:
        for field_ in ("row", "prev_row"):
            if isinstance(ev.get(field_), int):
                ev[field_] -= first
    table.train.drop_head(first)


def _summaries_only(table: Table) -> None:
    """A log whose only training loss is on its evaluation lines (SpeechBrain's per-epoch
    ``train loss: .. - valid loss: ..``) is read from those lines."""

    def trained(cols: Columns) -> bool:
        return any(role_of(k) == "loss" and not is_eval_key(k) for k in cols.cols)

    if not trained(table.train) and trained(table.eval):
        table.train, table.eval = table.eval, Columns(table.eval.keep)
        table.notes.append("the training loss is printed on the evaluation lines: read there")


def build(table: Table, overrides: Overrides, source: str) -> History:
    """Find the counter, choose keys, keep every reading in log order, attach events."""
    _summaries_only(table)
    cols = table.train
    counter = _counter(table, overrides, cols)
    if counter is not None:
        _drop_preamble(table, counter)
    steps_all = row_steps(cols, counter)
    keys = choose_keys(cols, overrides, source, counter.key if counter else None)
    hist = History(source, table.format, notes=list(table.notes))
    hist.keys, hist.reasons = keys.describe(), dict(keys.reasons)
    if counter is not None:
        hist.step_source, hist.reasons["step"] = counter.key, counter.reason
    elif cols.n:
        hist.notes.append("no step counter in this log: steps are row numbers")
        hist.reasons["step"] = "row numbers: no column of whole numbers rises over the log"
    kept = _data_rows(cols, keys) & ~np.isnan(steps_all)
    rows = None if kept.all() else np.flatnonzero(kept)
    records = _records(cols, counter, keys, kept)
    if records is not None:  # a record printed over several lines: one reading each
        rows = _merged(hist, cols, keys, steps_all, kept, records)
    else:
        _series(hist, cols, keys, steps_all, kept)
    readings: NDArray[np.int64] | int = cols.n if rows is None else rows
    if table.format == "text":  # lines, each printed whole: a field left out is the trainer's
        table.events.extend(left_out(cols, keys))
    hist.events = _events(table, cols, steps_all, readings, counter)
    hist.nonfinite = nonfinite(cols, steps_all, readings)
    _notes(hist, keys)
    _eval(hist, table, keys, counter)
    _check(hist, keys, table, source)
    return hist


def _series(
    hist: History,
    cols: Columns,
    keys: Keys,
    steps: NDArray[np.float64],
    kept: NDArray[np.bool_],
) -> None:
    """The readings: the columns themselves when every row is one (no copies: a history of a
    1 GB log takes what its columns take), else the rows with a reading, in log order."""
    absent: list[array[float]] = []
    loss = _loss_values(cols, keys)
    series = [loss, *(cols.cols.get(k) if k else None for k in (keys.grad_norm, keys.lr))]
    every = bool(kept.all())
    if every and counter_is_column(cols, steps):
        hist.steps = Floats.wrap(cols.cols[_step_column(cols, steps)])
    else:
        hist.steps = Floats.wrap(as_array(steps[kept]))
    out = []
    for values in series:
        if values is None:
            if not absent:
                absent.append(array("d", [MISSING]) * int(kept.sum()))
            out.append(Series.wrap(absent[0]))
        elif every and isinstance(values, array):
            out.append(Series.wrap(values))
        else:
            out.append(Series.wrap(as_array(np.asarray(values, dtype=np.float64)[kept])))
    hist.loss, hist.grad_norm, hist.lr = out


def _chosen(cols: Columns, keys: Keys) -> list[NDArray[np.float64] | None]:
    loss = _loss_values(cols, keys)
    out: list[NDArray[np.float64] | None] = [
        None if loss is None else np.asarray(loss, dtype=np.float64)
    ]
    out += [_column(cols, k) for k in (keys.grad_norm, keys.lr)]
    return out


def _records(
    cols: Columns, counter: Counter | None, keys: Keys, kept: NDArray[np.bool_]
) -> NDArray[np.int64] | None:
    """The record of each row when the log prints a record over several lines (a counter line,
    then a line per value: OLMo's ``[step=N]``, Composer's ``[batch=N]:``) and no value comes
    twice in one record; ``None`` otherwise."""
    col = cols.cols.get(counter.fine) if counter is not None else None
    if col is None:
        return None
    own = np.frombuffer(col, np.float64) != MISSING
    if not (own & ~kept).any():
        return None  # every counter line is a reading: no records
    rec = np.cumsum(own) - 1
    for arr in _chosen(cols, keys):
        if arr is None:
            continue
        at = rec[(arr != MISSING) & (rec >= 0)]
        if len(at) and np.bincount(at).max() > 1:
            return None  # a value twice in a record: the lines are readings of their own
    return rec


def _merged(
    hist: History,
    cols: Columns,
    keys: Keys,
    steps: NDArray[np.float64],
    kept: NDArray[np.bool_],
    rec: NDArray[np.int64],
) -> NDArray[np.int64]:
    """One reading per record with a value; returns each reading's last row (for events)."""
    own_rows = np.flatnonzero(rec[1:] != rec[:-1]) + 1
    if len(rec) and rec[0] >= 0:
        own_rows = np.concatenate(([0], own_rows))
    n = int(rec.max()) + 1 if len(rec) else 0
    with_data = np.unique(rec[kept & (rec >= 0)])
    out = []
    for arr in _chosen(cols, keys):
        merged = np.full(n, MISSING)
        if arr is not None:
            present = (arr != MISSING) & (rec >= 0)
            merged[rec[present]] = arr[present]
        out.append(Series.wrap(as_array(merged[with_data])))
    hist.loss, hist.grad_norm, hist.lr = out
    hist.steps = Floats.wrap(as_array(steps[own_rows[with_data]]))
    last = np.concatenate((own_rows[1:] - 1, [len(rec) - 1]))
    return np.asarray(last[with_data], dtype=np.int64)


def counter_is_column(cols: Columns, steps: NDArray[np.float64]) -> bool:
    """The steps are one column's own array (a counter on every row, not combined)."""
    return _step_column(cols, steps) != ""


def _step_column(cols: Columns, steps: NDArray[np.float64]) -> str:
    for key, col in cols.cols.items():
        if len(col) and np.frombuffer(col, np.float64).ctypes.data == steps.ctypes.data:
            return key
    return ""


def _events(
    table: Table,
    cols: Columns,
    steps: NDArray[np.float64],
    rows: NDArray[np.int64] | int,
    counter: Counter | None,
) -> list[dict[str, Any]]:
    """The signals of the rows and the reader's events, each with its step and the index of
    the reading it comes at."""
    events = row_signals(cols, steps)
    epoch = counter is not None and counter.key == "epoch"
    for ev in table.events:
        if "at" in ev and (ev.get("unit") == "epoch") == epoch:
            ev["step"] = float(ev["at"])  # the line names its step in the counter's unit
        row = ev.get("prev_row") if "at" in ev else ev.get("row")
        # A line naming its step (in any unit) follows the step line it names; one naming none
        # (an overflow, "saving checkpoint to out") comes before the step line it belongs to.
        if isinstance(ev.get("step"), (int, float)):
            ev["step"] = float(ev["step"])
        elif isinstance(row, int) and 0 <= row < len(steps) and steps[row] == steps[row]:
            ev["step"] = float(steps[row])
        if isinstance(row, int) and 0 <= row < len(steps):
            ev["index"] = reading_index(rows, row)
        if ev.get("step") is not None or ev.get("kind") not in (
            "checkpoint",
            "overflow",
            "nonfinite",
        ):
            events.append(ev)
    for ev in events:
        if "index" not in ev and isinstance(ev.get("row"), int) and ev.get("step") is not None:
            ev["index"] = reading_index(rows, ev["row"])
    return sorted(
        events,
        key=lambda e: (e.get("step") is None, e.get("index", math.inf), e.get("step") or 0),
    )


def _notes(hist: History, keys: Keys) -> None:
    """Say when a step has several readings, and when the counter goes back."""
    steps = np.frombuffer(hist.steps.data, np.float64)
    if len(steps) < 2:
        return
    series = hist.loss if keys.loss else hist.grad_norm
    values = np.frombuffer(series.data, np.float64)
    has = values != MISSING
    mine = steps if has.all() else steps[has]
    increasing = bool(np.all(mine[1:] > mine[:-1]))  # the common case: no repeats, no copy
    if len(mine) > 1 and not increasing:
        _, counts = np.unique(mine, return_counts=True)
        repeated = counts[counts > 1]
        if len(repeated):
            hist.notes.append(
                f"{len(repeated):,} step(s) have several readings (up to {int(counts.max())} "
                "at one step: micro-batches, ranks, gradient accumulation or a repeated line); "
                "every reading is kept and judged in log order"
            )
    if increasing and has.all():
        return
    back = np.flatnonzero(steps[1:] < steps[:-1])
    if len(back):
        i = int(back[0])
        hist.notes.append(
            f"the step counter goes back {len(back)} time(s) (first from {steps[i]:g} to "
            f"{steps[i + 1]:g}): a resumed run; both attempts are kept, in log order"
        )


def _eval_keys(table: Table, keys: Keys) -> tuple[Columns, tuple[str, ...]]:
    """Evaluation rows and their loss key; the components' sum when the training loss is one."""
    if table.eval.n and (key := eval_loss_key(table.eval, tagged=True)) is not None:
        return table.eval, (key,)
    cols = table.train
    if len(keys.loss) > 1:
        twins = tuple(k.replace("train_", "val_", 1) for k in keys.loss)
        if all(t != k and t in cols.cols for t, k in zip(twins, keys.loss, strict=True)):
            return cols, twins
    key = eval_loss_key(cols, tagged=False)
    return cols, () if key is None else (key,)


def _eval(hist: History, table: Table, keys: Keys, counter: Counter | None) -> None:
    """Every evaluation reading, in log order, at the step of the counter (or its own)."""
    cols, eval_keys = _eval_keys(table, keys)
    if not eval_keys:
        return
    steps = counter.values(cols) if counter is not None else None
    if steps is None:
        own = next((k for k in sorted(cols.cols) if role_of(k) == "step"), None)
        steps = row_steps(cols, counter_from_key(own, "") if own else None)
    parts = [np.frombuffer(cols.cols[k], np.float64) for k in eval_keys if k in cols.cols]
    if not parts:
        return
    present = np.logical_and.reduce([p != MISSING for p in parts]) & ~np.isnan(steps)
    total = np.sum([np.where(p == MISSING, 0.0, p) for p in parts], axis=0)
    hist.eval_steps = steps[present].tolist()
    hist.eval_loss = total[present].tolist()
    hist.keys["eval_loss"] = "+".join(eval_keys)


def _check(hist: History, keys: Keys, table: Table, source: str) -> None:
    has_loss = hist.loss.data.count(MISSING) < len(hist.loss)
    has_signal = (
        hist.grad_norm.data.count(MISSING) < len(hist.grad_norm)
        or any(e.get("kind") in ("nonfinite", "overflow") for e in hist.events)
        or bool(hist.nonfinite)
    )
    if has_loss:
        return
    if has_signal:
        hist.notes.append(
            "no training loss in this log: judged on the grad norm, NaN and loss-scale signals"
        )
        return
    seen = sorted(set(table.train.cols) | set(table.eval.cols))[:20]
    raise InputError(
        f"'{source}': no training loss found ({table.format}; keys seen: {seen or 'none'}); "
        "name it with --loss KEY"
    )
