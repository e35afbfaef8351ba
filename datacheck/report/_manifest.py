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

__all__ = ["BATCH_ROWS", "count_by", "iter_manifest", "manifest_rows"]

BATCH_ROWS = 1 << 16
"""Rows decoded at a time: ~2 MB of plain columns, whatever the manifest's size."""

_COUNT_ROWS = 1 << 18
"""Rows counted at a time: codes only (~5 MB), so larger batches than for views."""

_TEXT = ("path", "column", "check", "severity", "value")


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
            hit = pc.fill_null(pc.is_in(values, pa.array(wanted, pa.string())), False)
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
    out: dict[tuple[Any, ...], int] = {}
    read = [*keys, "row"] if rows_only and "row" not in keys else keys
    for table in iter_manifest(path, read, where, batch_rows=_COUNT_ROWS, plain=False):
        keep = np.asarray(pc.is_valid(table["row"])) if rows_only else slice(None)
        codes, labels = [], []
        for k in keys:
            arr = table[k].combine_chunks()
            if not pa.types.is_dictionary(arr.type):
                arr = pc.dictionary_encode(arr)
            # a null is one more code, after the dictionary's
            n = len(arr.dictionary)
            codes.append(np.asarray(arr.indices.fill_null(n).to_numpy(), dtype=np.int64)[keep])
            labels.append([*arr.dictionary.to_pylist(), None])
        sizes = [len(x) for x in labels]
        per_code = np.bincount(np.ravel_multi_index(codes, sizes), minlength=int(np.prod(sizes)))
        for code in np.flatnonzero(per_code).tolist():
            at = np.unravel_index(code, sizes)
            key = tuple(labels[i][int(c)] for i, c in enumerate(at))
            out[key] = out.get(key, 0) + int(per_code[code])
    return out
