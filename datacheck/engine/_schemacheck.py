"""The schema's side of scanning one work unit.

Per chunk: which compiled column (name, ``regex`` patterns, index level, or the schema's cast
of undeclared columns) a file column is, ``default`` and ``coerce``, and the checks that run
through pandera.  What needs every row (``unique``, a check that is not element-wise,
schema-level checks) is gathered chunk by chunk and decided in :meth:`SchemaRun.finish`;
file-level findings are :mod:`._schemafile`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck import findings as fnd
from datacheck.checks._columns import is_numeric, leaf_type
from datacheck.checks._numpy import Hits, RowMap, group_by_row
from datacheck.checks._pandas import ELEMENTWISE, NumericCheck, Outcome, report_name, run_check
from datacheck.checks._registry import Severity
from datacheck.checks._rules import ColumnRules, default_rules
from datacheck.engine._schemafile import file_findings, index_columns, match_index, parse_type
from datacheck.schema._coerce import cast, categories_outside
from datacheck.schema._dtypes import arrow_type_for, dtype_matches
from datacheck.schema._spec import ColumnSpec, CompiledSchema, spec_rules

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


_NAN_TEXT = ("nan", "NaN", "-nan", "-NaN")


def _nan_text_as_null(arr: pa.Array) -> pa.Array:
    """A CSV text column's NaN spellings as null, as pandas' ``read_csv`` reads them."""
    mask = pc.is_in(arr, pa.array(_NAN_TEXT, arr.type))
    if not pc.any(mask).as_py():
        return arr
    return pc.if_else(mask, pa.nulls(len(arr), arr.type), arr)


def _severity(check: Any) -> Severity:
    return Severity.WARNING if getattr(check, "raise_warning", False) else ERR


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
        self.index_specs = match_index(self.stored_index, schema.index, schema.index_ordered)
        self.cache: dict[str, ColumnSpec | None] = {}
        self.unique_columns: dict[str, list[pa.Array]] = {}
        self.unique_sets: dict[int, list[pa.Table]] = {}
        self.whole: dict[tuple[str, int], list[pa.Array]] = {}
        """Checks that see the whole column at once (not element-wise), by column and index."""
        self.frames: list[pa.Table] = []
        """The checked (cast) columns of every batch, for schema-level checks."""
        self.current: dict[str, list[pa.Array]] = {}
        """This batch's checked columns, piece by piece."""
        self.errors: dict[tuple[str | None, str], fnd.Finding] = {}
        self.object_bools: dict[str, bool] = {}
        """Bool columns the schema calls ``object``: whether a null was seen. pandas reads
        one with a null as objects, one without as ``bool`` (which fails ``object``)."""
        self.batches = 0
        types = {f.name: f.type for f in arrow_schema} if arrow_schema is not None else {}
        self.dictionaries = {n: pa.types.is_dictionary(t) for n, t in types.items()}
        """Columns stored dictionary-encoded: pandas reads them as categories."""

    def parsed_columns(self, columns: dict[str, str]) -> dict[str, str]:
        """The types a CSV's numeric columns are reported with (they were read as text)."""
        if not self.text:
            return {}
        return {
            n: str(t)
            for n, t in self.schema.arrow_types.items()
            if columns.get(n) == "string" and parse_type(self.schema.columns[n].dtype)
        }

    # --- per column ---------------------------------------------------------------------

    def spec(self, name: str) -> ColumnSpec | None:
        """The schema column (merged, index level, or the schema's cast of undeclared
        columns) a file column is, None for a column the schema says nothing about."""
        if name not in self.cache:
            spec = self.index_specs.get(name)
            if spec is None and name not in self.stored_index:
                spec = self.schema.spec_for(name) or self.schema.undeclared
            self.cache[name] = spec
        return self.cache[name]

    def dropped(self, name: str) -> bool:
        """``strict: filter``: pandera drops a column it does not declare, unchecked."""
        return (
            self.schema.strict == "filter"
            and name not in self.stored_index
            and self.schema.spec_for(name) is None
        )

    def column(
        self, name: str, arr: pa.Array, is_float: bool, numeric: bool, offset: int, emit: Emit
    ) -> tuple[pa.Array, ColumnRules]:
        """The array to check (after ``default`` and ``coerce``) and its rules.

        A value that cannot be read or cast as the schema says is a ``schema`` finding at its
        row, and null afterwards (never also a ``null`` finding)."""
        spec = self.spec(name)
        if (
            self.text
            and pa.types.is_string(arr.type)
            and parse_type(getattr(spec, "dtype", None)) is None
        ):
            arr = _nan_text_as_null(arr)  # pandas reads these as NaN: null, in a text column
        if spec is None:
            if self.dropped(name):
                return arr, NOTHING
            self.current.setdefault(name, []).append(arr)
            return arr, undeclared_rules(is_float, numeric)
        source, bad = arr, None
        if spec.dtype == "object" and not spec.coerce and pa.types.is_boolean(arr.type):
            self.object_bools[name] = self.object_bools.get(name, False) or arr.null_count > 0
        text = self.text and pa.types.is_string(arr.type) and parse_type(spec.dtype) is not None
        if text:  # a CSV's numbers: parsed, then cast to the dtype (2.4 is no int64)
            arr, bad = _parse(arr, pa.float64())
        if self.text and pa.types.is_null(arr.type) and spec.coerce:  # pandas: float64 NaN
            arr = pa.nulls(len(arr), pa.float64())
        if spec.default is not None and arr.null_count:
            arr = fill_default(arr, spec)
        if text and arr.type != arrow_type_for(spec.dtype):
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
            _emit_mask(name, "schema", schema_bad, offset, emit)
        if bad is not None and rules.null is not None:
            nulls = ~_mask(pc.is_valid(arr)) & ~bad
            _emit_mask(name, "null", nulls, offset, emit, rules.null)
            rules = replace(rules, null=None)
        self.current.setdefault(name, []).append(arr)
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
            _emit_mask(name, "nan", valid & _mask(pc.is_nan(arr)), offset, emit)
            _emit_mask(name, "inf", valid & _mask(pc.is_inf(arr)), offset, emit)
        if result.error is not None:
            finding = fnd.Finding(self.path, "schema", ERR, result.error, name)
            self.errors.setdefault((name, "schema"), finding)
        return result.values, result.bad

    def pandas_checks(
        self, name: str, arr: pa.Array, rules: ColumnRules, offset: int, emit: Emit
    ) -> None:
        """Checks with no Arrow body run through pandera: element-wise ones on each batch
        (one finding per row and check), the others on the whole column in :meth:`finish`."""
        spec = self.spec(name)
        if spec is not None and spec.unique:
            self.unique_columns.setdefault(name, []).append(arr)
        if not rules.pandas_checks:
            return
        series = None
        merged: dict[tuple[str, Severity], np.ndarray] = {}
        for i, check in enumerate(rules.pandas_checks):
            key = (name, i)
            if key in self.whole or not per_value(check) or _meets_na(spec, check):
                self.whole.setdefault(key, []).append(arr)
                continue
            if series is None:
                series = self._series(name, arr)
            out = run_check(check, series)
            if out.passed is not None:  # it answered for the batch as a whole after all
                self.whole[key] = [arr]
                continue
            self._outcome(name, check, out, len(arr), offset, emit, merged)
        for (check_name, sev), mask in merged.items():
            _emit_mask(name, check_name, mask, offset, emit, sev)

    def _series(self, name: str, arr: Any) -> Any:
        """The column as pandera's checks see it: as pandas reads the file (a dictionary as a
        category), in the pandas type pandera casts to where the schema coerces it.  ``arr``:
        an array, or the arrays of several batches (their types may differ)."""
        return self._view(name, _pandas(arr if isinstance(arr, list) else [arr]))

    def _view(self, name: str, series: Any) -> Any:
        """A column as pandas holds it, as pandera's checks see it (see :meth:`_series`)."""
        if self.text and series.dtype == object and len(series) and series.isna().all():
            series = series.astype("float64")  # an empty CSV column, as pandas reads it
        series.name = name
        spec = self.spec(name)
        if spec is not None and spec.coerce and spec.target is not None:
            with contextlib.suppress(Exception):  # pandera casts it, whatever the type was
                cast_series = spec.target.coerce(series)
                if not (cast_series.notna() & series.isna()).any():  # a null stays null
                    series = cast_series
                    series.name = name
        elif self.dictionaries.get(name) and series.dtype != "category":
            series = series.astype("category")
        return series

    def _once(self, finding: fnd.Finding) -> None:
        """One column-level finding per column and check name; an error outranks a warning
        (two checks of one name, one ``raise_warning``: pandera reports both)."""
        key = (finding.column, finding.check)
        held = self.errors.get(key)
        if held is None or (held.severity != ERR and finding.severity == ERR):
            self.errors[key] = finding

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
        """Failing rows go to ``merged`` (one mask per check name) or straight to ``emit``;
        a check that raised is one finding; a verdict on the whole of it, one finding."""
        name, sev = report_name(check), _severity(check)
        if out.error is not None:  # once per column and check, row null
            self._once(fnd.Finding(self.path, name, sev, out.error, column))
            return
        if out.passed is False:
            self._once(fnd.Finding(self.path, name, sev, "failed on the whole file", column))
            return
        for col, rows in (out.bad or {}).items():
            mask = np.zeros(n, dtype=bool)
            if merged is not None:
                mask = merged.setdefault((name, sev), mask)
            mask[rows] = True
            if merged is None:
                _emit_mask(col, name, mask, offset, emit, sev)

    # --- per batch ----------------------------------------------------------------------

    def batch(self, batch: Any, offset: int, emit: Emit, check_column: Callable[..., None]) -> None:
        """Columns pandera would add, index levels that are row numbers, and what schema-level
        checks and uniqueness need: the checked columns of the batch."""
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        n = table.num_rows
        self.batches += 1
        fills = self.schema.fills(table.schema.names)
        for name, spec in self.schema.columns.items():  # add_missing_columns
            if fills and spec.fill and not spec.regex and name not in table.schema.names:
                self.cache.setdefault(name, spec)
                check_column(name, missing_column(spec, n), offset)
        checked = self._checked(table)
        if self.schema.index and not self.stored_index:
            spec = self.schema.index[0]
            self.cache.setdefault(spec.name, spec)
            check_column(spec.name, self._row_numbers(offset, n), offset)
        self.current = {}
        if not (self.schema.unique or self.schema.frame_checks):
            return
        for i, (cols, _keep) in enumerate(self.schema.unique):  # pandera: the columns present
            present = [c for c in dict.fromkeys(cols) if c in checked.schema.names]
            if present:
                self.unique_sets.setdefault(i, []).append(checked.select(present))
        if self.schema.frame_checks:
            self._frame_batch(checked, offset, emit)

    def _row_numbers(self, offset: int, n: int) -> pa.Array:
        start, step = 0, 1
        if self.range_index is not None:
            start = int(self.range_index.get("start", 0))
            step = int(self.range_index.get("step", 1))
        return pa.array(start + step * np.arange(offset, offset + n, dtype=np.int64))

    def _checked(self, table: pa.Table) -> pa.Table:
        """The batch as pandera validates it: each column after ``default``/``coerce`` (as
        checked here), without the index and the columns ``strict: filter`` drops."""
        columns: dict[str, Any] = {}
        for name, column in zip(table.schema.names, table.columns, strict=True):
            if name in self.stored_index or self.dropped(name):
                continue
            pieces = self.current.get(name)
            columns[name] = _joined(pieces) if pieces else column
        for name, pieces in self.current.items():  # columns pandera adds
            if name not in columns and name in self.schema.columns:
                columns[name] = _joined(pieces)
        return pa.table(columns) if columns else pa.table({})

    def _frame_batch(self, checked: pa.Table, offset: int, emit: Emit) -> None:
        """Element-wise schema-level checks run on each batch; the others see the whole file
        (:meth:`finish`)."""
        if not all(per_value(c) for c in self.schema.frame_checks):
            self.frames.append(checked)
        frame = None
        for check in self.schema.frame_checks:
            if not per_value(check):
                continue
            if frame is None:
                frame = self._frame(checked)
            self._outcome(None, check, run_check(check, frame), checked.num_rows, offset, emit)

    # --- per file -----------------------------------------------------------------------

    def finish(self, emit: Emit) -> list[fnd.Finding]:
        """What needs every row of the file: uniqueness and checks of the whole column."""
        for name, parts in self.unique_columns.items():  # a column: nulls ignored, as pandera
            series = _pandas(parts)
            dup = np.zeros(len(series), dtype=bool)
            present = series.notna().to_numpy()
            spec = self.spec(name)
            keep = _KEEP[spec.unique if spec is not None and spec.unique else "all"]
            dup[present] = series[present].duplicated(keep=keep).to_numpy()
            _emit_mask(name, "unique", dup, 0, emit)
        self._unique_sets(emit)
        for (name, i), arrays in self.whole.items():
            spec = self.spec(name)
            check = self._pandas_check(spec, name, arrays[0], i)
            series = self._series(name, arrays)
            self._outcome(name, check, run_check(check, series), len(series), 0, emit)
        if self.frames:
            frame = self._frame(self.frames)
            for check in self.schema.frame_checks:
                if not per_value(check):
                    self._outcome(None, check, run_check(check, frame), len(frame), 0, emit)
        if not self.batches:
            self._empty_file(emit)
        for name, nulls in self.object_bools.items():
            if not nulls:  # read whole, pandas gives it dtype bool
                msg = "dtype bool (no nulls: pandas reads it as bool, not objects), schema says object"
                self.errors.setdefault(
                    (name, "schema"), fnd.Finding(self.path, "schema", ERR, msg, name)
                )
        return list(self.errors.values())

    def _empty_file(self, emit: Emit) -> None:
        """A file without rows: pandera still runs every check, on empty columns (a check
        that wants rows, or compares types that do not compare, fails on those too)."""
        if self.arrow_schema is None:
            return
        empty = self.arrow_schema.empty_table()
        for name, column in zip(empty.schema.names, empty.columns, strict=True):
            spec = self.spec(name)
            if spec is None or self.dropped(name):
                continue
            arr = column.combine_chunks()
            is_float = pa.types.is_floating(arr.type)
            rules = spec_rules(spec, is_float, is_float or pa.types.is_integer(arr.type))
            series = self._series(name, arr)
            for check in rules.pandas_checks:
                self._outcome(name, check, run_check(check, series), 0, 0, emit)
        if self.schema.frame_checks:
            frame = self._frame(self._checked(empty))
            for check in self.schema.frame_checks:
                self._outcome(None, check, run_check(check, frame), 0, 0, emit)

    def _unique_sets(self, emit: Emit) -> None:
        """pandera checks the sets in turn and reports the first with duplicated rows."""
        for i, (cols, keep) in enumerate(self.schema.unique):
            parts = self.unique_sets.get(i)
            if not parts:
                continue
            frame = _frame(parts)
            dup = frame.duplicated(keep=_KEEP[keep]).to_numpy()
            dup = dup & frame.notna().any(axis=1).to_numpy()  # pandera drops null failures
            if dup.any():
                present = [c for c in dict.fromkeys(cols) if c in frame.columns]
                _emit_mask(",".join(present), "unique", dup, 0, emit)
                return

    def _frame(self, tables: pa.Table | list[pa.Table]) -> Any:
        """The checked columns as the DataFrame pandera's schema-level checks see."""
        frame = _frame(tables)
        for name in frame.columns:
            frame[name] = self._view(name, frame[name])
        return frame

    def _pandas_check(self, spec: ColumnSpec | None, name: str, arr: pa.Array, i: int) -> Any:
        is_float = pa.types.is_floating(arr.type)
        numeric = is_float or pa.types.is_integer(arr.type)
        assert spec is not None  # only schema columns have pandas checks
        return spec_rules(spec, is_float, numeric).pandas_checks[i]

    def file_findings(self, columns: dict[str, str], partition_columns: Any) -> list[fnd.Finding]:
        """Columns missing, unexpected, out of order, repeated, or of another dtype."""
        names = list(getattr(self.arrow_schema, "names", None) or columns)
        types = {f.name: f.type for f in self.arrow_schema} if self.arrow_schema is not None else {}
        for name, text in columns.items():  # text formats report integers they read as float64
            if str(types.get(name)) != text:
                with contextlib.suppress(ValueError, KeyError):
                    types[name] = pa.type_for_alias(text)
        return file_findings(self, columns, names, types, partition_columns)


