"""Executors: run work units and stream their small results back, chosen by name.

``inprocess`` runs units one after another in this process; ``processes`` runs them on a local
pool of worker processes (a worker per core by default).  Both take the same unit function and
yield results as units finish, so the caller can drive a progress bar.  The dask.distributed
executor plugs in here too (``distributed``), imported only when asked for.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from datacheck.errors import UsageError
from datacheck.formats import WorkUnit

UnitFn = Callable[[WorkUnit], Any]

__all__ = ["EXECUTORS", "default_workers", "run_units"]


def default_workers() -> int:
    """A worker per core available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _inprocess(fn: UnitFn, units: Sequence[WorkUnit], workers: int, **_: Any) -> Iterator[Any]:
    for unit in units:
        yield fn(unit)


def _processes(fn: UnitFn, units: Sequence[WorkUnit], workers: int, **_: Any) -> Iterator[Any]:
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


EXECUTORS: dict[str, Callable[..., Iterator[Any]]] = {
    "inprocess": _inprocess,
    "processes": _processes,
}


def run_units(
    fn: UnitFn, units: Sequence[WorkUnit], executor: str = "auto", workers: int | None = None,
    **kwargs: Any,
) -> Iterator[Any]:
    """Run ``fn`` over ``units`` on the named executor, yielding results as they finish.

    ``auto`` picks ``processes`` when there are several workers and enough work to pay for
    starting them (more than one unit and over 64 MiB), else ``inprocess``.
    """
    workers = workers or default_workers()
    if executor == "auto":
        total = sum(u.size // max(u.n_parts, 1) for u in units)
        executor = "processes" if workers > 1 and len(units) > 1 and total > (64 << 20) else "inprocess"
    if executor == "distributed":
        from datacheck._distributed import run_distributed  # imports dask only now

        return run_distributed(fn, units, workers, **kwargs)
    try:
        runner = EXECUTORS[executor]
    except KeyError:
        valid = ", ".join(sorted([*EXECUTORS, "auto", "distributed"]))
        raise UsageError(f"unknown executor {executor!r}; valid: {valid}") from None
    return runner(fn, units, workers, **kwargs)
