"""Scan one work unit: read it chunk by chunk, run the checks, return a small result.

This is the function every executor runs (in-process, a local process pool, a dask worker).
Reader failures become one ``corrupt`` finding for the file; the rows already read keep their
findings.  Check code is not wrapped: a bug in datacheck is a crash, not a "corrupt" file.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from datacheck import findings as fnd
from datacheck.checks._columns import (
    FlatColumn,
    flatten,
    is_numeric,
    leaf_type,
    leaves,
    validity,
)
from datacheck.checks._numpy import Hits, RowMap, check_values, group_by_row
from datacheck.checks._registry import Severity
from datacheck.checks._rules import ColumnRules, default_rules
from datacheck.checks._tensor import sample_hits
from datacheck.engine._plain import plain, readable_columns
from datacheck.engine._result import (
    Collector,
    UnitResult,
    finish,
)
from datacheck.engine._schemacheck import SchemaRun
from datacheck.formats import Chunk, Opened, Ragged, WorkUnit, get_format
from datacheck.formats._tabular import INTEGER_COLUMNS
from datacheck.profile._drift import profile_bounds
from datacheck.profile._stats import ColumnProfile, Profiler
from datacheck.schema import CompiledSchema

if TYPE_CHECKING:
    from datacheck.schema._tensors import TensorSchema

CHECK_ROWS = 1 << 20
"""Rows of a batch checked at once: the findings of one slice are bounded by it."""


def _column_hits(
    arr: pa.Array, rules: ColumnRules, prof: ColumnProfile | None = None
) -> list[Hits]:
    t = arr.type
    if is_numeric(leaf_type(t)):
        flat: FlatColumn = flatten(arr)
        minmax = prof.observe(arr, flat) if prof is not None else None
        out = check_values(flat.values, flat.valid, flat.rowmap, rules, minmax)
        if flat.row_nulls is not None and rules.null is not None:
            h = group_by_row("null", rules.null, flat.row_nulls, RowMap(len(arr)), None)
            if h is not None:
                out.insert(0, h)
        return out
    if prof is not None:
        prof.observe(arr)
    if rules.null is not None and arr.null_count:
        h = group_by_row("null", rules.null, ~validity(arr), RowMap(len(arr)), None)
        return [h] if h is not None else []
    return []


def _check_tensors(
    chunk: Chunk, schema: CompiledSchema | None, col: Collector, profiler: Profiler | None = None
) -> None:
    """Each key's array ``[n, ...]`` viewed as ``[n, -1]``: per-sample findings, vectorised."""
    ts = schema.tensors if schema is not None else None
    per_sample = getattr(chunk, "per_sample", False)  # tar shards, .pt sample lists
    for key, tensor in (chunk.tensors or {}).items():
        arr = np.asarray(tensor)
        n = len(arr) if arr.ndim else 1
        if per_sample and ts is not None and n and (msg := ts.sample_mismatch(key, arr)):
            rows = range(chunk.row_offset, chunk.row_offset + n)
            err = Severity.ERROR
            col.findings([fnd.Finding(col.path, "schema", err, msg, key, r) for r in rows])
        if profiler is not None:
            profiler.column(key).observe_tensor(arr, n)
        if arr.dtype.kind == "c":  # a complex value is bad where its real or imaginary part is
            arr = np.stack((arr.real, arr.imag), axis=-1)
        if arr.dtype.kind not in "iuf" or arr.size == 0:
            continue
        is_float = arr.dtype.kind == "f"
        rules = ts.rules_for(key, is_float) if ts is not None else default_rules(is_float, True)
        for h in sample_hits(arr.reshape(n, -1), rules):
            col.hits(key, h, chunk.row_offset)
    for key, ragged in chunk.ragged.items():
        _check_ragged(key, ragged, chunk.row_offset, ts, col, profiler)


