"""Reading ``quarantine.parquet`` back, a batch at a time: the one reader every view uses.

A manifest can hold 2**27 findings in a few hundred kilobytes (a NaN column compresses to
nothing); read whole it is gigabytes.  Views therefore never load it: they stream it in
batches of :data:`BATCH_ROWS` rows, skip row groups that a filter on ``path`` or ``check``
rules out (the manifest stores statistics for those columns), keep what they need in bounded
structures (counts, the first few per key) and stop as soon as they have it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["BATCH_ROWS", "codes", "count_by", "iter_manifest", "manifest_rows", "string_array"]

BATCH_ROWS = 1 << 16
"""Rows decoded at a time: ~2 MB of plain columns, whatever the manifest's size."""

_COUNT_ROWS = 1 << 18
"""Rows counted at a time: codes only (~5 MB), so larger batches than for views."""

_TEXT = ("path", "column", "check", "severity", "value")


def string_array(texts: Iterable[str]) -> pa.Array:
    """Strings as an Arrow array without ``pa.array`` (which imports pandas: 0.3 s a process)."""
    from datacheck.findings import _strings

    return _strings(list(texts))


def codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[Any]]:
    """(int64 code per value, the dictionary's values): a null's code is the dictionary's
    length.  Read from the buffers: ``to_numpy``, ``fill_null`` and ``pa.scalar`` import
    pandas (0.3 s a process)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    from datacheck.checks._columns import validity

    indices, labels = arr.indices, arr.dictionary.to_pylist()
    width = np.dtype(f"i{indices.type.bit_width // 8}")
    out = np.frombuffer(
        indices.buffers()[1],
        dtype=width,
        count=len(indices),
        offset=indices.offset * width.itemsize,
    ).astype(np.int64)
    if indices.null_count:
        out[~validity(indices)] = len(labels)
    return out, labels


def _plain(table: pa.Table) -> pa.Table:
    """The contract's plain types (strings, int64 row, int32 count)."""
    fields = [
        pa.field(n, pa.string() if n in _TEXT else table.schema.field(n).type)
        for n in table.column_names
    ]
    return table.cast(pa.schema(fields))


def _keep_group(meta: Any, where: Mapping[str, Iterable[str]], names: list[str]) -> bool:
    """False when a row group's statistics rule out every wanted value of a filtered column."""
    for column, wanted in where.items():
        if column not in names:
            continue
        stats = meta.column(names.index(column)).statistics
        if stats is None or not stats.has_min_max:
            continue
        lo, hi = stats.min, stats.max
        lo = lo.decode() if isinstance(lo, bytes) else lo
        hi = hi.decode() if isinstance(hi, bytes) else hi
        if not any(lo <= w <= hi for w in wanted):
            return False
    return True


def manifest_rows(path: str | os.PathLike[str]) -> int:
    """Findings in a manifest, from its footer (nothing decoded); 0 when there is none."""
    if not os.path.exists(path):
        return 0
    return int(pq.ParquetFile(path).metadata.num_rows)


def iter_manifest(
    path: str | os.PathLike[str],
    columns: list[str],
    where: Mapping[str, Iterable[str]] | None = None,
    rows_only: bool = False,
    batch_rows: int | None = None,
    plain: bool = True,
) -> Iterator[pa.Table]:
    """The manifest's findings, ``batch_rows`` at a time, as plain-typed tables.

    Args:
        path: a ``quarantine.parquet``; none there gives nothing.
        columns: the manifest columns to read.
        where: keep only findings whose column value is one of the given strings
            (``{"check": ["drift"]}``); row groups that cannot hold one are skipped unread.
        rows_only: keep only row-level findings (``row`` not null).
        batch_rows: rows per batch (default :data:`BATCH_ROWS`).
        plain: text columns as strings (the contract's types); False keeps each batch's
            dictionary arrays (for counting on their codes).
    """
    if not os.path.exists(path):
        return
    where = {k: [str(v) for v in vs] for k, vs in (where or {}).items()}
    read = list(dict.fromkeys([*columns, *where, *(["row"] if rows_only else [])]))
    pf = pq.ParquetFile(path, read_dictionary=[c for c in read if c in _TEXT])
    names = pf.schema_arrow.names
    groups = [
        i
        for i in range(pf.metadata.num_row_groups)
        if _keep_group(pf.metadata.row_group(i), where, names)
    ]
    if not groups:
        return
    size = batch_rows or BATCH_ROWS
    for batch in pf.iter_batches(batch_size=size, row_groups=groups, columns=read):
        table = pa.Table.from_batches([batch])
        mask = None
        for column, wanted in where.items():
            values = table[column].cast(pa.string())
            hit = pc.is_in(values, string_array(wanted))  # a null is never in it: False
            mask = hit if mask is None else pc.and_(mask, hit)
        if rows_only:
            valid = pc.is_valid(table["row"])
            mask = valid if mask is None else pc.and_(mask, valid)
        if mask is not None:
            table = table.filter(mask)
        if table.num_rows:
            table = table.select(columns)
            yield _plain(table) if plain else table


def count_by(
    path: str | os.PathLike[str],
    keys: list[str],
    where: Mapping[str, Iterable[str]] | None = None,
    rows_only: bool = False,
) -> dict[tuple[Any, ...], int]:
    """Findings per distinct value of ``keys`` (a tuple per group), streamed."""
    from datacheck.checks._columns import validity

    out: dict[tuple[Any, ...], int] = {}
    read = [*keys, "row"] if rows_only and "row" not in keys else keys
    for table in iter_manifest(path, read, where, batch_rows=_COUNT_ROWS, plain=False):
        keep = validity(table["row"].combine_chunks()) if rows_only else slice(None)
        per_key, labels = [], []
        for k in keys:
            c, values = codes(table[k])
            per_key.append(c[keep])
            labels.append([*values, None])  # a null's code is one past the dictionary
        sizes = [len(x) for x in labels]
        flat = np.ravel_multi_index(per_key, sizes)
        per_code = np.bincount(flat, minlength=int(np.prod(sizes)))
        for code in np.flatnonzero(per_code).tolist():
            at = np.unravel_index(code, sizes)
            key = tuple(labels[i][int(c)] for i, c in enumerate(at))
            out[key] = out.get(key, 0) + int(per_code[code])
    return out
