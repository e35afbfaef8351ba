"""What crosses the executor seam: a unit function, the units, and the poison callback.

An executor runs ``fn(unit)`` for every unit and yields the results as they finish.  When a
unit cannot be run at all (it crashed every process that read it), the executor yields
``on_poison(unit, message)`` instead; what that result looks like is the caller's business.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Unit(Protocol):
    """The little an executor reads of a unit: its size, to plan and balance the work."""

    @property
    def size(self) -> int: ...

    @property
    def n_parts(self) -> int: ...


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


__all__ = ["OnPoison", "Unit", "UnitFn", "call_after_import"]
