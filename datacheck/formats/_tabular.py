"""Tabular readers: Parquet and Arrow IPC / Feather (streaming), and the text formats' shared
opener (:func:`_open_text`): CSV in :mod:`._csv`, JSON Lines in :mod:`._json_lines`."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.errors import InputError
from datacheck.formats import (
    COMPRESSIONS,
    Chunk,
    Format,
    Opened,
    WorkUnit,
    _storage,
    keep_mask,
    memory_budget,
    register,
)
from datacheck.formats._feather_v1 import check_feather_v1
from datacheck.formats._parquet_meta import (
    bounded_dictionaries,
    declared_batch_rows,
    dictionary_text_columns,
    encrypted_columns,
)

T = TypeVar("T")

_BLOCK_BYTES = 16 << 20
INTEGER_COLUMNS = "datacheck.integer_columns"
"""Batch metadata key: columns read as float64 that hold integers in the file (CSV)."""


def _type_names(schema: pa.Schema) -> dict[str, str]:
    return {f.name: str(f.type) for f in schema}


def _batches_with_offsets(batches: Iterator[pa.RecordBatch], start: int) -> Iterator[Chunk]:
    offset = start
    for batch in batches:
        n = batch.num_rows
        yield Chunk(row_offset=offset, batch=batch)
        del batch
        offset += n


class ParquetFormat(Format):
    name = "parquet"
    extensions = (".parquet", ".parq", ".pq")

    def sniff(self, head: bytes) -> bool:
        return head[:4] == b"PAR1"

    def plan(self, path: str, size: int, unit_bytes: int) -> list[dict[str, Any]]:
        if size <= unit_bytes:
            return [{}]
        try:
            meta = pq.read_metadata(_storage.source(path))
        except Exception:  # noqa: BLE001 - the unit's own read reports the damage
            return [{}]
        units, start, offset, acc, rows_before = [], 0, 0, 0, 0
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            acc += rg.total_byte_size
            if acc >= unit_bytes or i == meta.num_row_groups - 1:
                units.append({"row_groups": (start, i + 1), "row_offset": offset})
                rows_before += sum(meta.row_group(j).num_rows for j in range(start, i + 1))
                start, offset, acc = i + 1, rows_before, 0
        return units

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        # No memory map: mapped pages would count against RSS for the whole file.
        pf = pq.ParquetFile(_storage.source(unit.path), page_checksum_verification=True)
        meta = pf.metadata
        lo, hi = unit.row_groups or (0, meta.num_row_groups)
        budget = memory_budget(options)
        # Every row group's declared sizes are checked before the first is read (pyarrow
        # aborts the process on the metadata of an encrypted column: its read raises instead).
        skip = encrypted_columns(unit.path, meta)
        batch_rows = [None if skip else declared_batch_rows(meta, i, budget) for i in range(lo, hi)]
        expected = sum(meta.row_group(i).num_rows for i in range(lo, hi))
        schema = pf.schema_arrow
        # Text that may decode past the budget is read as dictionaries, decoded once its size
        # is known (bounded_dictionaries); other text is read as pyarrow reads it (faster).
        as_dict = [] if skip else self._dictionary_columns(unit, meta, schema, lo, hi, budget)
        if as_dict:
            pf = pq.ParquetFile(
                _storage.source(unit.path), page_checksum_verification=True, read_dictionary=as_dict
            )

        def chunks() -> Iterator[Chunk]:
            offset = unit.row_offset
            for i, rows in zip(range(lo, hi), batch_rows, strict=True):
                if rows is None:  # fits the budget decoded: the fast whole-group read
                    pieces: Iterator[Any] = iter([pf.read_row_group(i)])
                else:  # streamed a bounded batch at a time
                    pieces = pf.iter_batches(batch_size=rows, row_groups=[i], use_threads=False)
                for table in pieces:
                    table = bounded_dictionaries(table, budget, f"row group {i}", as_dict)
                    n = table.num_rows
                    yield Chunk(row_offset=offset, batch=table)
                    del table  # never hold two row groups at once
                    offset += n

        names, stream = _type_names(schema), chunks()
        if b"huggingface" in (schema.metadata or {}):  # written by datasets: its features
            from datacheck.formats._hf import hf_features, media_chunks, media_labels
            from datacheck.schema._media import media_rules

            if media := hf_features(schema, None):
                names |= media_labels(media)
                stream = media_chunks(stream, unit.path, media, media_rules(options).images)
        return Opened(names, stream, expected_rows=expected, arrow_schema=schema)

    @staticmethod
    def _dictionary_columns(
        unit: WorkUnit, meta: Any, schema: pa.Schema, lo: int, hi: int, budget: float
    ) -> list[str]:
        text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_binary(f.type)]
        text += [f.name for f in schema if pa.types.is_large_string(f.type)]
        text += [f.name for f in schema if pa.types.is_large_binary(f.type)]
        if not text or budget == float("inf"):
            return []
        probe = pq.ParquetFile(_storage.source(unit.path), read_dictionary=text)
        return dictionary_text_columns(meta, schema, range(lo, hi), probe, budget)

    def tables(
        self,
        path: str,
        options: Mapping[str, Any],
        *,
        rows: np.ndarray | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[tuple[int, pa.Table]]:
        """Row groups as tables; with ``rows``, only the groups holding one of them are read."""
        pf = pq.ParquetFile(_storage.source(path))
        sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
        ends = np.cumsum(sizes, dtype=np.int64)
        groups = np.arange(len(sizes))
        if rows is not None:
            groups = np.unique(np.searchsorted(ends, rows, side="right"))
        names = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
        for g in groups[groups < len(sizes)]:
            yield int(ends[g] - sizes[g]), pf.read_row_group(int(g), columns=names)

    def write_without(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        """Row group by row group, with the source's compression codec."""
        pf = pq.ParquetFile(path)
        meta = pf.metadata
        codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "snappy"
        rows_in = rows_out = 0
        with pq.ParquetWriter(dest, pf.schema_arrow, compression=codec) as writer:
            for i in range(meta.num_row_groups):
                table = pf.read_row_group(i)
                kept = table.filter(keep_mask(rows_in, table.num_rows, drop))
                rows_in, rows_out = rows_in + table.num_rows, rows_out + kept.num_rows
                if kept.num_rows:
                    writer.write_table(kept)
        return rows_in, rows_out


