"""After a scan: the flagged rows themselves, an exclusion list, and a cleaned copy.

Everything here starts from a :class:`~datacheck.report.Report` (``report.json`` plus the
quarantine manifest) and goes back to the scanned shards only for the rows it needs:

* :func:`flagged_rows` reads a Parquet shard's row groups that hold flagged rows and no
  others; text and Arrow shards are streamed, skipping chunks before the first wanted row and
  stopping after the last.
* :func:`exclusion_list` lists the (path, row) pairs, with their dataset index when the shards
  are concatenated in the report's order, ready for ``GuardedLoader(exclude=...)``.
* :func:`clean_copy` rewrites every readable shard without its flagged rows, in the same
  format, one chunk at a time.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.errors import DatacheckError, InputError, UsageError

if TYPE_CHECKING:
    import pandas as pd

    from datacheck.report._data import ReportData

__all__ = ["clean_copy", "exclusion_list", "flagged_rows", "resolve_path"]

FLAG_COLUMN = "_flagged"
CHECKS_COLUMN = "_checks"


# -- which file ------------------------------------------------------------------------------


def resolve_path(report: ReportData, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The report's entry for ``path``: the path as the report has it, or a unique suffix.

    Raises:
        InputError: no file, or more than one file, of the report matches.
    """
    entries = report.data["files"]
    query = os.fspath(path)
    exact = [e for e in entries if e["path"] == query]
    if exact:
        return exact[0]
    if os.path.exists(query):
        real = os.path.realpath(query)
        same = [e for e in entries if os.path.realpath(e["path"]) == real]
        if same:
            return same[0]
    tail = query.replace(os.sep, "/").removeprefix("./").lstrip("/")
    hits = [e for e in entries if e["path"].replace(os.sep, "/").endswith("/" + tail)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        names = ", ".join(repr(e["path"]) for e in hits[:5])
        raise InputError(
            f"report {str(report.dir)!r}: {query!r} matches {len(hits)} files "
            f"({names}); pass more of the path"
        )
    raise InputError(_no_match(report, query))


def _no_match(report: ReportData, query: str) -> str:
    names = [os.path.basename(e["path"]) for e in report.data["files"]]
    close = difflib.get_close_matches(os.path.basename(query), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"report {str(report.dir)!r}: no scanned file matches {query!r}{hint}; "
        f"see report.files for the {len(names)} scanned files"
    )


# -- the manifest, per file ------------------------------------------------------------------


def _row_sites(report: ReportData, path: str | None = None) -> pa.Table:
    """Row-level findings (row not null): path, row, column, check; optionally one file."""
    cols = ["path", "row", "column", "check"]
    if not report.manifest_path.exists():
        return pa.table({c: pa.array([], pa.int64() if c == "row" else pa.string()) for c in cols})
    filters = [("path", "==", path)] if path is not None else None
    table = pq.read_table(report.manifest_path, columns=cols, filters=filters)
    table = table.cast(pa.schema([(c, pa.int64() if c == "row" else pa.string()) for c in cols]))
    return table.filter(pc.is_valid(table["row"]))


def _checks_by_row(sites: pa.Table) -> dict[int, str]:
    """Row -> ``"x1: nan; x2: inf"`` (the findings at that row, for display)."""
    out: dict[int, list[str]] = {}
    for row, col, check in zip(
        sites["row"].to_pylist(),
        sites["column"].to_pylist(),
        sites["check"].to_pylist(),
        strict=True,
    ):
        out.setdefault(int(row), []).append(f"{col}: {check}" if col else check)
    return {r: "; ".join(dict.fromkeys(v)) for r, v in out.items()}


def _wanted(flagged: np.ndarray, context: int, n_rows: int | None) -> np.ndarray:
    """Flagged rows widened by ``context`` neighbours each side, sorted, clipped to the file."""
    if not len(flagged):
        return flagged
    offsets = np.arange(-context, context + 1, dtype=np.int64)
    rows = np.unique((flagged[:, None] + offsets[None, :]).reshape(-1))
    rows = rows[rows >= 0]
    return rows[rows < n_rows] if n_rows else rows


# -- reading rows ----------------------------------------------------------------------------


def _reader_options(report: ReportData) -> dict[str, Any]:
    """The column types the scan read with (from its schema), so values look the same."""
    spec = report.settings.get("schema")
    if not spec:
        return {}
    from datacheck.schema import load_schema

    try:
        compiled = load_schema(spec)
    except DatacheckError:  # the schema moved since the scan: read with inferred types
        return {}
    return {"arrow_types": compiled.arrow_types} if compiled is not None else {}


def _parquet_groups(path: str, rows: np.ndarray) -> Iterator[tuple[int, pa.Table]]:
    """(first row, table) of each row group holding one of ``rows``; no other group is read."""
    pf = pq.ParquetFile(path)
    sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    ends = np.cumsum(sizes, dtype=np.int64)
    groups = np.unique(np.searchsorted(ends, rows, side="right"))
    for g in groups[groups < len(sizes)]:
        yield int(ends[g] - sizes[g]), pf.read_row_group(int(g))


def _stream_chunks(entry: dict[str, Any], options: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """(first row, Arrow batch) of every chunk of a non-Parquet shard, via its reader."""
    from datacheck.formats import WorkUnit, get_format

    st = os.stat(entry["path"])
    unit = WorkUnit(entry["path"], entry["format"], st.st_size, st.st_mtime)
    for chunk in get_format(entry["format"]).open(unit, options).chunks:
        yield chunk.row_offset, _as_table(chunk)


def _as_table(chunk: Any) -> pa.Table:
    if chunk.batch is not None:
        return pa.table(chunk.batch) if isinstance(chunk.batch, pa.RecordBatch) else chunk.batch
    cols = {k: list(np.asarray(v)) for k, v in (chunk.tensors or {}).items()}
    return pa.table({k: pa.array([np.asarray(x).tolist() for x in v]) for k, v in cols.items()})


def _exact_first(fn: Any, entry: dict[str, Any], options: dict[str, Any], *args: Any) -> Any:
    """Run ``fn`` reading text formats with integer columns as integers (exact values); if
    the file holds a ``nan`` or ``1.5`` there, read them as float64 and restore the integral
    ones.  Integers beyond 2**53 in such a column cannot be restored exactly: refused."""
    if entry["format"] not in ("csv", "jsonl"):
        return fn(entry, *args, options)
    try:
        return fn(entry, *args, {**options, "keep_integers": True})
    except pa.ArrowInvalid:
        return fn(entry, *args, {**options, "widened": True})


def _text_table(table: pa.Table, options: dict[str, Any]) -> pa.Table:
    if not options.get("widened"):
        return table
    from datacheck.formats._tabular import restore_integers

    table = restore_integers(table)
    for name, col in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_floating(col.type) and (pc.max(pc.abs(col)).as_py() or 0) >= 2**53:
            raise InputError(
                f"column {name!r} holds integers beyond 2**53 next to non-integers; "
                "they cannot be copied exactly: use exclusion_list() instead"
            )
    return table


def _take_rows(entry: dict[str, Any], rows: np.ndarray, options: dict[str, Any]) -> pa.Table:
    """The given file rows (sorted) as one table, reading as little of the file as it can."""
    return _exact_first(_take_rows_with, entry, options, rows)


def _take_rows_with(entry: dict[str, Any], rows: np.ndarray, options: dict[str, Any]) -> pa.Table:
    if entry["format"] == "parquet":
        chunks: Iterator[tuple[int, pa.Table]] = _parquet_groups(entry["path"], rows)
    else:
        chunks = _stream_chunks(entry, options)
    parts, last = [], int(rows[-1])
    for start, table in chunks:
        if start > last:
            break
        lo, hi = np.searchsorted(rows, [start, start + table.num_rows])
        if hi > lo:
            parts.append(_text_table(table.take(pa.array(rows[lo:hi] - start)), options))
    if not parts:
        return pa.table({})
    return pa.concat_tables(parts, promote_options="permissive")


def flagged_rows(
    report: ReportData, path: str | os.PathLike[str], context: int = 0
) -> pd.DataFrame:
    """The flagged rows of one scanned file (plus ``context`` neighbours each side).

    Returns:
        A DataFrame indexed by row number in the file (index name ``row``), with the file's
        columns plus ``_flagged`` (False for context rows) and ``_checks`` (``"x1: nan"``).

    Raises:
        UsageError: ``context`` is negative.
        InputError: ``path`` matches no file or several, or the file cannot be read.
    """
    import pandas as pd

    if context < 0:
        raise UsageError(f"context={context!r} must be >= 0 (rows shown each side)")
    entry = resolve_path(report, path)
    sites = _row_sites(report, entry["path"])
    checks = _checks_by_row(sites)
    flagged = np.array(sorted(checks), dtype=np.int64)
    rows = _wanted(flagged, context, entry.get("rows"))
    table = pa.table({})
    if len(rows):
        try:
            table = _take_rows(entry, rows, _reader_options(report))
        except (OSError, pa.ArrowException) as exc:
            raise InputError(
                f"{entry['path']!r}: cannot read the flagged rows back "
                f"({type(exc).__name__}: {exc}); was the file changed since the scan?"
            ) from exc
    frame = table.to_pandas() if table.num_columns else pd.DataFrame()
    if len(frame) != len(rows):
        raise InputError(
            f"{entry['path']!r}: {len(frame)} of the {len(rows)} wanted rows could be "
            "read; was the file changed since the scan? Rescan it"
        )
    frame.index = pd.Index(rows, name="row")
    frame[FLAG_COLUMN] = [int(r) in checks for r in frame.index]
    frame[CHECKS_COLUMN] = [checks.get(int(r), "") for r in frame.index]
    return frame


# -- exclusion list --------------------------------------------------------------------------


def exclusion_list(report: ReportData, order: Sequence[str] | None = None) -> pd.DataFrame:
    """The (path, row) pairs a loader should skip, with their dataset index.

    Args:
        report: the scan's report.
        order: the files in the order the training dataset concatenates them (paths as the
            report has them, or unique suffixes). Default: the report's order (sorted paths)
            without corrupt files.

    Returns:
        A DataFrame with ``path``, ``row``, ``index`` (row offset of the file in ``order``
        plus ``row``; null for files outside ``order``) and ``checks``, one row per flagged
        row. Pass it to ``datacheck.torch.indices_from_scan(df, df)`` or use
        ``set(df["index"])`` as ``GuardedLoader(exclude=...)``. Corrupt files hold no rows
        here: they are in ``report.files`` with status ``corrupt``.
    """
    import pandas as pd

    if order is None:
        files = [e for e in report.data["files"] if e["status"] != "corrupt"]
    else:
        files = [resolve_path(report, p) for p in order]
    offsets, start = {}, 0
    for e in files:
        offsets[e["path"]] = start
        start += int(e["rows"])
    sites = _row_sites(report)
    frames = []
    for path in dict.fromkeys(sites["path"].to_pylist()):
        mine = sites.filter(pc.equal(sites["path"], path))
        checks = _checks_by_row(mine)
        rows = np.array(sorted(checks), dtype=np.int64)
        base = offsets.get(path)
        frames.append(
            pd.DataFrame(
                {
                    "path": pd.array([path] * len(rows), dtype="string"),
                    "row": pd.array(rows, dtype="Int64"),
                    "index": pd.array(
                        rows + base if base is not None else [None] * len(rows), dtype="Int64"
                    ),
                    "checks": pd.array([checks[int(r)] for r in rows], dtype="string"),
                }
            )
        )
    if not frames:
        return pd.DataFrame(
            {
                "path": pd.array([], dtype="string"),
                "row": pd.array([], dtype="Int64"),
                "index": pd.array([], dtype="Int64"),
                "checks": pd.array([], dtype="string"),
            }
        )
    return pd.concat(frames, ignore_index=True)


# -- clean copy ------------------------------------------------------------------------------


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
    return _exact_first(_copy_streamed_with, entry, options, tmp, drop)


def _copy_streamed_with(
    entry: dict[str, Any], tmp: Path, drop: np.ndarray, options: dict[str, Any]
) -> tuple[int, int]:
    sink: _TextSink | None = None
    rows_in = rows_out = 0
    try:
        for start, table in _stream_chunks(entry, options):
            if sink is None:
                sink = _TextSink(entry, tmp, table.schema)
            kept = _text_table(table.filter(_keep_mask(start, table.num_rows, drop)), options)
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
    entry: dict[str, Any], target: Path, drop: np.ndarray, options: dict[str, Any]
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


def clean_copy(
    report: ReportData, dest: str | os.PathLike[str], *, overwrite: bool = False
) -> pd.DataFrame:
    """Write every readable scanned file into ``dest`` without its flagged rows.

    Files keep their format and their path relative to the scanned folder. Clean files are
    copied byte for byte; flagged files are rewritten one row group / chunk at a time; corrupt
    files are left out. Each file is written under a temporary name and renamed when complete.

    Args:
        report: the scan's report.
        dest: a new or empty folder (not the scanned one).
        overwrite: allow a non-empty ``dest`` (files with the same names are replaced).

    Returns:
        One row per scanned file: ``path``, ``dest``, ``status`` (``copied`` | ``cleaned`` |
        ``skipped``), ``rows_in``, ``rows_out``, ``reason`` (why a file was skipped).
    """
    import pandas as pd

    entries = report.data["files"]
    root = _common_root(report)
    dest = Path(dest)
    _check_dest(dest, root, overwrite)
    dest.mkdir(parents=True, exist_ok=True)
    sites = _row_sites(report)
    options = _reader_options(report)
    rows = []
    for e in entries:
        mine = sites.filter(pc.equal(sites["path"], e["path"]))
        drop = np.unique(mine["row"].to_numpy()).astype(np.int64)
        target = dest / os.path.relpath(os.path.abspath(e["path"]), root)
        rows.append(_copy_one(e, target, drop, options))
    return pd.DataFrame(rows, columns=["path", "dest", "status", "rows_in", "rows_out", "reason"])
