"""Compact series for a history: 8 bytes a reading, read back as floats (or ``None``).

A history of a 1 GB log holds millions of readings; a Python list of float objects costs ~32
bytes a reading, an ``array('d')`` 8.  These wrap an array and read like the lists they
replace: index, iterate, slice (to a list), compare equal to a list of the same values.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Self, overload

from datacheck.history._table import MISSING

__all__ = ["Floats", "Series"]


class _Column:
    __slots__ = ("data",)

    def __init__(self, values: Iterable[float] = ()) -> None:
        self.data = array("d", values)

    @classmethod
    def wrap(cls, data: array[float]) -> Self:
        """A series over ``data`` itself, not a copy (``MISSING`` in it reads as ``None``)."""
        column = cls.__new__(cls)
        column.data = data
        return column

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[float | None]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, equal to lists

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    @property
    def nbytes(self) -> int:
        """Bytes the readings take (not counting the array's spare room)."""
        return len(self.data) * self.data.itemsize


class Floats(_Column, Sequence[float]):
    """Floats in an ``array('d')``: the steps of a history (never missing)."""

    __slots__ = ()

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> list[float]: ...
    def __getitem__(self, i: int | slice) -> float | list[float]:
        return self.data[i].tolist() if isinstance(i, slice) else self.data[i]

    def __iter__(self) -> Iterator[float]:
        return iter(self.data)

    def append(self, value: float) -> None:
        """Add a reading at the end."""
        self.data.append(value)

    def insert(self, i: int, value: float) -> None:
        """Add a reading before position ``i``."""
        self.data.insert(i, value)


class Series(_Column, Sequence[float | None]):
    """Floats or ``None``: a series of a history, where a step may lack a reading.

    ``None`` is stored as :data:`~datacheck.history._table.MISSING`; NaN stays NaN (a
    non-finite reading, not a missing one).
    """

    __slots__ = ()

    def __init__(self, values: Iterable[float | None] = ()) -> None:
        super().__init__(MISSING if v is None else v for v in values)

    @overload
    def __getitem__(self, i: int) -> float | None: ...
    @overload
    def __getitem__(self, i: slice) -> list[float | None]: ...
    def __getitem__(self, i: int | slice) -> float | None | list[float | None]:
        if isinstance(i, slice):
            return [None if v == MISSING else v for v in self.data[i]]
        v = self.data[i]
        return None if v == MISSING else v

    def __setitem__(self, i: int, value: float | None) -> None:
        self.data[i] = MISSING if value is None else value

    def __iter__(self) -> Iterator[float | None]:
        return (None if v == MISSING else v for v in self.data)

    def append(self, value: float | None) -> None:
        """Add a reading (``None``: none at this step) at the end."""
        self.data.append(MISSING if value is None else value)

    def insert(self, i: int, value: float | None) -> None:
        """Add a reading (``None``: none at this step) before position ``i``."""
        self.data.insert(i, MISSING if value is None else value)
