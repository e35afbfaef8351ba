"""Sample findings: the first few per check and per file, for the terminal and the HTML page.

Like pandera's failure cases and Great Expectations' sample values: enough to see what went
wrong without opening ``quarantine.parquet``.  Picked with NumPy over the manifest's
dictionary codes (no Python object per finding), errors before warnings, in file and row order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from datacheck.report._data import ReportData

__all__ = ["COLUMNS", "first_per", "sample_findings"]

COLUMNS = ["path", "row", "column", "check", "severity", "value", "count"]


def _codes(col: pa.ChunkedArray) -> np.ndarray:
    arr = col.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    return np.asarray(arr.indices.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def first_per(table: pa.Table, key: str, k: int) -> pa.Table:
    """The first ``k`` rows of ``table`` for each value of ``key``, errors before warnings,
    otherwise in table order."""
    if not table.num_rows or k < 1:
        return table.slice(0, 0)
    codes = _codes(table[key])
    warn = np.asarray(pc.equal(table["severity"].cast(pa.string()), "warning").fill_null(False))
    order = np.lexsort((warn, codes))  # stable: by key, errors first, then table order
    ranked = codes[order]
    new = np.r_[True, ranked[1:] != ranked[:-1]]
    starts = np.flatnonzero(new)
    position = np.arange(len(ranked)) - starts[np.cumsum(new) - 1]
    return table.take(pa.array(np.sort(order[position < k])))


def _manifest(report: ReportData, exclude: tuple[str, ...]) -> pa.Table:
    import pyarrow.parquet as pq

    if not report.manifest_path.exists():
        return pa.table({c: pa.array([], pa.string()) for c in COLUMNS})
    table = pq.read_table(report.manifest_path, columns=COLUMNS)
    if exclude:
        checks = table["check"].cast(pa.string())
        table = table.filter(pc.invert(pc.is_in(checks, pa.array(list(exclude)))))
    return table


def sample_findings(
    report: ReportData, per: str = "check", k: int = 5, exclude: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Up to ``k`` findings for each ``per`` (``"check"`` or ``"path"``), errors first.

    Returns:
        Dicts with ``path``, ``row`` (None for file- and column-level findings), ``column``,
        ``check``, ``severity``, ``value`` (the bad value, or the message) and ``count``,
        sorted by ``per`` then as picked.
    """
    table = first_per(_manifest(report, exclude), per, k)
    rows = table.to_pylist()
    rows.sort(key=lambda r: (str(r[per]), r["severity"] != "error"))
    return rows