def _check_ragged(
    key: str,
    ragged: Ragged,
    row_offset: int,
    ts: TensorSchema | None,
    col: Collector,
    profiler: Profiler | None,
) -> None:
    """Samples of differing shapes, as :func:`_check_tensors` checks a stack of them: each
    sample's dtype and shape against the schema, then every value, findings at its sample."""
    values, starts, n = ragged.values, ragged.starts, len(ragged.shapes)
    if ts is not None:
        said: dict[tuple[int, ...], str | None] = {}
        for r, shape in enumerate(ragged.shapes):
            if shape not in said:
                said[shape] = ts.shape_mismatch(key, values.dtype.name, shape)
            if (msg := said[shape]) is not None:
                col.findings(
                    [fnd.Finding(col.path, "schema", Severity.ERROR, msg, key, row_offset + r)]
                )
    if profiler is not None:
        profiler.column(key).observe_tensor(values, n)
    if values.dtype.kind == "c":  # real and imaginary parts side by side
        values, starts = values.view(values.real.dtype), starts * 2
    if values.dtype.kind not in "iuf" or values.size == 0:
        return
    is_float = values.dtype.kind == "f"
    rules = ts.rules_for(key, is_float) if ts is not None else default_rules(is_float, True)
    rows = RowMap(n, fn=lambda idx: np.searchsorted(starts, idx, side="right") - 1)
    for h in check_values(values, None, rows, rules):
        col.hits(key, h, row_offset)


def _check_chunk(
    chunk: Chunk,
    schema: CompiledSchema | None,
    col: Collector,
    profiler: Profiler | None = None,
    run: SchemaRun | None = None,
    null: Severity | None = Severity.ERROR,
) -> None:
    if chunk.findings:  # what the reader found while decoding (media, token files)
        col.findings(chunk.findings)
    for key, h in chunk.hits:
        col.hits(key, h, chunk.row_offset)
    if chunk.tensors is not None:
        _check_tensors(chunk, schema, col, profiler)
    if chunk.batch is None:
        return
    batch = readable_columns(chunk.batch)  # intervals: no numbers, and no Python array class
    for start in range(0, max(batch.num_rows, 1), CHECK_ROWS):  # findings bounded per slice
        piece = batch.slice(start, CHECK_ROWS) if batch.num_rows > CHECK_ROWS else batch
        _check_batch(piece, chunk.row_offset + start, col, profiler, run, null)


def _check_batch(
    batch: pa.RecordBatch | pa.Table,
    row_offset: int,
    col: Collector,
    profiler: Profiler | None,
    run: SchemaRun | None,
    null: Severity | None,
) -> None:
    meta = batch.schema.metadata or {}
    integer_columns = set(meta.get(INTEGER_COLUMNS.encode(), b"").decode().split(","))
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        pieces = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        if not pieces:  # an empty file's column may come in no chunk at all: checked empty
            pieces = [column.combine_chunks()]
        offset = row_offset
        for piece in pieces:
            arr = plain(piece)  # dictionary, run-end, list-view, map: checked element-wise
            for leaf_name, leaf_arr in _leaves(name, arr):  # struct fields: their own columns
                _check_column(
                    leaf_name, leaf_arr, offset, integer_columns, col, profiler, run, null
                )
            offset += len(arr)
    if run is not None:

        def index_column(name: str, arr: pa.Array, offset: int) -> None:
            _check_column(name, arr, offset, set(), col, None, run, null)

        run.batch(batch, row_offset, col.hits, index_column)


class _Damaged(Exception):
    """A batch that passed the reader's validation whose nested columns still do not add up
    (a field name that is not UTF-8, a child shorter than its offsets span): its file is
    corrupt, not datacheck."""


