"""The schema's side of scanning one work unit.

Per chunk: which compiled column (name, ``regex`` pattern or index level) a file column is,
``coerce``, and the checks that run through pandera.  Per file: missing, unexpected, misplaced
and mistyped columns; and what needs every row (``unique``, a check answering for the whole
column, schema-level checks), gathered chunk by chunk and decided in :meth:`SchemaRun.finish`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck import findings as fnd
from datacheck.checks._columns import is_numeric, leaf_type
from datacheck.checks._numpy import Hits, RowMap, group_by_row
from datacheck.checks._pandas import Outcome, report_name, run_check
from datacheck.checks._registry import Severity
from datacheck.checks._rules import ColumnRules, default_rules
from datacheck.schema._coerce import cast, categories_outside
from datacheck.schema._compile import ColumnSpec, CompiledSchema, spec_rules
from datacheck.schema._dtypes import arrow_type_for, dtype_matches

ERR = Severity.ERROR
_KEEP = {"all": False, "exclude_first": "first", "exclude_last": "last"}

Emit = Callable[[str | None, Hits, int], None]
"""Where hits go: ``(column, hits, row_offset)``."""


def _mask(values: Any) -> np.ndarray:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _union(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None or b is None:
        return b if a is None else a
    return a | b


def _parse_type(dname: str | None) -> pa.DataType | None:
    """What a CSV column of this dtype is parsed as: float64 for integers (a ``nan`` or a
    ``1.5`` in an integer column is data to check), the float's own width otherwise."""
    t = arrow_type_for(dname)
    if t is None or pa.types.is_string(t):
        return None
    return pa.float64() if pa.types.is_integer(t) else t


