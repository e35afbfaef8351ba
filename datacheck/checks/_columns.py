"""Arrow columns -> flat NumPy buffers + row maps, for the value checks.

Scalar numeric columns are viewed zero-copy.  ``list`` / ``large_list`` / ``fixed_size_list``
columns (embeddings) are flattened to their child values; the row map sends every element back
to the row that holds it, and is computed only when a check actually finds something.  Null list
slots are reported as ``null`` at their row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck.checks._numpy import RowMap


@dataclass
class FlatColumn:
    """A column's numeric leaf values, their validity, and how they map to rows."""

    values: np.ndarray
    valid: np.ndarray | None
    rowmap: RowMap
    row_nulls: np.ndarray | None = None
    """Rows whose whole value (the list itself) is null."""


class _Lazy:
    """Parent indices computed on first use (only when a check hits something)."""

    def __init__(self, fn: Callable[[], np.ndarray]) -> None:
        self._fn, self._arr = fn, None

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        if self._arr is None:
            self._arr = self._fn()
        return self._arr[idx]


def is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t)


def leaf_type(t: pa.DataType) -> pa.DataType:
    while is_list_type(t):
        t = t.value_type
    return t


_NUMPY_TYPES = {
    pa.float16(): np.float16,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
}


def _has_struct(t: pa.DataType) -> bool:
    while is_list_type(t):
        t = t.value_type
    return pa.types.is_struct(t)


def leaves(name: str, arr: pa.Array) -> Iterator[tuple[str, pa.Array]]:
    """A column split at its struct fields: ``col.field`` arrays, also inside lists.

    ``struct<a: double>`` yields ``col.a``; ``list<struct<a: double>>`` yields ``col.a`` as a
    ``list<double>`` with the same offsets and nulls, so rows stay the column's rows.  Any
    other column is yielded as it is.
    """
    t = arr.type
    if not _has_struct(t):
        yield name, arr
    elif pa.types.is_struct(t):
        for field, child in zip(t, arr.flatten(), strict=True):  # merges the struct's nulls
            yield from leaves(f"{name}.{field.name}", child)
    elif pa.types.is_fixed_size_list(t):
        k = t.list_size
        mask = arr.is_null() if arr.null_count else None
        for leaf_name, values in leaves(name, arr.values.slice(arr.offset * k, len(arr) * k)):
            yield leaf_name, pa.FixedSizeListArray.from_arrays(values, k, mask=mask)
    else:
        mask = arr.is_null() if arr.null_count else None
        for leaf_name, values in leaves(name, arr.values):
            yield leaf_name, type(arr).from_arrays(arr.offsets, values, mask=mask)


def validity(arr: pa.Array) -> np.ndarray:
    """True where ``arr`` holds a value, read from its validity bitmap (``np.asarray`` of
    Arrow's ``is_valid()`` would import pandas: half a second per worker process)."""
    n = len(arr)
    if not arr.null_count:
        return np.ones(n, dtype=bool)
    buf = arr.buffers()[0] if not pa.types.is_null(arr.type) else None
    if buf is None:  # a null-typed column, or a type with no bitmap of its own
        return np.zeros(n, dtype=bool) if pa.types.is_null(arr.type) else _bools(arr.is_valid())
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + n].astype(bool)


def _bools(arr: pa.Array) -> np.ndarray:
    """A boolean Arrow array without nulls as NumPy, through its bitmap (no pandas)."""
    bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + len(arr)].astype(bool)


def _primitive(arr: pa.Array) -> FlatColumn:
    """A zero-copy NumPy view of the values buffer (``to_numpy`` would import pandas)."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    dtype = np.dtype(_NUMPY_TYPES[arr.type])
    # count/offset, not the whole buffer: a file's buffer may be longer than its values and
    # not a whole number of them (validation checks it is long enough, not its exact size)
    values = np.frombuffer(
        arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize
    )
    valid = validity(arr) if arr.null_count else None
    return FlatColumn(values, valid, RowMap(len(arr)))


def _parents(arr: pa.Array) -> np.ndarray:
    """Row of every element of ``arr.flatten()`` (null slots contribute no elements)."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0)
    counts = np.frombuffer(
        lengths.buffers()[1], dtype=np.int32 if lengths.type == pa.int32() else np.int64
    )
    counts = counts[lengths.offset : lengths.offset + len(lengths)]
    return np.repeat(np.arange(len(arr), dtype=np.int64), counts)


def flatten(arr: pa.Array) -> FlatColumn:
    """Flatten a numeric (possibly nested list) Arrow array for the value checks."""
    n, t = len(arr), arr.type
    if not is_list_type(t):
        return _primitive(arr)
    row_nulls = ~validity(arr) if arr.null_count else None
    if pa.types.is_fixed_size_list(t) and arr.null_count == 0:
        k = t.list_size
        child = arr.values.slice(arr.offset * k, n * k)
        to_row: Callable[[np.ndarray], np.ndarray] = lambda idx: idx // k  # noqa: E731
        direct = RowMap(n, stride=k)
    else:
        child = arr.flatten()  # skips the elements behind null slots, so parents must too
        parents = _Lazy(lambda: _parents(arr))
        to_row = parents.__getitem__
        direct = RowMap(n, parents=parents)
    inner = flatten(child)
    if inner.rowmap.identity:
        rowmap = direct
    else:
        inner_rows = inner.rowmap.rows
        rowmap = RowMap(n, fn=lambda idx: to_row(inner_rows(idx)))
    return FlatColumn(inner.values, inner.valid, rowmap, row_nulls)