NOTHING = ColumnRules(nan=None, inf=None)
"""No check at all: a column ``strict: filter`` drops."""


def undeclared_rules(is_float: bool, numeric: bool) -> ColumnRules:
    """A column the schema does not declare keeps datacheck's own checks (NaN, Inf, the fp16
    warning), not the null warning of a scan without a schema."""
    return replace(default_rules(is_float, numeric), null=None)


def per_value(check: Any) -> bool:
    """A check whose answer for a row depends on that row alone: it may run batch by batch."""
    return (
        isinstance(check, NumericCheck)
        or check.name in ELEMENTWISE
        or bool(getattr(check, "element_wise", False))
    )


def _meets_na(spec: ColumnSpec | None, check: Any) -> bool:
    """A check with ``ignore_na: false`` on a column pandera casts to a pandas nullable type
    (``Int64``, ``Float64``, ``boolean``): it meets ``<NA>``, which pandas refuses to compare,
    in some batches and not others; pandera sees the column whole."""
    import pandas as pd

    target = getattr(spec, "target", None)
    return bool(
        spec is not None
        and spec.coerce
        and not getattr(check, "ignore_na", True)
        and isinstance(getattr(target, "type", None), pd.api.extensions.ExtensionDtype)
    )


def _frame(tables: pa.Table | list[pa.Table]) -> Any:
    """Tables (a batch's, or every batch of the file) as one pandas DataFrame, the index the
    rows' positions."""
    import pandas as pd

    parts = [t.to_pandas() for t in (tables if isinstance(tables, list) else [tables])]
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame.index = pd.RangeIndex(len(frame))
    return frame


