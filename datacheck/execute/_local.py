"""The local executors: ``inprocess`` (one unit after another here) and ``processes`` (a pool).

Both take the unit function and yield results as units finish, so the caller can drive a
progress bar.  They know nothing of what a unit does.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from datacheck.execute._base import OnPoison, Unit, UnitFn

__all__ = ["default_workers", "run_inprocess", "run_processes"]


def default_workers() -> int:
    """A worker per core available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_inprocess(
    fn: UnitFn, units: Sequence[Unit], workers: int, on_poison: OnPoison, **_: Any
) -> Iterator[Any]:
    for unit in units:
        yield fn(unit)


def run_processes(
    fn: UnitFn, units: Sequence[Unit], workers: int, on_poison: OnPoison, **_: Any
) -> Iterator[Any]:
    ctx = mp.get_context("spawn")  # no fork: Arrow's thread pools do not survive it
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    try:
        pending = {pool.submit(fn, u) for u in units[: workers * 2]}
        queue = list(units[workers * 2 :])
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                if queue:
                    pending.add(pool.submit(fn, queue.pop(0)))
                yield fut.result()
    except BaseException:  # Ctrl-C, SIGTERM, an early close: stop now, do not wait for units
        _stop(pool)
        raise
    pool.shutdown()


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel queued units and end the worker processes without waiting for running ones."""
    procs = list(getattr(pool, "_processes", {}).values())  # no public handle on the workers
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)
