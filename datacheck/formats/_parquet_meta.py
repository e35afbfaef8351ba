"""What a Parquet footer declares, checked before anything is allocated.

A Parquet file states its row counts, value counts and byte sizes in its footer, and pyarrow
allocates what they say: a 1 KB file claiming 2**40 rows grows a reader past any memory.
:func:`declared_batch_rows` checks those numbers against each other and against the bytes
that exist, and says how to read a row group within the unit's memory budget.

pyarrow aborts the process (an uncaught C++ exception) when asked for the metadata of an
encrypted column, so :func:`encrypted_columns` reads the footer's own Thrift fields first.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.formats import _storage, mib

__all__ = [
    "bounded_dictionaries",
    "declared_batch_rows",
    "dictionary_text_columns",
    "encrypted_columns",
]

_FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_MIN_PAGE_BYTES = 8
"""Fewest bytes a data page takes in a column chunk (its header alone is more)."""
_PAGE_VALUES = 1 << 31
"""Most values one data page holds (its header counts them in an int32)."""


def declared_batch_rows(meta: pq.FileMetaData, i: int, budget: float) -> int | None:
    """Rows to read row group ``i`` by, from what its metadata declares, or None to read it
    whole (it fits ``budget`` decoded).

    Raises:
        ValueError: the declared sizes contradict each other or the bytes that exist (a row
            count no column chunk holds, more values than its pages could count), or one value
            would take more than ``budget`` decoded: the file is refused before allocating.
    """
    rg = meta.row_group(i)
    rows = rg.num_rows
    if rows < 0:
        raise ValueError(f"row group {i} claims {rows} rows")
    row_bytes = 0.0
    for j in range(rg.num_columns):
        c = rg.column(j)
        where = f"row group {i}, column {c.path_in_schema!r}"
        if c.num_values < rows:
            raise ValueError(
                f"{where}: the row group claims {rows} rows, the column holds {c.num_values} values"
            )
        pages = -(-c.num_values // _PAGE_VALUES)
        if c.total_compressed_size < pages * _MIN_PAGE_BYTES:
            raise ValueError(
                f"{where}: {c.num_values} values claimed in {c.total_compressed_size} bytes "
                f"(at least {pages} data pages are needed): a lying header"
            )
        width = _FIXED_WIDTH.get(c.physical_type)
        if width is None:  # BYTE_ARRAY / FIXED_LEN_BYTE_ARRAY: the declared bytes per value
            per_value = c.total_uncompressed_size / max(c.num_values, 1)
            if per_value > budget:
                raise ValueError(
                    f"{where}: {c.total_uncompressed_size} bytes for {c.num_values} values "
                    f"decoded, a value over the {mib(budget)} a unit may decode at once "
                    "(raise --unit-memory-mb to read it)"
                )
            width = per_value + 4
        row_bytes += width * c.num_values / max(rows, 1)
    if row_bytes * rows <= budget:
        return None
    return int(max(1, min(1 << 16, budget / MEMORY_SHARE_ROWS / max(row_bytes, 1))))


MEMORY_SHARE_ROWS = 8
"""A streamed row group is read in batches of at most this fraction of the budget."""


_MAX_FOOTER = 64 << 20
"""A footer longer than this is not parsed here (pyarrow refuses or reads it)."""
_ENCRYPTION_FIELD = 8
"""FileMetaData.encryption_algorithm: set in a plaintext footer with encrypted columns."""


def encrypted_columns(path: str) -> bool:
    """True if the file's plaintext footer declares encrypted columns (or cannot be parsed
    here: then pyarrow's own read reports it).  Reads the footer's top-level Thrift fields."""
    try:
        src = _storage.source(path)
        with open(src, "rb") if isinstance(src, str) else src as fh:
            fh.seek(-8, 2)
            tail = fh.read(8)
            length = struct.unpack("<i", tail[:4])[0]
            if tail[4:] != b"PAR1" or not 0 < length <= _MAX_FOOTER:
                return True
            fh.seek(-8 - length, 2)
            footer = fh.read(length)
        return _ENCRYPTION_FIELD in _ThriftFields(footer).top_level()
    except (OSError, ValueError, IndexError, struct.error):
        return True


class _ThriftFields:
    """The field ids of a Thrift compact-protocol struct, nested values skipped."""

    _FIXED = {3: 1, 4: None, 5: None, 6: None, 7: 8}  # byte, i16/i32/i64 varints, double
    _MAX_DEPTH = 64

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def top_level(self) -> set[int]:
        ids, last = set(), 0
        while (header := self._byte()) != 0:
            last = self._field_id(header, last)
            ids.add(last)
            self._skip(header & 0x0F, 0)
        return ids

    def _byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def _varint(self) -> int:
        out = shift = 0
        while True:
            b = self._byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ValueError("varint too long")

    def _field_id(self, header: int, last: int) -> int:
        delta = header >> 4
        if delta:
            return last + delta
        v = self._varint()
        return (v >> 1) ^ -(v & 1)

    def _skip(self, kind: int, depth: int) -> None:
        if depth > self._MAX_DEPTH:
            raise ValueError("Thrift nested too deep")
        if kind in (1, 2):  # a bool field: the value is in the type
            return
        if kind in self._FIXED:
            size = self._FIXED[kind]
            if size is None:
                self._varint()
            else:
                self.pos += size
        elif kind == 8:  # binary
            size = self._varint()
            self.pos += size
        elif kind in (9, 10):  # list, set
            head = self._byte()
            n = head >> 4 if head >> 4 != 15 else self._varint()
            for _ in range(n):
                self._skip(head & 0x0F if head & 0x0F not in (1, 2) else 3, depth + 1)
        elif kind == 11:  # map
            n = self._varint()
            if n:
                types = self._byte()
                for _ in range(n):
                    self._skip(types >> 4, depth + 1)
                    self._skip(types & 0x0F, depth + 1)
        elif kind == 12:  # struct
            last = 0
            while (header := self._byte()) != 0:
                last = self._field_id(header, last)
                self._skip(header & 0x0F, depth + 1)
        else:
            raise ValueError(f"unknown Thrift type {kind}")
        if self.pos > len(self.data):
            raise ValueError("footer cut short")


def _is_text(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def dictionary_text_columns(
    meta: pq.FileMetaData, schema: pa.Schema, groups: range, probe: pq.ParquetFile, budget: float
) -> list[str]:
    """Top-level text columns that may decode past ``budget``: to be read as dictionaries
    (indices + values, their size on disk) and decoded once the size is known.

    A column chunk's values are its plain pages (within its declared bytes) or indices into
    its one dictionary page, so it decodes to at most ``values * longest entry`` more than
    its bytes: a 1 KB file can repeat a 1 MiB entry a million times.  ``probe`` (a file
    reading these columns as dictionaries) reads each dictionary page to know the longest.
    """
    leaf = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    out = []
    for f in schema:
        j = leaf.get(f.name)
        if j is None or not _is_text(f.type):
            continue
        for i in groups:
            c = meta.row_group(i).column(j)
            if c.has_dictionary_page and c.num_values:
                first = next(probe.iter_batches(1, row_groups=[i], columns=[f.name]), None)
                words = first.column(0).dictionary if first is not None else pa.array([])
                longest = pc.max(pc.binary_length(words)).as_py() or 0
                if c.num_values * longest + c.total_uncompressed_size > budget:
                    out.append(f.name)
                    break
    return out


def bounded_dictionaries(
    batch: pa.Table | pa.RecordBatch, budget: float, where: str, decode: Sequence[str] = ()
) -> pa.Table | pa.RecordBatch:
    """``batch`` with the text dictionaries it holds checked against ``budget`` decoded, and
    those named in ``decode`` decoded (columns a reader read as dictionaries itself).

    Raises:
        ValueError: a column's values would take more than ``budget`` bytes decoded.
    """
    for i, f in enumerate(batch.schema):
        if not (pa.types.is_dictionary(f.type) and _is_text(f.type.value_type)):
            continue
        column = batch.column(i)
        pieces = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        size = 0
        for piece in pieces:
            lengths = pc.binary_length(piece.dictionary)
            size += pc.sum(lengths.take(piece.indices)).as_py() or 0
        if size > budget:
            raise ValueError(
                f"{where}, column {f.name!r}: its dictionary decodes to {size} bytes, over the "
                f"{mib(budget)} a unit may decode at once (raise --unit-memory-mb to read it)"
            )
        if f.name in decode:
            plain = column.cast(f.type.value_type)
            batch = batch.set_column(i, f.with_type(f.type.value_type), plain)
    return batch
