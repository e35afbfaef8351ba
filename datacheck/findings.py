"""Findings as columnar data, and the quarantine file (a public contract; the code calls it
the manifest, its old name).

``quarantine.parquet`` has one row per bad value-site:

========  ========  =======================================================================
column    type      meaning
========  ========  =======================================================================
path      string    the input file, as the report names it
row       int64     0-based row (sample) index in the file; null for file/column findings
column    string    column or tensor key; null for file-level findings
check     string    check name (``nan``, ``inf``, ``null``, ``extreme``, ``corrupt``, ...)
severity  string    ``error`` or ``warning``
value     string    the (first) bad value in that row, or a message; nullable
count     int32     bad values at this site (elements of a vector; 1 for a scalar)
========  ========  =======================================================================

Findings are built straight from NumPy index arrays into Arrow columns: no Python object per
finding, so a shard that is 10% NaN stays cheap.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.checks._numpy import Hits
from datacheck.checks._registry import Severity

MANIFEST_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("row", pa.int64()),
        pa.field("column", pa.string()),
        pa.field("check", pa.string()),
        pa.field("severity", pa.string()),
        pa.field("value", pa.string()),
        pa.field("count", pa.int32()),
    ]
)
_DICT = pa.dictionary(pa.int32(), pa.string())
_COMPACT_SCHEMA = pa.schema(
    [
        pa.field("path", _DICT),
        pa.field("row", pa.int64()),
        pa.field("column", _DICT),
        pa.field("check", _DICT),
        pa.field("severity", _DICT),
        pa.field("value", _DICT),
        pa.field("count", pa.int32()),
    ]
)


# Arrays are built from NumPy buffers directly: ``pa.array`` imports pandas (~0.3 s) on its
# first call, a cost a Parquet scan should not pay.
_NP_TYPES = {
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.float64): pa.float64(),
}


def _numeric(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_NP_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)])


def _strings(texts: Sequence[str]) -> pa.Array:
    data = [t.encode() for t in texts]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)


def _const(text: str | None, n: int) -> pa.Array:
    """A length-``n`` dictionary array holding one string: O(n) int32 indices, one string."""
    if text is None:
        return pa.nulls(n, _DICT)
    return pa.DictionaryArray.from_arrays(_numeric(np.zeros(n, dtype=np.int32)), _strings([text]))


def _value_strings(hits: Hits) -> pa.Array:
    """The bad values as (dictionary-encoded) strings; NaN/Inf without formatting each one."""
    n = len(hits.rows)
    if hits.check == "nan":  # a NaN is "nan" (its value need not be carried)
        return _const("nan", n)
    if hits.values is None:
        return _const(None, n)
    if hits.check == "inf":
        indices = _numeric((hits.values < 0).astype(np.int32))
        return pa.DictionaryArray.from_arrays(indices, _strings(["inf", "-inf"]))
    return pc.dictionary_encode(pc.cast(_numeric(hits.values.astype(np.float64)), pa.string()))


def hits_table(path: str, column: str | None, hits: Hits, row_offset: int) -> pa.Table:
    """Findings of one check in one column of a chunk, as a compact Arrow table."""
    n = len(hits.rows)
    return pa.table(
        [
            _const(path, n),
            _numeric((hits.rows + row_offset).astype(np.int64)),
            _const(column, n),
            _const(hits.check, n),
            _const(hits.severity.value, n),
            _value_strings(hits),
            _numeric(np.minimum(hits.counts, np.iinfo(np.int32).max).astype(np.int32)),
        ],
        schema=_COMPACT_SCHEMA,
    )


@dataclass(frozen=True)
class Finding:
    """A single file- or column-level finding (row null), e.g. ``corrupt`` or ``schema``."""

    path: str
    check: str
    severity: Severity
    value: str | None = None
    column: str | None = None
    row: int | None = None
    count: int = 1


_INT32_MAX = int(np.iinfo(np.int32).max)


def _validity(present: list[bool]) -> pa.Buffer | None:
    if all(present):
        return None
    return pa.py_buffer(np.packbits(np.array(present, dtype=bool), bitorder="little"))


def _text_column(texts: list[str | None]) -> pa.Array:
    """Nullable strings, dictionary-encoded, built from buffers (``pa.array`` on a Python list
    imports pandas in pyarrow: half a second in every worker that reports a corrupt file)."""
    data = [t.encode() if t is not None else b"" for t in texts]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    valid = _validity([t is not None for t in texts])
    buffers = [valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    return pc.dictionary_encode(pa.Array.from_buffers(pa.string(), len(data), buffers))


def _int_column(values: list[int | None], dtype: type[np.integer], arrow: pa.DataType) -> pa.Array:
    raw = np.array([v if v is not None else 0 for v in values], dtype=dtype)
    valid = _validity([v is not None for v in values])
    return pa.Array.from_buffers(arrow, len(values), [valid, pa.py_buffer(raw)])


def findings_table(findings: Sequence[Finding]) -> pa.Table:
    """A compact table from a few scalar findings (file/column level: never millions)."""
    counts = [min(f.count, _INT32_MAX) for f in findings]  # the report's counts are exact
    columns = [
        _text_column([f.path for f in findings]),
        _int_column([f.row for f in findings], np.int64, pa.int64()),
        _text_column([f.column for f in findings]),
        _text_column([f.check for f in findings]),
        _text_column([f.severity.value for f in findings]),
        _text_column([f.value for f in findings]),
        _int_column(list(counts), np.int32, pa.int32()),
    ]
    return pa.Table.from_arrays(columns, schema=_COMPACT_SCHEMA)


def empty_table() -> pa.Table:
    return pa.Table.from_arrays(
        [pa.nulls(0, f.type) for f in _COMPACT_SCHEMA], schema=_COMPACT_SCHEMA
    )


def concat(tables: Iterable[pa.Table]) -> pa.Table:
    """Concatenate compact tables (dictionaries are unified lazily by Arrow)."""
    tables = list(tables)
    if not tables:
        return empty_table()
    return pa.concat_tables(tables)


def _part_path(parts_dir: str | os.PathLike[str], key: str) -> Path:
    return Path(parts_dir) / f"{hashlib.sha1(key.encode()).hexdigest()[:20]}.arrow"


class PartWriter:
    """Writes one unit's findings as an Arrow IPC stream, a table at a time (bounded memory:
    a unit with millions of findings spills them here as it goes).

    Written to a temporary name and renamed on :meth:`close`, so a killed process leaves the
    whole file or none.  No fsync per part (it dominated small scans): after a machine crash
    a part may be damaged, and the resume journal then scans its unit again
    (:func:`part_is_readable`).  The stream format lets each table carry its own dictionaries.
    """

    def __init__(self, parts_dir: str | os.PathLike[str], key: str) -> None:
        self.dest = _part_path(parts_dir, key)
        self._tmp = self.dest.with_name(self.dest.name + ".tmp")
        self._sink = pa.OSFile(str(self._tmp), "wb")
        # LZ4: a row's six dictionary indices are mostly constant, they shrink ~10x.
        options = pa.ipc.IpcWriteOptions(compression="lz4")
        self._writer = pa.ipc.new_stream(self._sink, _COMPACT_SCHEMA, options=options)
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Append findings (compact tables, concatenated: one dictionary per column)."""
        if table.num_rows:
            self._writer.write_table(table.unify_dictionaries().combine_chunks())
            self.rows += table.num_rows

    def close(self) -> str:
        """Finish the part and give it its final name; returns its path."""
        self._writer.close()
        self._sink.close()
        os.replace(self._tmp, self.dest)
        return str(self.dest)