def _leaves(name: str, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    try:
        return list(leaves(name, arr))
    except (UnicodeDecodeError, pa.ArrowInvalid) as exc:
        raise _Damaged(
            f"column {name!r}: nested fields do not add up: {_reader_error(exc)}"
        ) from exc


def _check_column(
    name: str,
    arr: pa.Array,
    offset: int,
    integer_columns: set[str],
    col: Collector,
    profiler: Profiler | None,
    run: SchemaRun | None,
    null: Severity | None,
) -> None:
    """Check one column of a batch; ``null``: the severity of a null in a numeric column when
    the scan has no schema (a schema says it per column: ``nullable``; none for the columns it
    does not declare, as in pandera)."""
    leaf = leaf_type(arr.type)
    is_float = pa.types.is_floating(leaf) and name not in integer_columns
    numeric = is_numeric(leaf)
    untyped = False
    if run is not None:  # a schema column, an undeclared one, or one strict: filter drops
        arr, rules = run.column(name, arr, is_float, numeric, offset, col.hits)
    else:  # no type (all empty in a CSV, all null in JSON): numbers to a loader, or text?
        untyped = pa.types.is_null(leaf)
        rules = default_rules(is_float, numeric or untyped, null)
    prof = profiler.column(name) if profiler is not None else None
    if rules.null is not None and arr.null_count:
        col.nulls[name] = col.nulls.get(name, 0) + arr.null_count
    if untyped:  # judged per file once merged, by the type other shards give it (null_column)
        if prof is not None:
            prof.observe(arr)
        return
    for h in _column_hits(arr, rules, prof):
        col.hits(name, h, offset)
    if run is not None:
        run.pandas_checks(name, arr, rules, offset, col.hits)


_EXCERPT = 24
"""Characters of file content a reader error may quote (a CSV row could be a secret)."""
_ROW_TEXT = re.compile(r"((?:columns|fields), got \d+: |row: |line: )(.*)", re.IGNORECASE)


def _printable(text: str) -> str:
    """Control and unprintable characters as Python escapes: a message stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _reader_error(exc: BaseException) -> str:
    """One escaped line naming the error; quoted file content is cut to a short excerpt."""
    text = " ".join(str(exc).split()) or type(exc).__name__

    def excerpt(m: re.Match[str]) -> str:
        quoted = m.group(2)
        return m.group(1) + quoted[:_EXCERPT] + ("..." if len(quoted) > _EXCERPT else "")

    return _printable(f"{type(exc).__name__}: {_ROW_TEXT.sub(excerpt, text)}")[:300]


def scan_unit(
    unit: WorkUnit,
    schema: CompiledSchema | None,
    parts_dir: str | None = None,
    options: dict[str, Any] | None = None,
    profile: bool = False,
    sketch: bool = False,
    null: Severity | None = Severity.ERROR,
) -> UnitResult:
    """Scan one unit; findings go to ``parts_dir/<n>.parquet`` or stay in the result.

    ``profile`` also collects per-column statistics (``sketch``: with quantile sketches);
    ``null`` is the severity of a null in a numeric column no schema column covers.
    """
    start = time.perf_counter()
    if not unit.path.isascii() and (shown := shown_path(unit.path)) != unit.path:
        return _unreadable_name(unit, shown, start, parts_dir)  # Arrow holds UTF-8 only
    key = unit.key
    col = Collector(unit.path, parts_dir, key)
    res = UnitResult(key, unit.path, unit.format, unit.part, unit.n_parts)
    res.bytes = unit.size // max(unit.n_parts, 1)
    errors: list[str] = []
    opts = _reader_options(schema, unit.format, options)
    fmt = get_format(unit.format)
    try:
        opened = fmt.open(unit, opts)
    except Exception as exc:  # noqa: BLE001 - reader boundary
        errors.append(_reader_error(exc))
        opened = None
    if opened is not None:
        _read(unit, opened, fmt.tabular, schema, res, col, errors, profile, sketch, null)
    if errors:
        res.corrupt = errors[0]
        col.finding(fnd.Finding(unit.path, "corrupt", Severity.ERROR, value=errors[0]))
    finish(res, col)
    res.seconds = time.perf_counter() - start
    return res


def _reader_options(
    schema: CompiledSchema | None, format_name: str, options: dict[str, Any] | None
) -> dict[str, Any]:
    """The options a reader gets: the caller's, plus what the schema says about its format."""
    if schema is None:
        return options if options is not None else {}
    opts = dict(options or {})
    opts.setdefault("arrow_types", schema.arrow_types_for(format_name))
    opts.setdefault("pandas_nulls", True)  # a CSV's nulls as pandas (and so pandera) reads them
    if schema.media is not None:
        opts.setdefault("media", schema.media)
    if schema.tensors is not None:  # what a reader summarises itself (HDF5 fill values)
        opts.setdefault("tensors", schema.tensors)
    return opts


def _read(
    unit: WorkUnit,
    opened: Opened,
    tabular: bool,
    schema: CompiledSchema | None,
    res: UnitResult,
    col: Collector,
    errors: list[str],
    profile: bool,
    sketch: bool,
    null: Severity | None = Severity.ERROR,
) -> None:
    """Check every chunk of an opened unit; a reader failure is appended to ``errors``."""
    run = None
    res.dialect = dict(opened.dialect)
    if tabular:
        res.columns = dict(opened.columns)
        if schema is not None:
            run = SchemaRun(schema, unit.path, opened.arrow_schema, unit.format == "csv")
            res.columns.update(run.parsed_columns(res.columns))
            if unit.part == 0:
                col.findings(run.file_findings(res.columns, unit.partition_columns))
    profiler = Profiler(sketch, profile_bounds(schema)) if profile else None
    chunks = opened.chunks
    while True:
        try:
            chunk = next(chunks, None)  # no StopIteration raised at the end
        except Exception as exc:  # noqa: BLE001 - the reader boundary: any failure is corruption
            errors.append(_reader_error(exc))  # the rows read so far keep their findings
            break
        if chunk is None:
            break
        try:
            _check_chunk(chunk, schema, col, profiler, run, null)
        except _Damaged as exc:
            errors.append(str(exc)[:300])
            break
        res.rows += chunk.num_rows + chunk.skipped
        del chunk  # one chunk in memory at a time: drop it before reading the next
    if run is not None and not errors:
        col.findings(run.finish(col.hits))
    if not errors and opened.expected_rows is not None and opened.expected_rows != res.rows:
        errors.append(f"metadata says {opened.expected_rows} rows, {res.rows} could be read")
    if not tabular:  # tensor readers may discover keys while reading (tar shards)
        if opened.columns:
            res.columns = dict(opened.columns)
        if isinstance(shapes := opened.extra.get("shapes"), dict):
            res.shapes = {k: list(v[1:]) if len(v) else None for k, v in shapes.items()}
        if schema is not None and schema.tensors is not None and unit.part == 0 and not errors:
            col.findings(schema.tensors.file_findings(unit.path, res.columns, shapes))
    if profiler is not None:
        res.profile = {name: p.state() for name, p in profiler.columns.items()}


def shown_path(path: str) -> str:
    """``path`` as reports show it: bytes of a name that are not UTF-8 (held as surrogates
    by Python) as ``\\xNN`` escapes; any other path unchanged."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


def _unreadable_name(unit: WorkUnit, shown: str, start: float, parts_dir: str | None) -> UnitResult:
    """A file whose name is not UTF-8: ``corrupt`` under its escaped name (the readers take
    UTF-8 paths only), so the scan reports it instead of failing on it."""
    col = Collector(shown, parts_dir, shown_path(unit.key))
    res = UnitResult(shown_path(unit.key), shown, unit.format, unit.part, unit.n_parts)
    res.bytes = unit.size // max(unit.n_parts, 1)
    res.corrupt = "the file name is not valid UTF-8 (shown with \\x escapes): rename it to scan it"
    col.finding(fnd.Finding(shown, "corrupt", Severity.ERROR, value=res.corrupt))
    finish(res, col)
    res.seconds = time.perf_counter() - start
    return res
