"""What crosses the executor seam: a unit function, the units, and the poison callback.

An executor runs ``fn(unit)`` for every unit and yields the results as they finish.  When a
unit cannot be run at all (it crashed every process that read it), the executor yields
``on_poison(unit, message)`` instead; what that result looks like is the caller's business.
A result may name files it left on the worker that made it (:class:`WorkerFiles`); an
executor whose workers do not share the caller's filesystem brings them over.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

BATCH_UNITS = 64
"""Most small units sent to a worker as one job (one message each way): a JPEG is a millisecond
to decode, a round trip to the parent a tenth of that."""
BATCH_BYTES = 8 << 20
"""Most data (the units' own sizes, per part) in one job: a bigger unit is a job of its own."""


class Unit(Protocol):
    """The little an executor reads of a unit: its size, to plan and balance the work."""

    @property
    def size(self) -> int: ...

    @property
    def n_parts(self) -> int: ...


@runtime_checkable
class WorkerFiles(Protocol):
    """A result that names files written on the worker that made it, too large to send back
    with it (a unit's findings, a part at a time): the executor copies them to the caller's
    side, removes them from the worker and hands the caller ``localised(moved)``."""

    def worker_files(self) -> list[str]:
        """Paths on the worker (none: nothing to fetch)."""
        ...

    def localised(self, moved: dict[str, str]) -> Any:
        """This result with each worker path replaced by the local copy in ``moved``."""
        ...


UnitFn = Callable[[Any], Any]
"""The picklable function run on each unit (workers must be able to import it by name)."""

OnPoison = Callable[[Any, str], Any]
"""``on_poison(unit, message)``: the result to yield for a unit that could not be run."""


def call_after_import(modules: Sequence[str], fn: UnitFn, unit: Any) -> Any:
    """``fn(unit)`` once ``modules`` are imported: plugin formats registered in a worker too.

    Bound with :func:`functools.partial` to make a unit function for workers that did not
    start from this process (dask workers).
    """
    for name in modules:
        importlib.import_module(name)
    return fn(unit)


def batches(units: Sequence[Unit], workers: int) -> list[list[int]]:
    """Consecutive units grouped into jobs: up to :data:`BATCH_UNITS` and :data:`BATCH_BYTES`
    each, and at least four jobs per worker while units last (the end of the run balanced)."""
    most = max(1, min(BATCH_UNITS, len(units) // max(4 * workers, 1)))
    out: list[list[int]] = []
    size = 0
    for i, unit in enumerate(units):
        weight = unit.size // max(unit.n_parts, 1)
        if not out or len(out[-1]) >= most or size + weight > BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(i)
        size += weight
    return out


__all__ = [
    "BATCH_BYTES",
    "BATCH_UNITS",
    "OnPoison",
    "Unit",
    "UnitFn",
    "batches",
    "call_after_import",
]