def write_part(table: pa.Table, parts_dir: str | os.PathLike[str], key: str) -> str:
    """Write one unit's findings as a part (:class:`PartWriter`) and return its path."""
    writer = PartWriter(parts_dir, key)
    writer.write(table)
    return writer.close()


def _open_part(source: pa.NativeFile) -> Any:
    """A part's reader: an IPC stream, or an IPC file (parts of older versions)."""
    head = source.read(6)
    source.seek(0)
    return pa.ipc.open_file(source) if head == b"ARROW1" else pa.ipc.open_stream(source)


def read_part(path: str | os.PathLike[str]) -> pa.Table:
    """A part written by :func:`write_part` (memory-mapped: the findings are not copied)."""
    with pa.memory_map(str(path)) as source:
        return _open_part(source).read_all()


def iter_part(path: str | os.PathLike[str]) -> Iterator[pa.Table]:
    """A part's findings a table at a time (one spill each), read, not mapped: memory stays
    bounded by a spill however many findings the part holds."""
    with pa.OSFile(str(path)) as source:
        reader = _open_part(source)
        if isinstance(reader, pa.ipc.RecordBatchStreamReader):
            for batch in reader:
                yield pa.Table.from_batches([batch])
        else:
            yield reader.read_all()


def part_is_readable(path: str | os.PathLike[str]) -> bool:
    """True when a part file exists and its messages frame to the end (headers only: a part
    of 2**26 findings is checked in milliseconds, not decompressed)."""
    try:
        with pa.memory_map(str(path)) as source:
            if source.read(6) == b"ARROW1":  # a part of an older version: its footer reads
                source.seek(0)
                pa.ipc.open_file(source)
                return True
            source.seek(0)
            messages = pa.ipc.MessageReader.open_stream(source)
            kinds = []
            while True:
                try:
                    kinds.append(messages.read_next_message().type)
                except StopIteration:
                    return bool(kinds) and kinds[0] == "schema"
    except (OSError, pa.ArrowException):
        return False


class ManifestWriter:
    """Appends findings to ``quarantine.parquet`` one row group at a time (bounded memory)."""

    def __init__(self, dest: Path) -> None:
        self._dest = dest
        # Dictionary columns are written as they are: without the Arrow schema stored, the
        # file reads back as plain strings, and nothing is decoded per row here.
        # Strings dictionary-encoded, row/count delta-encoded (rows ascend within a site
        # list), statistics only where readers prune on them: ~0.2 bytes per finding.
        strings = ["path", "column", "check", "severity", "value"]
        self._writer = pq.ParquetWriter(
            dest,
            _COMPACT_SCHEMA,
            compression="zstd",
            store_schema=False,
            use_dictionary=strings,
            write_statistics=["path", "row", "check"],
            column_encoding={"row": "DELTA_BINARY_PACKED", "count": "DELTA_BINARY_PACKED"},
        )
        self.rows = 0

    def append(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table.cast(_COMPACT_SCHEMA))
            self.rows += table.num_rows

    def close(self) -> None:
        self._writer.close()


def read_manifest(path: str | os.PathLike[str], columns: list[str] | None = None) -> pa.Table:
    """Read a quarantine file back with the contract's plain types."""
    table = pq.read_table(path, columns=columns)
    return table.cast(pa.schema([MANIFEST_SCHEMA.field(n) for n in table.column_names]))
