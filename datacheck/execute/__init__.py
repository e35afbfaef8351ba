"""Executors: run a function over work units, chosen by name; they know nothing of the units.

``inprocess`` runs units one after another in one worker process; ``processes`` on a local
pool of worker processes; ``distributed`` on a dask.distributed cluster (dask is imported only
then).  All take the same unit function, yield results as units finish, and turn a unit that
cannot be run (it crashed the processes that read it, or ran out of time) into
``on_poison(unit, message)``: a native crash in a reader never ends the scan.  Only
``inprocess`` with ``isolate=False`` runs units in the calling process itself (opt-in: a
crashing reader then ends the scan).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from datacheck.errors import UsageError
from datacheck.execute._base import OnPoison, Unit, UnitFn, WorkerFiles, call_after_import
from datacheck.execute._local import default_workers, run_inprocess, run_processes
from datacheck.execute._workers import prestart as _prestart

__all__ = [
    "EXECUTOR_NAMES",
    "OnPoison",
    "UnitFn",
    "WorkerFiles",
    "check_executor",
    "default_workers",
    "prestart",
    "run_units",
]

EXECUTOR_NAMES: tuple[str, ...] = ("auto", "inprocess", "processes", "distributed")
"""Every executor name the API and the CLI accept (``auto`` picks one of the others)."""

AUTO_MIN_BYTES = 64 << 20
"""``auto`` starts worker processes only for more work than this (and several units): bytes
of columnar reading, or the caller's estimate of the work (``work=``)."""


def check_executor(name: str) -> str:
    """``name`` if it is an executor, else a UsageError listing the valid ones."""
    if name not in EXECUTOR_NAMES:
        raise UsageError(f"unknown executor {name!r}; valid: {', '.join(EXECUTOR_NAMES)}")
    return name


def prestart(executor: str, isolate: bool = True, preload: Sequence[str] = ()) -> None:
    """Start a local worker process now (importing ``preload``) if ``executor`` will want one,
    so that its start-up overlaps the caller's own work before :func:`run_units`."""
    if executor in ("auto", "inprocess", "processes") and (isolate or executor == "processes"):
        _prestart(preload)


def _auto(units: Sequence[Unit], workers: int, work: int | None) -> str:
    total = work if work is not None else sum(u.size // max(u.n_parts, 1) for u in units)
    several = workers > 1 and len(units) > 1
    return "processes" if several and total > AUTO_MIN_BYTES else "inprocess"


def run_units(
    fn: UnitFn,
    units: Sequence[Any],
    executor: str = "auto",
    workers: int | None = None,
    *,
    on_poison: OnPoison,
    isolate: bool = True,
    unit_timeout: float | None = None,
    unit_memory: int | None = None,
    preload: Sequence[str] = (),
    work: int | None = None,
    **kwargs: Any,
) -> Iterator[Any]:
    """Run ``fn`` over ``units`` on the named executor, yielding results as they finish.

    ``auto`` picks ``processes`` when there are several workers and enough work to pay for
    starting them (more than one unit and over 64 MiB), else ``inprocess``.  The work is the
    units' bytes, or ``work`` when the caller knows better (a thousand small images are more
    work than their bytes say: ``formats.estimated_work``).

    Args:
        on_poison: builds the result of a unit that crashed two worker processes or ran out
            of time.
        isolate: False runs ``inprocess`` units in this process (no crash isolation, no time
            limit); the other executors always isolate.
        unit_timeout: seconds a unit may run on the local executors (0: no limit; None: 300 s
            plus a second per 4 MiB of the unit).
        unit_memory: bytes of memory a local worker may hold while reading a unit (0: no
            limit; None: half the machine's memory shared by the workers, at least 2 GiB).
        preload: modules workers import first (plugin formats).
        work: the units' work as bytes of columnar reading, for ``auto`` (default: bytes).
        kwargs: options of the ``distributed`` executor.
    """
    workers = workers or default_workers()
    executor = check_executor(executor)
    if executor == "auto":
        executor = _auto(units, workers, work)
    if executor == "distributed":
        from datacheck.execute._dask import run_distributed  # imports dask only now

        if preload:
            fn = partial(call_after_import, tuple(preload), fn)
        return run_distributed(fn, units, workers, on_poison=on_poison, **kwargs)
    runner = run_processes if executor == "processes" else run_inprocess
    return runner(
        fn,
        units,
        workers,
        on_poison,
        isolate=isolate,
        unit_timeout=unit_timeout,
        unit_memory=unit_memory,
        preload=preload,
    )
