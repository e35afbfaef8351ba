"""The local executors: ``inprocess`` (one unit after another) and ``processes`` (a pool).

Both run units in isolated worker processes (:mod:`~datacheck.execute._workers`): a reader that
crashes natively on a file ends its worker, never the scan.  ``inprocess`` uses one worker, so
units run one after another; with ``isolate=False`` it runs them in this very process instead
(no worker to start, but a crashing reader then ends the scan, and there is no time limit).
Both yield results as units finish, so the caller can drive a progress bar; they know nothing
of what a unit does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from datacheck.execute._base import OnPoison, Unit, UnitFn
from datacheck.execute._workers import run_isolated

__all__ = ["default_workers", "run_inprocess", "run_processes"]


def default_workers() -> int:
    """A worker per core available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_inprocess(
    fn: UnitFn,
    units: Sequence[Unit],
    workers: int,
    on_poison: OnPoison,
    *,
    isolate: bool = True,
    unit_timeout: float | None = None,
    unit_memory: int | None = None,
    preload: Sequence[str] = (),
) -> Iterator[Any]:
    """One unit after another: in one worker process, or here when ``isolate`` is False."""
    if isolate:
        return run_isolated(
            fn,
            units,
            1,
            on_poison,
            unit_timeout=unit_timeout,
            unit_memory=unit_memory,
            preload=preload,
        )
    return (fn(unit) for unit in units)


def run_processes(
    fn: UnitFn,
    units: Sequence[Unit],
    workers: int,
    on_poison: OnPoison,
    *,
    isolate: bool = True,
    unit_timeout: float | None = None,
    unit_memory: int | None = None,
    preload: Sequence[str] = (),
) -> Iterator[Any]:
    """Units on ``workers`` worker processes (always isolated)."""
    return run_isolated(
        fn,
        units,
        workers,
        on_poison,
        unit_timeout=unit_timeout,
        unit_memory=unit_memory,
        preload=preload,
    )
