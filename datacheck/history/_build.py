"""From a reader's table to a :class:`History`: steps, the chosen series, events with steps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from datacheck.errors import InputError
from datacheck.history._keys import Keys, Overrides, choose_keys, eval_loss_key, step_key
from datacheck.history._table import Columns, Table, norm_key, role_of

__all__ = ["History", "build"]


@dataclass
class History:
    """A training history: per-step series under the chosen keys, evaluation, and events."""

    source: str
    format: str
    steps: list[float] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    grad_norm: list[float | None] = field(default_factory=list)
    lr: list[float | None] = field(default_factory=list)
    keys: dict[str, str | None] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    """Guard events and signals found in the log (``checkpoint``, ``overflow``, ``nonfinite``),
    each with a ``step``."""
    eval_steps: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    step_source: str = "row number"
    """The counter the steps come from, or ``row number`` when the log has none."""
    notes: list[str] = field(default_factory=list)


def _series(cols: Columns, keys: Keys) -> list[tuple[float | None, ...]]:
    """Per row: (step, loss, grad norm, lr, nan count, skipped count, scale)."""
    get = cols.get
    signals = [
        next((k for k in sorted(cols.cols) if role_of(k) == role), None)
        for role in ("nan_count", "skipped_count", "scale")
    ]
    single = keys.loss[0] if len(keys.loss) == 1 else None
    out = []
    for i in range(cols.n):
        loss = get(single, i) if single is not None else _sum([get(k, i) for k in keys.loss])
        out.append(
            (
                get(keys.step, i) if keys.step else None,
                loss,
                get(keys.grad_norm, i) if keys.grad_norm else None,
                get(keys.lr, i) if keys.lr else None,
                *(get(k, i) if k else None for k in signals),
            )
        )
    return out


def _sum(parts: list[float | None]) -> float | None:
    """The sum of loss components; NaN if one is NaN, ``None`` if one is missing."""
    if not parts:
        return None
    if any(p is not None and math.isnan(p) for p in parts):
        return math.nan
    if any(p is None for p in parts):
        return None
    return math.fsum(p for p in parts if p is not None)


def _steps(rows: list[tuple[float | None, ...]], counted: bool) -> tuple[list[float], int]:
    """Steps per row (forward-filled), and the first row that is data (the preamble ends)."""
    if not counted:
        return [float(i) for i in range(len(rows))], 0
    first = next((i for i, r in enumerate(rows) if r[0] is not None), len(rows))
    steps, last = [], math.nan
    for r in rows:
        last = r[0] if r[0] is not None else last
        steps.append(last)
    return steps, first


def _event_step(ev: dict[str, Any], steps: list[float], first: int, epoch: bool) -> float | None:
    if isinstance(ev.get("step"), (int, float)):
        return float(ev["step"])
    if "at" in ev and (ev.get("unit") == "epoch") == epoch:
        return float(ev["at"])
    # A line naming its step in another unit follows the step it names; one naming none
    # (an overflow, "saving checkpoint to out") comes before the step line it belongs to.
    row = ev.get("prev_row") if "at" in ev else ev.get("row")
    if row is None or row < first or row >= len(steps):
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
    return cols.tail(first)


def build(table: Table, overrides: Overrides, source: str) -> History:
    """Choose keys, give rows their steps, merge rows of one step, attach events."""
    table.train = _without_preamble(table, overrides)
    keys = choose_keys(table.train, overrides, source)
    if table.counter and not overrides.step:
        keys = Keys(table.counter, keys.loss, keys.grad_norm, keys.lr, keys.eval_loss)
    rows = _series(table.train, keys)
    coarse = keys.step == "epoch" and len({r[0] for r in rows}) < 0.9 * len(rows)
    if coarse and not overrides.step:
        keys = Keys(None, keys.loss, keys.grad_norm, keys.lr, keys.eval_loss)
        table.notes.append("the epoch counter repeats across readings: steps are row numbers")
    steps, first = _steps(rows, keys.step is not None)
    hist = History(source, table.format, keys=keys.describe(), notes=list(table.notes))
    hist.step_source = keys.step or "row number"
    if keys.step is None and rows and not coarse:
        hist.notes.append("no step counter in this log: steps are row numbers")
    merged: dict[float, list[Any]] = {}
    events: list[dict[str, Any]] = []
    for i in range(first, len(rows)):
        step, loss, gnorm, lr, nans, skipped, scale = rows[i]
        if math.isnan(steps[i]):
            continue
        slot = merged.setdefault(steps[i], [None, None, None])
        for j, value in enumerate((loss, gnorm, lr)):
            if slot[j] is None:
                slot[j] = value
        if nans:
            events.append({"kind": "nonfinite", "step": steps[i], "count": nans})
        if skipped:
            events.append({"kind": "overflow", "step": steps[i], "count": skipped, "scale": scale})
        elif scale is not None and scale <= 1:
            events.append({"kind": "overflow", "step": steps[i], "count": 0, "scale": scale})
    for s in sorted(merged):
        hist.steps.append(s)
        hist.loss.append(merged[s][0])
        hist.grad_norm.append(merged[s][1])
        hist.lr.append(merged[s][2])
    for ev in table.events:
        step = _event_step(ev, steps, first, keys.step == "epoch")
        if step is not None or ev.get("kind") not in ("checkpoint", "overflow", "nonfinite"):
            events.append({**ev, "step": step} if step is not None else ev)
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
    has_loss = any(v is not None for v in hist.loss)
    has_signal = any(v is not None for v in hist.grad_norm) or any(
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
