"""What a Parquet footer declares, checked before anything is allocated.

A Parquet file states its row counts, value counts and byte sizes in its footer, and pyarrow
allocates what they say: a 1 KB file claiming 2**40 rows grows a reader past any memory.
:func:`declared_batch_rows` checks those numbers against each other and against the bytes
that exist, and says how to read a row group within the unit's memory budget.

pyarrow aborts the process (an uncaught C++ exception) when asked for the metadata of an
encrypted column, so :func:`encrypted_columns` tells such files apart first.
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
_BATCH_SHARE = 8
"""A streamed row group is read in batches of at most this fraction of the budget ..."""
_MAX_BATCH_ROWS = 1 << 16
"""... and of at most this many rows."""


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
    return int(max(1, min(_MAX_BATCH_ROWS, budget / _BATCH_SHARE / max(row_bytes, 1))))


_SIGNATURE = 28
"""Bytes after the Thrift footer of a plaintext footer with encrypted columns (AES-GCM nonce
and tag, the footer's signature)."""


def encrypted_columns(path: str, meta: pq.FileMetaData) -> bool:
    """True if the file's footer holds more than its Thrift metadata: the signature of a
    plaintext footer with encrypted columns (28 bytes), or anything odd there.  pyarrow says
    how many bytes it parsed (``serialized_size``); the footer's length is in the file's last
    8 bytes: no parsing of our own (a Python Thrift walk took 0.4 s per MB of footer)."""
    try:
        src = _storage.source(path)
        with open(src, "rb") if isinstance(src, str) else src as fh:
            fh.seek(-8, 2)
            tail = fh.read(8)
    except OSError:
        return True
    length = struct.unpack("<i", tail[:4])[0] if len(tail) == 8 else -1
    return tail[4:] != b"PAR1" or length != meta.serialized_size


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
