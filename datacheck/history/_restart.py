"""Where to restart from, and at what LR, once the timeline has found the first sign of trouble.

The restart step is the last checkpoint the log names before the first sign of trouble (saved
before it in log order, of a step before it), else the last reading still *on the plateau*: a
reading already halfway from the level to the spike threshold (``level x (1 + (ratio - 1) /
2)``, 1.25x with the default ratio of 1.5) is off it, so a run that drifted up for a few
readings before the spike restarts before the drift.  The suggested LR is half the last
*stable* LR before that point (an LR raised more than 2x in one reading shortly before is not
stable: the LR before the raise is).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from datacheck.history._build import History
from datacheck.history._table import MISSING

__all__ = ["restart"]

_LR_JUMP = 2.0


def _checkpoints(hist: History, first: int, first_step: float) -> list[tuple[int, float]]:
    """(index, step) of the checkpoints saved before reading ``first`` of a step before it."""
    out = []
    for ev in hist.events:
        if ev.get("kind") != "checkpoint":
            continue
        at = ev.get("at_step", ev.get("step"))  # a guard checkpoint holds the state before at_step
        index = ev.get("index")
        if index is None and isinstance(at, (int, float)):
            index = hist.index_of_step(float(at))
        if (
            isinstance(at, (int, float))
            and index is not None
            and index <= first
            and at < first_step
        ):
            out.append((int(index), float(at)))
    return out


def _finite_lrs(hist: History, end: int) -> Iterator[tuple[float, float]]:
    """``(step, lr)`` of the readings before position ``end`` with a finite LR, last first."""
    steps, lrs = hist.steps.data, hist.lr.data
    for i in range(min(end, len(lrs)) - 1, -1, -1):
        lr = lrs[i]
        if lr != MISSING and math.isfinite(lr):
            yield steps[i], lr


def _on_plateau(hist: History, first: int, level: float | None, ratio: float) -> int:
    """The last reading before ``first`` not already off the plateau (-1: none)."""
    losses, steps = hist.loss.data, hist.steps.data
    j = min(first, len(steps)) - 1
    while j >= 0 and first < len(steps) and steps[j] == steps[first]:
        j -= 1  # an earlier reading of the trouble's own step is no step before it
    if level is None or not level > 0:
        return j
    off = level * (1 + (ratio - 1) / 2)
    while j >= 0 and losses[j] != MISSING and math.isfinite(losses[j]) and losses[j] >= off:
        j -= 1
    return j


def restart(
    hist: History,
    found: dict[str, Any],
    first: int,
    level: float | None,
    ratio: float,
    lookback: int,
    first_step: float | None = None,
) -> None:
    """Fill ``restart_step``, ``restart_from`` and the LR into ``found`` (the first sign of
    trouble at reading ``first``, at ``first_step``: by default that reading's step)."""
    steps = hist.steps.data
    if first_step is None:
        first_step = steps[first] if first < len(steps) else math.inf
    good = _checkpoints(hist, first, first_step)
    if good:
        index, step = max(good)
        found["restart_step"], found["restart_from"] = step, "checkpoint"
        # A guard checkpoint "at step N" holds the state before step N ran: its LR is N-1's.
        end = min(hist.index_of_step(step), first)
    else:
        j = _on_plateau(hist, first, level, ratio)
        if j < 0:
            return
        found["restart_step"], found["restart_from"] = steps[j], "last healthy step"
        end = j + 1
    lrs = _finite_lrs(hist, end)
    last = next(lrs, None)
    if last is None:
        return
    stable = last[1]
    s, b = last
    for prev_step, a in lrs:
        if s < first_step - lookback:
            break
        if a > 0 and b >= _LR_JUMP * a:
            stable, found["lr_raised_step"] = a, s
            break
        s, b = prev_step, a
    found.update(restart_lr=stable, suggested_lr=stable / 2)
