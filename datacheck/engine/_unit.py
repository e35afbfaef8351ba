"""Scan one work unit: read it chunk by chunk, run the checks, return a small result.

This is the function every executor runs (in-process, a local process pool, a dask worker).
Reader failures become one ``corrupt`` finding for the file; the rows already read keep their
findings.  Check code is not wrapped: a bug in datacheck is a crash, not a "corrupt" file.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

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
from datacheck.engine._schemacheck import SchemaRun
from datacheck.formats import Chunk, Opened, WorkUnit, get_format
from datacheck.formats._tabular import INTEGER_COLUMNS
from datacheck.profile._drift import profile_bounds
from datacheck.profile._stats import ColumnProfile, Profiler
from datacheck.schema import CompiledSchema


@dataclass
class UnitResult:
    """What a work unit sends back: counts and where its findings are (never raw data)."""

    key: str
    path: str
    format: str
    part: int
    n_parts: int
    rows: int = 0
    bytes: int = 0
    columns: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Bad values per check (every element of a vector counted)."""
    sites: dict[str, dict[str, int]] = field(default_factory=dict)
    """Manifest rows per check and severity."""
    corrupt: str | None = None
    findings_rows: int = 0
    part_file: str | None = None
    table: pa.Table | None = None
    seconds: float = 0.0
    profile: dict[str, dict[str, Any]] | None = None
    """Per-column statistics (``ColumnProfile.state()``: plain, small), when the scan profiles."""
    nulls: dict[str, int] = field(default_factory=dict)
    """Null rows per column where a null is a finding (``null_column`` is judged on them)."""
    shapes: dict[str, list[int] | None] | None = None
    """Tensor files: each key's shape past the sample axis (None for a 0-d value), which tells
    the shards of one array from arrays that only sit side by side."""
    part_on_worker: bool = False
    """``part_file`` is on the worker that ran the unit, which could not see the output folder
    (a cluster without a shared filesystem): the executor brings it over
    (:class:`datacheck.execute.WorkerFiles`)."""
    dialect: dict[str, str] = field(default_factory=dict)
    """How a text file was read (:attr:`datacheck.formats.Opened.dialect`)."""

    def worker_files(self) -> list[str]:
        """Files on the worker that the client must fetch (the findings' part)."""
        return [self.part_file] if self.part_on_worker and self.part_file else []

    def localised(self, moved: dict[str, str]) -> UnitResult:
        """This result with its worker files replaced by the client's copies."""
        if self.part_file in moved:
            self.part_file, self.part_on_worker = moved[self.part_file], False
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # The field values in order, not a dict naming each: a worker sends one result per
        # image, and the parent builds them back with one call.
        return (UnitResult, _values(self))


_values = attrgetter(*(f.name for f in fields(UnitResult)))


def poison_result(unit: WorkUnit, message: str) -> UnitResult:
    """The result of a unit no process could read (it crashed them): one ``corrupt`` finding.

    The scan hands this to the executor as its ``on_poison`` callback.
    """
    res = UnitResult(unit.key, unit.path, unit.format, unit.part, unit.n_parts)
    res.bytes = unit.size // max(unit.n_parts, 1)
    res.corrupt = message
    res.counts = {"corrupt": 1}
    res.sites = {"corrupt": {Severity.ERROR.value: 1}}
    res.table = fnd.findings_table(
        [fnd.Finding(unit.path, "corrupt", Severity.ERROR, value=message)]
    )
    res.findings_rows = 1
    return res


SPILL_ROWS = 1 << 20
"""Findings a unit holds in memory before it writes them to its part file (~32 MiB)."""
CHECK_ROWS = 1 << 20
"""Rows of a batch checked at once: the findings of one slice are bounded by it."""


