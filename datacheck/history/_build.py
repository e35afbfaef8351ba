"""From a reader's table to a :class:`History`: steps, the chosen series, events with steps.

The series are arrays of 8-byte floats (:mod:`datacheck.history._series`), so a history of a
1 GB log takes tens of bytes a reading, not the ~150 of Python lists of float objects.
"""

from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass, field
from typing import Any

from datacheck.errors import InputError
from datacheck.history._keys import Keys, Overrides, choose_keys, eval_loss_key, step_key
from datacheck.history._series import Floats, Series
from datacheck.history._table import MISSING, Columns, Table, norm_key, role_of

__all__ = ["History", "build"]


@dataclass
class History:
    """A training history: per-step series under the chosen keys, evaluation, and events.

    The series are read-only: they may be the reader's columns themselves, and the series
    without a key may share one all-``None`` array.
    """

    source: str
    format: str
    steps: Floats = field(default_factory=Floats)
    """Sorted, one per step (the first reading of a step wins)."""
    loss: Series = field(default_factory=Series)
    grad_norm: Series = field(default_factory=Series)
    lr: Series = field(default_factory=Series)
    keys: dict[str, str | None] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    """Guard events and signals found in the log (``checkpoint``, ``overflow``, ``nonfinite``),
    each with a ``step``."""
    eval_steps: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    step_source: str = "row number"
    """The counter the steps come from, or ``row number`` when the log has none."""
    notes: list[str] = field(default_factory=list)


def _sum(parts: list[float | None]) -> float | None:
    """The sum of loss components; NaN if one is NaN, ``None`` if one is missing."""
    if not parts:
        return None
    if any(p is not None and math.isnan(p) for p in parts):
        return math.nan
    if any(p is None for p in parts):
        return None
    return math.fsum(p for p in parts if p is not None)


def _steps(cols: Columns, key: str | None) -> array[float]:
    """Steps per row, forward-filled (NaN before the first counter); the counter's own column
    when it is on every row."""
    if key is None:
        return array("d", range(cols.n))
    if MISSING not in cols.cols[key]:
        return cols.cols[key]
    out, last = array("d"), math.nan
    for v in cols.cols[key]:
        last = last if v == MISSING else v
        out.append(last)
    return out


def _distinct(values: array[float]) -> int:
    """How many distinct values (each NaN counts apart, as in a set of floats)."""
    import numpy as np

    arr = np.frombuffer(values, dtype=np.float64)
    nan = np.isnan(arr)
    return int(np.unique(arr[~nan]).size + nan.sum())


def _put(hist: History, step: float, values: tuple[float, float, float]) -> None:
    """Add one row's values (``MISSING`` where it has none) at ``step``: the first value of a
    step wins, steps stay sorted."""
    steps = hist.steps.data
    series = (hist.loss.data, hist.grad_norm.data, hist.lr.data)
    at = len(steps) - 1
    if at < 0 or step > steps[at]:
        steps.append(step)
        for seq, v in zip(series, values, strict=True):
            seq.append(v)
        return
    if step != steps[at]:  # out of order (a resumed run): rare
        at = bisect.bisect_left(steps, step)
        if at == len(steps) or steps[at] != step:
            steps.insert(at, step)
            for seq, v in zip(series, values, strict=True):
                seq.insert(at, v)
            return
    for seq, v in zip(series, values, strict=True):
        if seq[at] == MISSING:
            seq[at] = v


def _raw(cols: Columns, key: str | None, absent: list[array[float]]) -> array[float]:
    """The column of ``key``, else the one all-``MISSING`` column (made once, kept in
    ``absent``: the series without a key share it)."""
    col = cols.cols.get(key) if key is not None else None
    if col is not None:
        return col
    if not absent:
        absent.append(array("d", [MISSING]) * cols.n)
    return absent[0]


def _increasing(steps: array[float]) -> bool:
    """Every row has a step, each above the one before (one reading per step)."""
    import numpy as np

    a = np.frombuffer(steps, dtype=np.float64)
    return len(a) == 0 or (not math.isnan(a[0]) and bool(np.all(a[1:] > a[:-1])))


def _series(hist: History, cols: Columns, keys: Keys, steps: array[float]) -> None:
    """Fill the series from the rows (one reading per row and step: the columns themselves)."""
    get = cols.get
    absent: list[array[float]] = []
    if len(keys.loss) == 1 or not keys.loss:
        loss_col = _raw(cols, keys.loss[0] if keys.loss else None, absent)
    else:
        sums = (_sum([get(k, i) for k in keys.loss]) for i in range(cols.n))
        loss_col = array("d", (MISSING if t is None else t for t in sums))
    grad_col, lr_col = _raw(cols, keys.grad_norm, absent), _raw(cols, keys.lr, absent)
    if _increasing(steps):  # no copies: a history of a 1 GB log takes what its columns take
        hist.steps, hist.loss = Floats.wrap(steps), Series.wrap(loss_col)
        hist.grad_norm, hist.lr = Series.wrap(grad_col), Series.wrap(lr_col)
        return
    for i in range(cols.n):
        step = steps[i]
        if step == step:  # not NaN: a counter seen
            _put(hist, step, (loss_col[i], grad_col[i], lr_col[i]))