class _Streamed(Format):
    """Formats rewritten chunk by chunk through a writer on a (compressed) output stream."""

    def _writer(self, path: str, stream: pa.NativeFile, schema: pa.Schema) -> Any:
        raise NotImplementedError

    def write_without(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        return self.exact(lambda opts: self._copy(path, dest, drop, opts), options)

    def _copy(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        codec = COMPRESSIONS.get(os.path.splitext(path)[1].lower())  # x.csv.gz stays gzip
        stream = writer = None
        rows_in = rows_out = 0
        try:
            for start, table in self.tables(path, options):
                if writer is None:
                    stream = pa.output_stream(dest, compression=codec)
                    schema = table.schema
                    writer = self._writer(path, stream, schema)
                kept = self.restore(table.filter(keep_mask(start, table.num_rows, drop)), options)
                rows_in, rows_out = rows_in + table.num_rows, rows_out + kept.num_rows
                if kept.num_rows:
                    writer.write_table(kept.cast(schema))
        finally:
            if writer is not None:
                writer.close()
            if stream is not None:
                stream.close()
        if writer is None:  # no rows at all: keep the header as it was
            import shutil

            shutil.copyfile(path, dest)
        return rows_in, rows_out


class _TextFormat(_Streamed):
    """CSV and JSON Lines: types are inferred, so integers need care to come back exact."""

    def exact(self, fn: Callable[[Mapping[str, Any]], T], options: Mapping[str, Any]) -> T:
        """Integer columns read as integers; when a later ``nan`` or ``1.5`` makes that fail,
        read them as float64 and restore the integral ones (:meth:`restore`)."""
        try:
            return fn({**options, "keep_integers": True})
        except pa.ArrowInvalid:
            return fn({**options, "widened": True})

    def restore(self, table: pa.Table, options: Mapping[str, Any]) -> pa.Table:
        if not options.get("widened"):
            return table
        table = restore_integers(table)
        for name, col in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_floating(col.type) and (pc.max(pc.abs(col)).as_py() or 0) >= 2**53:
                raise InputError(
                    f"column {name!r} holds integers beyond 2**53 next to non-integers; "
                    "they cannot be copied exactly: use exclusion_list() instead"
                )
        return table


def _open_text(
    make_reader: Any,
    declared: dict[str, pa.DataType],
    keep_integers: bool = False,
    check_utf8: bool = False,
    chunker: Callable[[Iterator[pa.RecordBatch]], Iterator[Chunk]] | None = None,
) -> Opened:
    """Open a text format (CSV, JSON Lines) whose integer columns are read as float64.

    Types are inferred from the first block only, and a schema's ``int64`` is a promise the
    file may break: an integer column may hold ``1.5`` or ``nan`` further down, which is data
    to check, not damage.  Such columns are read as float64, reported with their integer
    dtype, and marked (:data:`INTEGER_COLUMNS`) so they get no float16 bound.
    ``keep_integers`` reads them as integers instead (exact beyond 2**53; fails on a ``nan``):
    for copying rows, not for checking them.  ``check_utf8`` validates the text of every
    batch (Arrow's JSON reader keeps bytes that are not UTF-8 inside strings as they are).
    ``chunker`` turns the batches into chunks (default: one per batch, rows in sequence).
    """
    chunks = chunker or (lambda batches: _batches_with_offsets(batches, 0))
    if keep_integers:
        reader = make_reader(dict(declared))
        _require_text(reader.schema)
        plain = _utf8_checked(iter(reader)) if check_utf8 else iter(reader)
        return Opened(_type_names(reader.schema), chunks(plain), arrow_schema=reader.schema)
    ints = {n for n, t in declared.items() if pa.types.is_integer(t)}
    types = {n: pa.float64() if n in ints else t for n, t in declared.items()}
    reader = make_reader(types)
    inferred = {
        f.name for f in reader.schema if pa.types.is_integer(f.type) and f.name not in types
    }
    if inferred:
        reader.close()
        types.update(dict.fromkeys(inferred, pa.float64()))
        reader = make_reader(types)
    ints |= inferred
    _require_text(reader.schema)
    names = _type_names(reader.schema)
    names.update({n: str(declared.get(n, pa.int64())) for n in ints if n in names})
    batches: Any = _utf8_checked(iter(reader)) if check_utf8 else iter(reader)
    if ints:
        mark = {INTEGER_COLUMNS: ",".join(sorted(ints))}
        batches = (b.replace_schema_metadata(mark) for b in batches)
    return Opened(names, chunks(batches), arrow_schema=reader.schema)


_STRING_INDEX = re.compile(r"Invalid UTF8 sequence at string index (\d+)")


def _has_text(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return True
    return any(_has_text(t.field(i).type) for i in range(t.num_fields))


def _utf8_checked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Batches whose text columns hold valid UTF-8; else a ValueError naming the row (the
    batch's rows for a string nested in a list or struct) and the column."""
    offset = 0
    for batch in batches:
        for name, col in zip(batch.schema.names, batch.columns, strict=True):
            if not _has_text(col.type):
                continue
            try:
                col.validate(full=True)
            except pa.ArrowInvalid as exc:
                m = _STRING_INDEX.search(str(exc))
                top = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
                where = (
                    f"row {offset + int(m.group(1))}"
                    if m and top
                    else f"rows {offset}..{offset + batch.num_rows - 1}"
                )
                raise ValueError(
                    f"{where}, column {name!r}: a string holds bytes that are not valid UTF-8"
                ) from None
        offset += batch.num_rows
        yield batch


def restore_integers(table: pa.Table) -> pa.Table:
    """Columns a text reader widened to float64 back to int64 where every value is integral
    (a column holding ``nan`` or ``1.5`` stays float64)."""
    meta = table.schema.metadata or {}
    for name in filter(None, meta.get(INTEGER_COLUMNS.encode(), b"").decode().split(",")):
        if name not in table.column_names:
            continue
        try:
            ints = table[name].cast(pa.int64())  # safe cast: refuses fractions, NaN, overflow
        except pa.ArrowInvalid:
            continue
        table = table.set_column(table.column_names.index(name), name, ints)
    return table


def _require_text(schema: pa.Schema) -> None:
    """Arrow infers ``binary`` for bytes that are not UTF-8: in a text file that is damage."""
    for f in schema:
        if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            raise ValueError(f"column {f.name!r} holds bytes that are not valid UTF-8 text")


class ArrowFormat(_Streamed):
    name = "arrow"
    extensions = (".arrow", ".feather", ".ipc", ".arrows")

    def sniff(self, head: bytes) -> bool:
        return head[:6] == b"ARROW1" or head[:4] == b"FEA1"

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        remote = _storage.is_url(unit.path)
        source = pa.PythonFile(_storage.source(unit.path)) if remote else pa.memory_map(unit.path)
        head = source.read(6)
        source.seek(0)
        if head == b"ARROW1":
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        elif head[:4] == b"FEA1":  # Feather v1: no streaming API, read once.
            import pyarrow.feather as feather

            check_feather_v1(source)  # pyarrow trusts the metadata: damaged, it crashed
            table = feather.read_table(source, memory_map=not remote)
            table.validate(full=True)  # before to_batches, which trusts the row count
            reader, batches = table, iter(table.to_batches())
        else:
            reader = pa.ipc.open_stream(source)
            batches = iter(reader)
        schema = reader.schema
        chunks = _batches_with_offsets(_validated(batches, memory_budget(options)), 0)
        return Opened(_type_names(schema), chunks, arrow_schema=schema)

    def _writer(self, path: str, stream: pa.NativeFile, schema: pa.Schema) -> Any:
        return pa.ipc.new_file(stream, schema)


def _validated(batches: Iterator[pa.RecordBatch], budget: float) -> Iterator[pa.RecordBatch]:
    """IPC batches fully validated (offsets, lengths, UTF-8) before any check reads them: the
    format stores buffers as they are, and a damaged offset would read out of bounds.  Text
    dictionaries must decode within ``budget`` (the checks decode them)."""
    for i, batch in enumerate(batches):
        batch.validate(full=True)
        yield bounded_dictionaries(batch, budget, f"batch {i}")


for _fmt in (ParquetFormat(), ArrowFormat()):  # CSV: ._csv; JSON Lines: ._json_lines
    register(_fmt)
