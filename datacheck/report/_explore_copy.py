"""``Report.clean_copy``: the scanned files without their flagged rows, in the same format.

Clean files are copied byte for byte; flagged files are rewritten one row group / chunk at a
time; corrupt files are left out.  Which rows go is ``severity`` (see :mod:`._explore`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.errors import UsageError
from datacheck.report._explore import (
    exact_first,
    reader_options,
    row_sites,
    stream_chunks,
    text_table,
)

if TYPE_CHECKING:
    import pandas as pd

    from datacheck.report._data import ReportData

__all__ = ["clean_copy"]


def _common_root(report: ReportData) -> str:
    """The folder the copy mirrors: the scanned folder, else the files' common parent."""
    paths = [os.path.abspath(e["path"]) for e in report.data["files"]]
    dirs = [os.path.dirname(p) for p in paths]
    root = os.path.commonpath(dirs) if dirs else os.getcwd()
    inputs = [os.path.abspath(i) for i in report.settings.get("inputs", []) if os.path.isdir(i)]
    if len(inputs) == 1 and os.path.commonpath([inputs[0], root]) == inputs[0]:
        return inputs[0]
    return root


def _check_dest(dest: Path, root: str, overwrite: bool) -> None:
    real = os.path.realpath(dest)
    if real == os.path.realpath(root):
        raise UsageError(
            f"clean_copy dest {str(dest)!r} is the scanned folder itself; pass a new folder"
        )
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise UsageError(
            f"clean_copy dest {str(dest)!r} is not empty; pass an empty folder or overwrite=True"
        )


def _keep_mask(start: int, n: int, drop: np.ndarray) -> pa.Array:
    lo, hi = np.searchsorted(drop, [start, start + n])
    keep = np.ones(n, dtype=bool)
    keep[drop[lo:hi] - start] = False
    return pa.array(keep)


def _copy_parquet(src: str, tmp: Path, drop: np.ndarray) -> tuple[int, int]:
    pf = pq.ParquetFile(src)
    meta = pf.metadata
    codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "snappy"
    rows_in = rows_out = 0
    with pq.ParquetWriter(tmp, pf.schema_arrow, compression=codec) as writer:
        for i in range(meta.num_row_groups):
            table = pf.read_row_group(i)
            kept = table.filter(_keep_mask(rows_in, table.num_rows, drop))
            rows_in, rows_out = rows_in + table.num_rows, rows_out + kept.num_rows
            if kept.num_rows:
                writer.write_table(kept)
    return rows_in, rows_out


class _TextSink:
    """Writes Arrow batches as CSV/TSV or JSON Lines, or as Arrow IPC, to one file."""

    def __init__(self, entry: dict[str, Any], tmp: Path, schema: pa.Schema) -> None:
        self.fmt, self.schema = entry["format"], schema
        self.stream = pa.output_stream(str(tmp), compression=_compression(entry["path"]))
        if self.fmt == "csv":
            import pyarrow.csv as pacsv

            from datacheck.formats import is_tsv

            opts = pacsv.WriteOptions(delimiter="\t" if is_tsv(entry["path"]) else ",")
            self.writer: Any = pacsv.CSVWriter(self.stream, schema, write_options=opts)
        elif self.fmt == "arrow":
            self.writer = pa.ipc.new_file(self.stream, schema)
        else:
            self.writer = None

    def write(self, table: pa.Table) -> None:
        if self.writer is not None:
            self.writer.write_table(table.cast(self.schema))
            return
        for rec in table.to_pylist():
            self.stream.write((json.dumps(rec, default=str) + "\n").encode())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.stream.close()


def _compression(path: str) -> str | None:
    from datacheck.formats import COMPRESSIONS

    return COMPRESSIONS.get(Path(path).suffix.lower())


def _copy_streamed(
    entry: dict[str, Any], tmp: Path, drop: np.ndarray, options: dict[str, Any]
) -> tuple[int, int]:
    return exact_first(_copy_streamed_with, entry, options, tmp, drop)


def _copy_streamed_with(
    entry: dict[str, Any], tmp: Path, drop: np.ndarray, options: dict[str, Any]
) -> tuple[int, int]:
    sink: _TextSink | None = None
    rows_in = rows_out = 0
    try:
        for start, table in stream_chunks(entry, options):
            if sink is None:
                sink = _TextSink(entry, tmp, table.schema)
            kept = text_table(table.filter(_keep_mask(start, table.num_rows, drop)), options)
            rows_in, rows_out = rows_in + table.num_rows, rows_out + kept.num_rows
            if kept.num_rows:
                sink.write(kept)
    finally:
        if sink is not None:
            sink.close()
    if sink is None:
        shutil.copyfile(entry["path"], tmp)  # no rows at all: keep the header as it was
    return rows_in, rows_out