def _parse(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Text cells -> numbers, and the cells that are not a number (null afterwards)."""
    try:
        return pc.cast(arr, target), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    import pandas as pd

    series = arr.to_pandas()
    parsed = pd.to_numeric(series, errors="coerce")
    spelled_nan = series.str.strip().str.lower().isin(["nan", "+nan", "-nan"])
    bad = (parsed.isna() & series.notna() & ~spelled_nan).to_numpy()
    values = parsed.astype("float64").to_numpy()
    out = pc.cast(pa.array(values, mask=~(series.notna().to_numpy() & ~bad)), target)
    return out, bad if bad.any() else None


def _severity(check: Any) -> Severity:
    return Severity.WARNING if getattr(check, "raise_warning", False) else ERR


def index_columns(arrow_schema: Any) -> tuple[list[str], dict[str, Any] | None]:
    """Columns pandas stored the index in, and a stored RangeIndex (start/step) if any."""
    meta = getattr(arrow_schema, "metadata", None) or {}
    try:
        index = json.loads(meta[b"pandas"]).get("index_columns", [])
    except (KeyError, ValueError, AttributeError, TypeError):
        return [], None
    names = [c for c in index if isinstance(c, str)]
    ranges = [c for c in index if isinstance(c, dict) and c.get("kind") == "range"]
    return names, (ranges[0] if ranges else None)


class SchemaRun:
    """Schema checks of one work unit (the whole file when the schema needs every row)."""

    def __init__(
        self, schema: CompiledSchema, path: str, arrow_schema: Any, text: bool = False
    ) -> None:
        self.text = text
        """A CSV: the schema's numeric columns arrive as text, parsed here cell by cell."""
        self.schema = schema
        self.path = path
        self.arrow_schema = arrow_schema
        self.stored_index, self.range_index = index_columns(arrow_schema)
        self.index_specs = dict(zip(self.stored_index, schema.index, strict=False))
        self.cache: dict[str, ColumnSpec | None] = {}
        self.unique_parts: dict[tuple[str, ...], list[pa.Array | pa.Table]] = {}
        self.aggregates: dict[tuple[str, int], list[pa.Array]] = {}
        self.frame_parts: dict[int, list[pa.Table]] = {}
        self.frame_aggregate: set[int] = set()
        self.errors: dict[tuple[str | None, str], fnd.Finding] = {}

    def parsed_columns(self, columns: dict[str, str]) -> dict[str, str]:
        """The types a CSV's numeric columns are reported with (they were read as text)."""
        if not self.text:
            return {}
        return {
            n: str(t)
            for n, t in self.schema.arrow_types.items()
            if columns.get(n) == "string" and _parse_type(self.schema.columns[n].dtype)
        }

    # --- per column ---------------------------------------------------------------------

    def spec(self, name: str) -> ColumnSpec | None:
        if name not in self.cache:
            spec = self.index_specs.get(name)
            self.cache[name] = spec if spec is not None else self.schema.spec_for(name)
        return self.cache[name]

    def column(
        self, name: str, arr: pa.Array, is_float: bool, numeric: bool, offset: int, emit: Emit
    ) -> tuple[pa.Array, ColumnRules]:
        """The array to check (after ``coerce``) and its rules.

        A value that cannot be read or cast as the schema says is a ``schema`` finding at its
        row, and null afterwards (never also a ``null`` finding)."""
        spec = self.spec(name)
        if spec is None:
            return arr, default_rules(is_float, numeric)
        source, bad = arr, None
        if self.text and pa.types.is_string(arr.type) and (target := _parse_type(spec.dtype)):
            arr, bad = _parse(arr, target)
            if pa.types.is_integer(arrow_type_for(spec.dtype)):  # a CSV's integers: 2.4 is bad
                arr, cast_bad = self._cast(name, spec, arr, offset, emit)
                bad = _union(bad, cast_bad)
        elif spec.coerce and spec.target is not None and not dtype_matches(spec.dtype, arr.type):
            arr, bad = self._cast(name, spec, arr, offset, emit)
        if arr is not source:
            is_float = pa.types.is_floating(arr.type)
            numeric = is_numeric(leaf_type(arr.type))
        rules = spec_rules(spec, is_float, numeric)
        schema_bad = _union(bad, categories_outside(arr, spec.target))
        if schema_bad is not None:
            self._emit_mask(name, "schema", schema_bad, offset, emit)
        if bad is not None and rules.null is not None:
            nulls = ~_mask(pc.is_valid(arr)) & ~bad
            self._emit_mask(name, "null", nulls, offset, emit, rules.null)
            rules = replace(rules, null=None)
        return arr, rules

    def _cast(
        self, name: str, spec: ColumnSpec, arr: pa.Array, offset: int, emit: Emit
    ) -> tuple[pa.Array, np.ndarray | None]:
        """``coerce`` as pandera casts (:mod:`datacheck.schema._coerce`): the cast values and
        those its cast fails on or would change; a float source's NaN and Inf are reported
        as such, whatever they become."""
        result = cast(arr, spec.target)
        if pa.types.is_floating(arr.type) and not pa.types.is_floating(result.values.type):
            valid = _mask(pc.is_valid(arr))
            self._emit_mask(name, "nan", valid & _mask(pc.is_nan(arr)), offset, emit)
            self._emit_mask(name, "inf", valid & _mask(pc.is_inf(arr)), offset, emit)
        if result.error is not None:
            finding = fnd.Finding(self.path, "schema", ERR, result.error, name)
            self.errors.setdefault((name, "schema"), finding)
        return result.values, result.bad

    @staticmethod
    def _emit_mask(
        name: str, check: str, mask: np.ndarray, offset: int, emit: Emit, sev: Severity = ERR
    ) -> None:
        h = group_by_row(check, sev, mask, RowMap(len(mask)), None)
        if h is not None:
            emit(name, h, offset)

    def pandas_checks(
        self, name: str, arr: pa.Array, rules: ColumnRules, offset: int, emit: Emit
    ) -> None:
        """Checks with no Arrow body run through pandera; one finding per row and check."""
        spec = self.spec(name)
        if spec is not None and spec.unique:
            self.unique_parts.setdefault((name,), []).append(arr)
        if not rules.pandas_checks:
            return
        series = arr.to_pandas()
        series.name = name
        merged: dict[tuple[str, Severity], np.ndarray] = {}
        for i, check in enumerate(rules.pandas_checks):
            key = (name, i)
            if key in self.aggregates:
                self.aggregates[key].append(arr)
                continue
            out = run_check(check, series)
            if out.passed is not None:  # answers for the whole column: decided at the end
                self.aggregates[key] = [arr]
                continue
            self._outcome(name, check, out, len(arr), offset, emit, merged)
        for (check_name, sev), mask in merged.items():
            h = group_by_row(check_name, sev, mask, RowMap(len(arr)), None)
            if h is not None:
                emit(name, h, offset)

    def _outcome(
        self,
        column: str | None,
        check: Any,
        out: Outcome,
        n: int,
        offset: int,
        emit: Emit,
        merged: dict[tuple[str, Severity], np.ndarray] | None = None,
    ) -> None:
        """Failing rows go to ``merged`` (one mask per check name) or straight to ``emit``."""
        name, sev = report_name(check), _severity(check)
        if out.error is not None:  # once per column and check, row null
            finding = fnd.Finding(self.path, name, sev, out.error, column)
            self.errors.setdefault((column, name), finding)
            return
        for col, rows in (out.bad or {}).items():
            if merged is not None:
                mask = merged.setdefault((name, sev), np.zeros(n, dtype=bool))
                mask[rows] = True
            else:
                mask = np.zeros(n, dtype=bool)
                mask[rows] = True
                h = group_by_row(name, sev, mask, RowMap(n), None)
                if h is not None:
                    emit(col, h, offset)

    # --- per batch ----------------------------------------------------------------------

    def batch(self, batch: Any, offset: int, emit: Emit, check_column: Callable[..., None]) -> None:
        """Schema-level uniqueness and checks, and index levels that are row numbers."""
        import pandas as pd

        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        names = set(table.schema.names)
        for cols, _keep in self.schema.unique:  # pandera: the set's columns that exist
            present = tuple(c for c in cols if c in names)
            if present:
                self.unique_parts.setdefault(cols, []).append(table.select(list(present)))
        if self.schema.index and not self.stored_index:
            start, step = 0, 1
            if self.range_index is not None:
                start, step = (
                    int(self.range_index.get("start", 0)),
                    int(self.range_index.get("step", 1)),
                )
            spec = self.schema.index[0]
            rows = pa.array(
                start + step * np.arange(offset, offset + batch.num_rows, dtype=np.int64)
            )
            self.cache.setdefault(spec.name, spec)
            check_column(spec.name, rows, offset)
        if not self.schema.frame_checks:
            return
        frame = None
        for i, check in enumerate(self.schema.frame_checks):
            if i in self.frame_aggregate:
                self.frame_parts[i].append(table)
                continue
            if frame is None:
                frame = table.to_pandas()
                frame.index = pd.RangeIndex(len(frame))  # positions: rows of the batch
            out = run_check(check, frame)
            if out.passed is not None:
                self.frame_aggregate.add(i)
                self.frame_parts[i] = [table]
                continue
            self._outcome(None, check, out, table.num_rows, offset, emit)

    # --- per file -----------------------------------------------------------------------

    def finish(self, emit: Emit) -> list[fnd.Finding]:
        """What needs every row of the file: uniqueness and whole-column verdicts."""
        out: list[fnd.Finding] = list(self.errors.values())
        for cols, parts in self.unique_parts.items():
            keep = self._keep(cols)
            if len(cols) == 1 and isinstance(parts[0], pa.Array):  # a column: nulls ignored
                series = pa.chunked_array(parts).to_pandas()
                dup = np.zeros(len(series), dtype=bool)
                present = series.notna().to_numpy()
                dup[present] = series[present].duplicated(keep=keep).to_numpy()
            else:
                dup = pa.concat_tables(parts).to_pandas().duplicated(keep=keep).to_numpy()
            h = group_by_row("unique", ERR, dup, RowMap(len(dup)), None)
            if h is not None:
                emit(",".join(cols), h, 0)
        for (name, i), arrays in self.aggregates.items():
            spec = self.spec(name)
            check = self._pandas_check(spec, name, arrays[0], i)
            series = pa.chunked_array(arrays).to_pandas()
            series.name = name
            res = run_check(check, series)
            out += self._verdict(name, check, res)
        for i, tables in self.frame_parts.items():
            check = self.schema.frame_checks[i]
            out += self._verdict(
                None, check, run_check(check, pa.concat_tables(tables).to_pandas())
            )
        return out

    def _keep(self, cols: tuple[str, ...]) -> Any:
        if len(cols) == 1:
            spec = self.spec(cols[0])
            if spec is not None and spec.unique:
                return _KEEP[spec.unique]
        for c, keep in self.schema.unique:
            if c == cols:
                return _KEEP[keep]
        return False

    def _pandas_check(self, spec: ColumnSpec | None, name: str, arr: pa.Array, i: int) -> Any:
        is_float = pa.types.is_floating(arr.type)
        numeric = is_float or pa.types.is_integer(arr.type)
        assert spec is not None  # only schema columns have pandas checks
        return spec_rules(spec, is_float, numeric).pandas_checks[i]

    def _verdict(self, column: str | None, check: Any, res: Outcome) -> list[fnd.Finding]:
        name, sev = report_name(check), _severity(check)
        if res.error is not None:
            return [fnd.Finding(self.path, name, sev, res.error, column)]
        if res.passed is False:
            return [fnd.Finding(self.path, name, sev, "failed on the whole file", column)]
        if res.bad:  # an aggregate that answered per row on the whole file
            return [
                fnd.Finding(self.path, name, sev, None, col, int(r))
                for col, rows in res.bad.items()
                for r in rows
            ]
        return []

    def file_findings(self, columns: dict[str, str], partition_columns: Any) -> list[fnd.Finding]:
        """Columns missing, unexpected, out of order, repeated, or of another dtype."""
        names = list(getattr(self.arrow_schema, "names", None) or columns)
        types = {f.name: f.type for f in self.arrow_schema} if self.arrow_schema is not None else {}
        for name, text in columns.items():  # text formats report integers they read as float64
            if str(types.get(name)) != text:
                with contextlib.suppress(ValueError, KeyError):
                    types[name] = pa.type_for_alias(text)
        return file_findings(self, columns, names, types, partition_columns)


def file_findings(
    run: SchemaRun,
    columns: dict[str, str],
    names: list[str],
    types: dict[str, Any],
    partition_columns: Any,
) -> list[fnd.Finding]:
    schema, path = run.schema, run.path
    out: list[fnd.Finding] = []
    index = set(run.stored_index)
    for name, spec in schema.columns.items():
        if spec.regex:
            matched = [c for c in columns if c not in index and re.match(name, c)]
            if not matched and spec.required:
                msg = "no column matches the pattern (regex: true)"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
            for c in matched:
                out += _dtype_finding(path, c, types.get(c), spec)
            continue
        if name not in columns:
            if spec.required and not spec.fill and name not in partition_columns:
                out.append(fnd.Finding(path, "schema", ERR, "column missing", column=name))
            continue
        out += _dtype_finding(path, name, types.get(name), spec, run.text)
    for name, spec in run.index_specs.items():
        out += _dtype_finding(path, name, types.get(name), spec)
    if schema.index and not run.stored_index:
        spec = schema.index[0]
        out += _dtype_finding(path, spec.name, pa.int64(), spec)
    for i, spec in enumerate(schema.index):  # pandera checks a named level's name
        actual = run.stored_index[i] if i < len(run.stored_index) else None
        if not spec.name.startswith("__index_level_") and actual not in (None, spec.name):
            msg = f"index level named {actual!r}, schema says {spec.name!r}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
        elif not spec.name.startswith("__index_level_") and actual is None and i == 0:
            msg = f"the file stores no index (pandas reads the row number), schema names it {spec.name!r}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
    stored = len(run.stored_index) or 1  # no stored index: the row number, one level
    for spec in schema.index[stored:]:
        msg = f"index level missing: the file stores {stored} index level(s)"
        out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
    known = [c for c in columns if c not in index]
    if schema.dtype is not None and not schema.columns:  # pandera: then it covers every column
        for name in known:
            if run.spec(name) is None and not dtype_matches(schema.dtype, types.get(name)):
                msg = f"dtype {types.get(name)}, schema says {schema.dtype}"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
    if schema.strict is True:
        for name in known:
            if run.spec(name) is None:
                msg = "unexpected column (schema is strict)"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
    if schema.ordered:
        order = [c for c in known if c in schema.columns]
        expected = [c for c in schema.columns if c in order]
        for got, want in zip(order, expected, strict=True):
            if got != want:
                msg = f"column out of order (schema is ordered): expected {want!r} here"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=got))
    if schema.unique_column_names and len(set(names)) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                out.append(fnd.Finding(path, "schema", ERR, "column name repeated", column=name))
            seen.add(name)
    return out


def _dtype_finding(
    path: str, name: str, t: Any, spec: ColumnSpec, text: bool = False
) -> list[fnd.Finding]:
    if t is None or spec.dtype is None or dtype_matches(spec.dtype, t):
        return []
    if pa.types.is_string(t) and _parse_type(spec.dtype) is not None and text:
        return []  # a CSV's numeric column, read as text and parsed cell by cell
    if spec.coerce and spec.target is not None:
        return []  # any column can be cast: what fails is found value by value
    msg = f"dtype {t}, schema says {spec.dtype}"
    return [fnd.Finding(path, "schema", ERR, msg, column=name)]