def _signals(cols: Columns, steps: array[float]) -> list[dict[str, Any]]:
    """The events the rows' counters signal: NaN iterations, skipped steps, the loss scale."""
    get, events = cols.get, list[dict[str, Any]]()
    nans, skipped, scale = (
        next((k for k in sorted(cols.cols) if role_of(k) == role), None)
        for role in ("nan_count", "skipped_count", "scale")
    )
    if nans is None and skipped is None and scale is None:
        return events
    cumulative = skipped == "skipped"  # DeepSpeed's "skipped=N" counts since the start
    seen = None
    for i in range(cols.n):
        step = steps[i]
        if step != step:  # NaN: no counter yet
            continue
        n = get(nans, i) if nans else None
        if n:
            events.append({"kind": "nonfinite", "step": step, "count": n})
        k = get(skipped, i) if skipped else None
        if cumulative and k is not None:
            k, seen = (k - seen if seen is not None else 0.0), k
        sc = get(scale, i) if scale else None
        if k:
            events.append({"kind": "overflow", "step": step, "count": k, "scale": sc})
        elif sc is not None and sc <= 1:
            events.append({"kind": "overflow", "step": step, "count": 0, "scale": sc})
    return events


def _event_step(ev: dict[str, Any], steps: array[float], epoch: bool) -> float | None:
    if isinstance(ev.get("step"), (int, float)):
        return float(ev["step"])
    if "at" in ev and (ev.get("unit") == "epoch") == epoch:
        return float(ev["at"])
    # A line naming its step in another unit follows the step it names; one naming none
    # (an overflow, "saving checkpoint to out") comes before the step line it belongs to.
    row = ev.get("prev_row") if "at" in ev else ev.get("row")
    if row is None or not 0 <= row < len(steps) or steps[row] != steps[row]:
        return None
    return steps[row]


def _without_preamble(table: Table, overrides: Overrides) -> Columns:
    """Rows before the first one with the step counter (a printed config or source) go."""
    cols = table.train
    counter = table.counter or (norm_key(overrides.step) if overrides.step else step_key(cols))
    if counter is None or counter not in cols.cols:
        return cols
    first = next(i for i in range(cols.n) if cols.get(counter, i) is not None)
    for ev in table.events:
        for field_ in ("row", "prev_row"):
            if isinstance(ev.get(field_), int):
                ev[field_] -= first
    cols.drop_head(first)
    return cols


def build(table: Table, overrides: Overrides, source: str) -> History:
    """Choose keys, give rows their steps, merge rows of one step, attach events."""
    table.train = _without_preamble(table, overrides)
    keys = choose_keys(table.train, overrides, source)
    if table.counter and not overrides.step:
        keys = Keys(table.counter, keys.loss, keys.grad_norm, keys.lr, keys.eval_loss)
    steps = _steps(table.train, keys.step)
    coarse = keys.step == "epoch" and _distinct(steps) < 0.9 * len(steps)
    if coarse and not overrides.step:
        keys = Keys(None, keys.loss, keys.grad_norm, keys.lr, keys.eval_loss)
        steps = _steps(table.train, None)
        table.notes.append("the epoch counter repeats across readings: steps are row numbers")
    hist = History(source, table.format, keys=keys.describe(), notes=list(table.notes))
    hist.step_source = keys.step or "row number"
    if keys.step is None and table.train.n and not coarse:
        hist.notes.append("no step counter in this log: steps are row numbers")
    _series(hist, table.train, keys, steps)
    events = _signals(table.train, steps)
    for ev in table.events:
        step = _event_step(ev, steps, keys.step == "epoch")
        if step is not None:
            ev["step"] = step  # in place: the table's events are not kept
        if step is not None or ev.get("kind") not in ("checkpoint", "overflow", "nonfinite"):
            events.append(ev)
    hist.events = sorted(events, key=lambda e: (e.get("step") is None, e.get("step") or 0))
    _eval(hist, table, keys)
    _check(hist, keys, table, source)
    return hist


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


def _eval(hist: History, table: Table, keys: Keys) -> None:
    cols, eval_keys = _eval_keys(table, keys)
    if not eval_keys:
        return
    counter = table.counter or step_key(cols)
    seen: dict[float, float] = {}
    for i in range(cols.n):
        value = _sum([cols.get(k, i) for k in eval_keys])
        step = cols.get(counter, i) if counter else float(i)
        if value is not None and step is not None:
            seen.setdefault(step, value)
    hist.eval_steps = sorted(seen)
    hist.eval_loss = [seen[s] for s in hist.eval_steps]
    hist.keys["eval_loss"] = "+".join(eval_keys)


def _check(hist: History, keys: Keys, table: Table, source: str) -> None:
    has_loss = hist.loss.data.count(MISSING) < len(hist.loss)
    has_signal = hist.grad_norm.data.count(MISSING) < len(hist.grad_norm) or any(
        e.get("kind") == "nonfinite" for e in hist.events
    )
    if has_loss:
        return
    if has_signal:
        hist.notes.append("no training loss in this log: judged on the grad norm and NaN signals")
        return
    seen = sorted(set(table.train.cols) | set(table.eval.cols))[:20]
    raise InputError(
        f"'{source}': no training loss found ({table.format}; keys seen: {seen or 'none'}); "
        "name it with --loss KEY"
    )