def _copy_npy(src: str, tmp: Path, drop: np.ndarray) -> tuple[int, int]:
    """Copy a ``.npy`` array without the dropped rows, through memory maps (bounded memory)."""
    arr = np.load(src, mmap_mode="r", allow_pickle=False)
    keep = np.ones(len(arr), dtype=bool)
    keep[drop[drop < len(arr)]] = False
    out = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=arr.dtype, shape=(int(keep.sum()), *arr.shape[1:])
    )
    step, pos = max(1, (64 << 20) // max(arr[:1].nbytes, 1)), 0
    for start in range(0, len(arr), step):
        block = arr[start : start + step][keep[start : start + step]]
        out[pos : pos + len(block)] = block
        pos += len(block)
    out.flush()
    del out
    return len(arr), pos


def _copy_npz(src: str, tmp: Path, drop: np.ndarray, rows: int) -> tuple[int, int]:
    """Rewrite an ``.npz`` archive: arrays with one entry per row lose the dropped rows."""
    kept = rows
    with np.load(src, allow_pickle=False) as z, open(tmp, "wb") as fh:
        arrays = {}
        for key in z.files:
            arr = z[key]
            if arr.ndim and len(arr) == rows:
                arr = np.delete(arr, drop[drop < rows], axis=0)
                kept = len(arr)
            arrays[key] = arr
        np.savez(fh, **arrays)
    return rows, kept


_WRITABLE = ("parquet", "csv", "jsonl", "arrow", "npy", "npz")


def _copy_one(
    report: ReportData,
    entry: dict[str, Any],
    target: Path,
    drop: np.ndarray,
    options: dict[str, Any],
) -> dict[str, Any]:
    row = {
        "path": entry["path"],
        "dest": str(target),
        "status": "skipped",
        "rows_in": int(entry.get("rows") or 0),
        "rows_out": 0,
        "reason": "",
    }
    if entry["status"] == "corrupt":
        return {**row, "dest": "", "reason": f"corrupt: {entry.get('error')}"}
    entry = {**entry, "path": report.local_path(entry)}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    if not len(drop):
        shutil.copyfile(entry["path"], tmp)
        os.replace(tmp, target)
        return {**row, "status": "copied", "rows_out": row["rows_in"]}
    if entry["format"] not in _WRITABLE:
        return {**row, "dest": "", "reason": f"clean_copy cannot rewrite {entry['format']!r} files"}
    if entry["format"] == "parquet":
        rows_in, rows_out = _copy_parquet(entry["path"], tmp, drop)
    elif entry["format"] == "npy":
        rows_in, rows_out = _copy_npy(entry["path"], tmp, drop)
    elif entry["format"] == "npz":
        rows_in, rows_out = _copy_npz(entry["path"], tmp, drop, row["rows_in"])
    else:
        rows_in, rows_out = _copy_streamed(entry, tmp, drop, options)
    os.replace(tmp, target)
    return {**row, "status": "cleaned", "rows_in": rows_in, "rows_out": rows_out}


def _dropped(sites: pa.Table, drop: np.ndarray) -> str:
    """``"x0: nan 2, x2: inf 1"``: the findings behind the dropped rows of one file."""
    if not len(drop):
        return ""
    counts: dict[str, int] = {}
    for col, check in zip(sites["column"].to_pylist(), sites["check"].to_pylist(), strict=True):
        key = f"{col}: {check}" if col else check
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items()))


def clean_copy(
    report: ReportData,
    dest: str | os.PathLike[str],
    *,
    severity: str = "error",
    overwrite: bool = False,
) -> pd.DataFrame:
    """Write every readable scanned file into ``dest`` without its flagged rows.

    Files keep their format and their path relative to the scanned folder. Clean files are
    copied byte for byte; flagged files are rewritten one row group / chunk at a time; corrupt
    files are left out. Each file is written under a temporary name and renamed when complete.

    Args:
        report: the scan's report.
        dest: a new or empty folder (not the scanned one).
        severity: ``"error"`` (default: drop the rows the gate fails on, keep rows that have
            only warnings) or ``"warning"`` (drop rows with warnings too).
        overwrite: allow a non-empty ``dest`` (files with the same names are replaced).

    Returns:
        One row per scanned file: ``path``, ``dest``, ``status`` (``copied`` | ``cleaned`` |
        ``skipped``), ``rows_in``, ``rows_out``, ``rows_dropped``, ``dropped`` (the findings
        behind the dropped rows, ``"x0: nan 2, x2: inf 1"``), ``rows_kept_flagged`` (rows kept
        that have findings below ``severity``) and ``reason`` (why a file was skipped).
    """
    import pandas as pd

    entries = report.data["files"]
    root = _common_root(report)
    dest = Path(dest)
    _check_dest(dest, root, overwrite)
    sites = row_sites(report, severity=severity)
    every = row_sites(report)
    dest.mkdir(parents=True, exist_ok=True)
    options = reader_options(report)
    rows = []
    for e in entries:
        mine = sites.filter(pc.equal(sites["path"], e["path"]))
        drop = np.unique(mine["row"].to_numpy()).astype(np.int64)
        flagged = every.filter(pc.equal(every["path"], e["path"]))["row"].to_numpy()
        target = dest / os.path.relpath(os.path.abspath(e["path"]), root)
        row = _copy_one(report, e, target, drop, options)
        row["rows_dropped"] = row["rows_in"] - row["rows_out"] if row["status"] != "skipped" else 0
        row["dropped"] = _dropped(mine, drop) if row["status"] == "cleaned" else ""
        row["rows_kept_flagged"] = int(len(np.setdiff1d(np.unique(flagged), drop)))
        rows.append(row)
    columns = ["path", "dest", "status", "rows_in", "rows_out", "rows_dropped", "dropped"]
    return pd.DataFrame(rows, columns=[*columns, "rows_kept_flagged", "reason"])