class _Collector:
    """Accumulates findings of one unit as Arrow tables plus counters (exact).

    With a part file to write (``parts_dir``), findings past :data:`SPILL_ROWS` are streamed
    to it as they come, so a file of 2**26 NaN never holds all its findings in memory.
    """

    __slots__ = (
        "_parts_checked",
        "_parts_dir",
        "counts",
        "fallback",
        "spills",
        "held",
        "key",
        "nulls",
        "part",
        "path",
        "sites",
        "tables",
    )

    def __init__(self, path: str, parts_dir: str | None = None, key: str = "") -> None:
        self.path = path
        self.tables: list[pa.Table] = []
        self.held = 0
        """Findings in ``tables``."""
        self.counts: dict[str, int] = {}
        self.sites: dict[str, dict[str, int]] = {}
        self._parts_dir = parts_dir
        self._parts_checked = parts_dir is None
        """Whether ``parts_dir`` was looked for (when first needed: most units of a clean
        dataset never write a part)."""
        self.key = key
        self.part: fnd.PartWriter | None = None
        self.spills = parts_dir is not None
        """Whether findings past :data:`SPILL_ROWS` go to a part (the scan gave a folder)."""
        self.fallback: str | None = None
        """Where parts go when this worker cannot see ``parts_dir`` (its own temp folder)."""
        self.nulls: dict[str, int] = {}
        """Null rows per column a null rule applies to (a column all or mostly null is a
        finding of its own, once the file's units are merged)."""

    @property
    def parts_dir(self) -> str | None:
        """The folder for part files, None when there is none this worker can see."""
        if not self._parts_checked:
            self._parts_checked = True
            if not os.path.isdir(self._parts_dir or ""):
                self._parts_dir = None
        return self._parts_dir

    def _count(self, check: str, n: int, severity: str, sites: int) -> None:
        self.counts[check] = self.counts.get(check, 0) + n
        by_sev = self.sites.setdefault(check, {})
        by_sev[severity] = by_sev.get(severity, 0) + sites

    def _add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.held += table.num_rows
        if self.held >= SPILL_ROWS and self.spills:
            self.spill()

    def spill(self) -> None:
        """Write the findings held so far to the part file: in ``parts_dir``, or, on a worker
        that cannot see it, in a folder of the worker's own, fetched by the executor."""
        if self.part is None:
            folder = self.parts_dir
            if folder is None:
                folder = self.fallback = worker_parts_dir()
            self.part = fnd.PartWriter(folder, self.key)
        self.part.write(fnd.concat(self.tables))
        self.tables, self.held = [], 0

    def hits(self, column: str | None, hits: Hits, row_offset: int) -> None:
        self._count(hits.check, hits.total, hits.severity.value, len(hits.rows))
        self._add(fnd.hits_table(self.path, column, hits, row_offset))

    def finding(self, f: fnd.Finding) -> None:
        self._count(f.check, f.count, f.severity.value, 1)
        self._add(fnd.findings_table([f]))

    def findings(self, fs: list[fnd.Finding]) -> None:
        """Many scalar findings as one table."""
        if not fs:
            return
        for f in fs:
            self._count(f.check, f.count, f.severity.value, 1)
        self._add(fnd.findings_table(fs))


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
    chunk: Chunk, schema: CompiledSchema | None, col: _Collector, profiler: Profiler | None = None
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


def _check_chunk(
    chunk: Chunk,
    schema: CompiledSchema | None,
    col: _Collector,
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
    col: _Collector,
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
    col: _Collector,
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
    col = _Collector(unit.path, parts_dir, key)
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
    _finish(res, col)
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
    col: _Collector,
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
    col = _Collector(shown, parts_dir, shown_path(unit.key))
    res = UnitResult(shown_path(unit.key), shown, unit.format, unit.part, unit.n_parts)
    res.bytes = unit.size // max(unit.n_parts, 1)
    res.corrupt = "the file name is not valid UTF-8 (shown with \\x escapes): rename it to scan it"
    col.finding(fnd.Finding(shown, "corrupt", Severity.ERROR, value=res.corrupt))
    _finish(res, col)
    res.seconds = time.perf_counter() - start
    return res


def worker_parts_dir() -> str:
    """A folder of this worker process's own for parts the client will fetch."""
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"datacheck-parts-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    return folder


def _finish(res: UnitResult, col: _Collector) -> None:
    res.counts = col.counts
    res.sites = col.sites
    res.nulls = col.nulls
    if col.part is not None:  # spilled already: the rest joins the part
        col.spill()
        res.findings_rows = col.part.rows
        res.part_file = col.part.close()
        res.part_on_worker = col.fallback is not None
        return
    if not col.tables:  # most units of a clean dataset (one per image): no table to build
        return
    table = fnd.concat(col.tables)
    res.findings_rows = table.num_rows
    # A worker that cannot see parts_dir (remote cluster, no shared filesystem) sends a few
    # findings (under SPILL_ROWS) back with the result; the client's journal writes them to a
    # part on arrival.  More were spilled to the worker's own folder (above), fetched from it.
    parts_dir = col.parts_dir
    if parts_dir is None or table.num_rows == 0:
        res.table = table if table.num_rows else None
        return
    res.part_file = fnd.write_part(table, parts_dir, res.key)
