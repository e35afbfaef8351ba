"""HDF5 datasets of ragged rows (variable-length numbers: a PyTables ``VLArray``, an h5py
``vlen_dtype`` dataset): each row an array of its own length.

They are read a block of rows at a time and handed to the checks as an Arrow list column (the
values with their row offsets), so a NaN in row 17 is a finding at row 17, counted per row,
as in a ``list<float>`` Parquet column.  The chunks carry no sample count of their own: the
file's rows are the longest dataset's, ragged ones included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from datacheck.formats import Chunk, Opened
from datacheck.formats._tensor_common import NUMERIC_KINDS, SampleChunk

__all__ = ["Ragged", "ragged_base", "with_ragged"]

BLOCK_ROWS = 4096
"""Rows of a ragged dataset read at once (each row's values live in the file: a row cannot
claim more than the file holds)."""


@dataclass(frozen=True)
class Ragged:
    """A 1-d dataset of variable-length numeric rows, by its path in the file."""

    name: str
    rows: int
    base: np.dtype


def ragged_base(dt: np.dtype, shape: tuple[int, ...]) -> np.dtype | None:
    """The numeric element type of a 1-d vlen dtype (None: not ragged numbers)."""
    import h5py

    base = h5py.check_vlen_dtype(dt)
    if base is None or base in (str, bytes) or len(shape) != 1:
        return None
    base = np.dtype(base).newbyteorder("=")  # Arrow holds native byte order only
    return base if base.kind in NUMERIC_KINDS and base.kind != "c" else None


def _block(ds: Any, lo: int, hi: int, base: np.dtype) -> Any:
    """Rows ``[lo, hi)`` as an Arrow list array of ``base`` values."""
    import pyarrow as pa

    rows = ds[lo:hi]
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(rows).astype(base, copy=False) if offsets[-1] else np.empty(0, base)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def _chunks(fh: Any, ragged: list[Ragged]) -> Iterator[Chunk]:
    import pyarrow as pa

    for r in ragged:
        ds = fh[r.name]
        for lo in range(0, r.rows, BLOCK_ROWS):
            hi = min(r.rows, lo + BLOCK_ROWS)
            batch = pa.table({r.name: _block(ds, lo, hi, r.base)})
            yield SampleChunk(row_offset=lo, batch=batch, samples=0)
        del ds


def with_ragged(base: Opened, fh: Any, ragged: list[Ragged]) -> Opened:
    """``base`` followed by the ragged datasets' rows, the file closed after both; the rows
    only ragged datasets have are counted in a last chunk."""
    read = base.expected_rows or 0
    total = max(read, *(r.rows for r in ragged)) if ragged else read

    def chunks() -> Iterator[Chunk]:
        try:
            yield from base.chunks
            yield from _chunks(fh, ragged)
            if total > read:
                yield SampleChunk(row_offset=read, tensors={}, samples=total - read)
        finally:
            fh.close()

    return Opened(base.columns, chunks(), expected_rows=total, extra=base.extra)