def _pandas(arrays: list[Any]) -> Any:
    """Arrays as one pandas Series (batches may be cast to types that differ: a category's
    dictionary of one batch holds int8, another's int64)."""
    import pandas as pd

    parts = [a.to_pandas() for a in arrays]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _joined(pieces: list[pa.Array]) -> Any:
    """A batch's pieces of one column as one column."""
    try:
        return pa.chunked_array(pieces)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        joined = pa.array(_pandas(pieces), from_pandas=True)
        return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _emit_mask(
    name: str | None, check: str, mask: np.ndarray, offset: int, emit: Emit, sev: Severity = ERR
) -> None:
    h = group_by_row(check, sev, mask, RowMap(len(mask)), None)
    if h is not None:
        emit(name, h, offset)


def fill_default(arr: pa.Array, spec: ColumnSpec) -> pa.Array:
    """pandera's ``default``: nulls take it before anything else (NaN stays NaN here: it is
    reported as NaN)."""
    try:
        if pa.types.is_null(arr.type):
            return pa.array([spec.default] * len(arr))
        return pc.fill_null(arr, pa.scalar(spec.default, arr.type))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return arr


def missing_column(spec: ColumnSpec, n: int) -> pa.Array:
    """The column pandera's ``add_missing_columns`` adds: its default (or nulls), cast to the
    column's own dtype (a schema-level ``dtype`` comes after, with ``coerce``)."""
    import pandas as pd

    series = pd.Series([spec.default] * n if spec.default is not None else [None] * n)
    if spec.own_dtype is not None:
        with contextlib.suppress(Exception):
            series = spec.own_dtype.try_coerce(series)
    try:
        arr = pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.nulls(n)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
