"""The differential harness: one schema and one file, validated by pandera and by datacheck.

pandera is the oracle: ``schema.validate(df, lazy=True)`` on what pandas reads from the file.
Both answers become sites ``(column, check, row)`` with a severity (pandera's check names
mapped to datacheck's, its index labels to rows).  A site on one side only, or with another
severity, must be explained by a row of ``datacheck.schema._differences.DIFFERENCES``: every
key of that table has its code here (:data:`RULES`: a mapping applied while the sites are
built, or a predicate deciding whether a difference is that row's), and a test pins that the
two hold the same keys.  Anything else is a disagreement.
"""

from __future__ import annotations

import copy
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import datacheck
from datacheck.checks._pandas import RANGE_NAMES
from datacheck.errors import SchemaError
from datacheck.schema._differences import DIFFERENCES


@dataclass(frozen=True)
class Site:
    column: str | None
    check: str
    row: int | None


@dataclass
class Answer:
    """One side's answer: sites with their severity, and (pandera) what each site came from."""

    sites: dict[Site, str] = field(default_factory=dict)
    kinds: dict[Site, set[str]] = field(default_factory=dict)
    """pandera: ``dtype``, ``coerce``, ``check``, ``check_error``, ``null``, ``unique``,
    ``presence``, ``frame``, ``aggregate``; datacheck: the finding's value (text)."""
    values: dict[Site, Any] = field(default_factory=dict)
    """pandera: the failure case of each site (its first)."""
    types: dict[str, str] = field(default_factory=dict)
    """datacheck: each column's type as the scan read it."""

    def add(self, site: Site, severity: str, kind: str, value: Any = None) -> None:
        if self.sites.get(site) != "error":  # an error and a warning at one site: error
            self.sites[site] = severity
        self.kinds.setdefault(site, set()).add(kind)
        self.values.setdefault(site, value)


@dataclass
class Example:
    """What both sides saw: the schema, the data as written, the format and the file."""

    schema: Any
    """A pandera ``DataFrameSchema`` (``DataFrameModel`` classes are given as their schema)."""
    table: pa.Table
    fmt: str
    path: Path
    frame: pd.DataFrame
    """What pandas reads from the file: pandera validates this."""
    index_names: dict[str, str] = field(default_factory=dict)
    """Columns that hold a stored index (and the schema's index levels) -> pandera's name."""

    def __post_init__(self) -> None:
        if self.fmt == "csv" and self.table.num_columns == 1:  # a null is a blank line: skipped
            self.table = self.table.filter(self.table.column(0).is_valid())

    def value(self, column: str | None, row: int | None) -> Any:
        """The value as written (NaN and null kept apart), or None."""
        if column is None or row is None or column not in self.table.column_names:
            return None
        if row >= self.table.num_rows:
            return None
        return self.table.column(column)[row].as_py()

    def read_value(self, column: str | None, row: int | None) -> Any:
        """The value as pandas read it."""
        if column is None or row is None or column not in self.frame.columns:
            return None
        try:
            return self.frame[column].iloc[row]
        except (IndexError, KeyError):
            return None


def write(
    table: pa.Table, fmt: str, folder: Path, row_group_size: int | None = 2, index=None
) -> Path:
    """The file, written by its real producer (pyarrow; pandas for a stored index)."""
    path = folder / f"data.{fmt}"
    if index is not None:
        df = table.to_pandas()
        df.index = index
        df.to_parquet(path, row_group_size=row_group_size)
    elif fmt == "parquet":
        pq.write_table(table, path, row_group_size=row_group_size)
    else:
        pacsv.write_csv(table, path)
    return path


def read(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)  # both skip blank lines (a lone null in a one-column CSV)
    return pd.read_parquet(path)


# --- pandera's answer --------------------------------------------------------------------

_PRESENCE = {
    "column_in_schema",
    "column_in_dataframe",
    "column_ordered",
    "dataframe_column_labels_unique",
    "add_missing_has_default",
    "column_in_index",
}


class PanderaRaised(Exception):
    """pandera itself raised something other than its validation errors: no oracle here."""


def quiet(schema: Any) -> Any:
    """The schema with every failure reported (``n_failure_cases`` and ``drop_invalid_rows``
    rows) and warnings as failures (their severity is taken from the original)."""
    out = copy.deepcopy(schema)
    components = [*out.columns.values(), out]
    if out.index is not None:
        components += list(getattr(out.index, "indexes", [out.index])) + [out.index]
    for c in components:
        for check in getattr(c, "checks", None) or ():
            check.raise_warning = False
            check.n_failure_cases = None
        if hasattr(c, "drop_invalid_rows"):
            c.drop_invalid_rows = False
    return out


def pandera_answer(schema: Any, frame: pd.DataFrame) -> tuple[Answer, pd.DataFrame | None]:
    """pandera's failure cases on ``frame`` as sites (and the raw failure cases)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quiet(expand_patterns(schema, frame)).validate(frame, lazy=True)
        return Answer(), None
    except pa_.errors.SchemaErrors as exc:
        cases = exc.failure_cases
    except Exception as exc:  # noqa: BLE001 - pandera's own failure: no oracle
        raise PanderaRaised(f"{type(exc).__name__}: {exc}"[:300]) from exc
    cases = _relabel_pattern_verdicts(schema, cases.copy(), frame)
    answer = Answer()
    positions = _positions(frame.index)
    for r in cases.itertuples():
        for site, kind, severity in _pandera_sites(schema, r, positions, frame):
            value = r.failure_case  # a frame's cast names {column: value}
            if isinstance(value, dict) and site.column in value:
                value = value[site.column]
            answer.add(site, severity, kind, value)
    return answer, cases


def expand_patterns(schema: Any, frame: pd.DataFrame) -> Any:
    """The schema with each pattern column written as one column per file column it matches.

    pandera checks each match on its own (``ColumnBackend.validate``) but a match whose
    validation raises renames the shared column object, so every failure after it carries
    the last such name; the expanded schema means the same and names each failure right.
    Left as is where a file column is matched twice (two patterns, or a name and a pattern).
    """
    keys = list(schema.columns)
    matches = {
        k: [c for c in frame.columns if re.match(k, str(c))]
        for k, col in schema.columns.items()
        if col.regex
    }
    named = [c for k in keys if k not in matches for c in [k]]
    taken = [c for m in matches.values() for c in m] + named
    if not matches or len(taken) != len(set(taken)):
        return schema
    columns = {}
    for key, col in schema.columns.items():
        if key not in matches or not matches[key]:
            columns[key] = col
            continue
        for name in matches[key]:
            one = copy.deepcopy(col)
            one.regex, one.name = False, name
            columns[name] = one
    out = copy.deepcopy(schema)
    out.columns = columns
    return out


def _relabel_pattern_verdicts(schema: Any, cases: pd.DataFrame, frame: pd.DataFrame) -> Any:
    """pandera names every column a pattern matched after the first when a check of the
    column as a whole fails on each (``unique_values_eq`` on ``x_\\d``): one verdict per
    matched column, in the frame's order."""
    rows = cases[(cases.schema_context == "Column") & cases["index"].isna()]
    keys = ["column", "check", "check_number"]
    for (col, _chk, _num), group in rows.groupby(keys, dropna=False):
        if len(group) < 2:
            continue
        for key, column in schema.columns.items():
            matched = [c for c in frame.columns if column.regex and re.match(key, str(c))]
            if col in matched and len(matched) == len(group):
                cases.loc[group.index, "column"] = matched
                break
    return cases


def _positions(index: pd.Index) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for i, label in enumerate(index):
        out.setdefault(label, i)
        out.setdefault(str(label), i)
        if isinstance(label, tuple):  # a MultiIndex label, as pandera writes it: "(2, -1)"
            plain = tuple(v.item() if isinstance(v, np.generic) else v for v in label)
            out.setdefault(str(plain), i)
    return out


def _pandera_sites(
    schema: Any, r: Any, positions: dict[Any, int], frame: pd.DataFrame
) -> list[tuple[Site, str, str]]:
    ctx, col, chk = r.schema_context, r.column, str(r.check)
    row = None if r.index is None or _isna(r.index) else positions.get(r.index)
    if r.index is not None and not _isna(r.index) and row is None:
        row = positions.get(str(r.index))
    if ctx == "MultiIndex" and _isna(col):  # a level's check failing as a whole: no name
        owners = [
            lv.name
            for lv in schema.index.indexes
            if any(str(c.error or c.name) == chk or str(c) == chk for c in lv.checks)
        ]
        if chk.startswith("dtype("):
            owners = [lv.name for lv in schema.index.indexes if f"dtype('{lv.dtype}')" == chk]
        if len(owners) > 1:  # a level the file does not store is not checked
            owners = [n for n in owners if n in list(frame.index.names)]
        col = owners[0] if len(owners) == 1 else col
    if ctx in ("Index", "MultiIndex"):
        col = index_label(None if _isna(col) else col)
    elif _isna(col):
        col = None
    elif col not in frame.columns and col in schema.columns and schema.columns[col].regex:
        col = _matched_column(frame, col, row, r.failure_case)  # pandera names the pattern
    if chk in _PRESENCE:
        name = r.failure_case
        return [
            (
                Site(index_label(name) if ctx != "DataFrameSchema" else name, "schema", None),
                "presence",
                "error",
            )
        ]
    if chk.startswith("no_regex_column_match("):
        return [
            (Site(chk[len("no_regex_column_match('") : -2], "schema", None), "presence", "error")
        ]
    if chk == "not_nullable":
        return [(Site(col, "null", row), "null", "error")]
    if chk == "field_uniqueness":
        return [(Site(col, "unique", row), "unique", "error")]
    if chk == "multiple_fields_uniqueness":
        return [(Site(("unique-set", col), "unique", row), "unique", "error")]  # joined later
    if chk.startswith(("dtype(", "coerce_dtype(")):
        kind = "dtype" if chk.startswith("dtype(") else "coerce"
        if isinstance(r.failure_case, dict):  # a schema-level cast: {column: value}
            return [(Site(k, "schema", row), kind, "error") for k in r.failure_case]
        return [(Site(col, "schema", row), kind, "error")]
    if chk.startswith("field_name("):
        return [(Site(col, "schema", None), "presence", "error")]
    checks = _check_objects(schema, ctx, col, r.check_number, chk)
    if not checks:
        return [(Site(col, chk, row), "unknown", "error")]
    check = checks[0]
    name = report_name(check)  # checks alike in name and label: an error if any is one
    severity = "warning" if all(c.raise_warning for c in checks) else "error"
    failure = r.failure_case
    if isinstance(failure, str) and re.match(r"^[A-Za-z]+(Error|Exception)\(", failure):
        return [
            (Site(None if ctx == "DataFrameSchema" else col, name, None), "check_error", severity)
        ]
    if ctx == "DataFrameSchema":
        if isinstance(failure, dict):  # a check answering cell by cell
            return [(Site(k, name, row), "frame", severity) for k in failure]
        return [(Site(None, name, row), "frame" if row is not None else "aggregate", severity)]
    return [(Site(col, name, row), "check" if row is not None else "aggregate", severity)]


def _matched_column(frame: pd.DataFrame, pattern: str, row: int | None, value: Any) -> str:
    """The column a pattern's failure is about: the matching column holding the value."""
    matched = [c for c in frame.columns if re.match(pattern, str(c))]
    for c in matched:
        v = frame[c].iloc[row] if row is not None and row < len(frame) else None
        if (_isna(v) and _isna(value)) or (not _isna(v) and str(v) == str(value)):
            return str(c)
    return str(matched[0]) if matched else pattern


def index_label(name: Any) -> str:
    return f"index:{name if name is not None else '__index_level_0__'}"


def _isna(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def report_name(check: Any) -> str:
    name = "out_of_range" if check.name in RANGE_NAMES else str(check.name)
    return "extreme" if name == "max_abs" else name


def _check_objects(schema: Any, ctx: str, col: Any, number: Any, label: str) -> list[Any]:
    """The schema's checks a failure case can be from (pandera numbers alike checks alike)."""
    if number is None or _isna(number):
        return []
    n = int(number)
    if ctx == "DataFrameSchema":
        candidates = [schema.checks]
    elif ctx in ("Index", "MultiIndex"):
        levels = list(getattr(schema.index, "indexes", [schema.index]))
        candidates = [lv.checks for lv in levels]
    else:
        candidates = [
            c.checks
            for k, c in schema.columns.items()
            if (re.match(k, str(col)) if c.regex else k == col)
        ]
    found = [c for checks in candidates for c in checks if (c.error or c.name) == label]
    if found:
        return found
    return [checks[n] for checks in candidates if n < len(checks)][:1]


# --- datacheck's answer ------------------------------------------------------------------


class Refused(Exception):
    """datacheck refused the schema (one line, exit 2)."""


def datacheck_answer(schema: Any, path: Path, out: Path, index_names: Any) -> Answer:
    """``datacheck.scan`` in this process (no worker processes: the fast path) as sites."""
    try:
        report = datacheck.scan(path, schema=schema, out=out, isolate=False, workers=1)
    except SchemaError as exc:
        raise Refused(str(exc)) from exc
    answer = findings_answer(report.findings, index_names)
    answer.types = dict(report.data["files"][0].get("columns") or {})
    return answer


FILE_ONLY = ("empty", "duplicate")
"""datacheck's findings about the file itself (0 rows, the same bytes as another file): no
schema says them, in pandera or here, so they are no part of the comparison."""


def findings_answer(f: pd.DataFrame, index_names: set[str] | dict[str, str]) -> Answer:
    """The scan's findings as sites; a stored index column is named by the schema's level it
    is (``index_names``: stored name -> level name), as pandera names it."""
    answer = Answer()
    aliases = index_names if isinstance(index_names, dict) else {n: n for n in index_names}
    for r in f.itertuples():
        if r.check in FILE_ONLY:
            continue
        col = None if pd.isna(r.column) else r.column
        if col is not None and col in aliases:
            col = index_label(aliases[col])
        row = None if pd.isna(r.row) else int(r.row)
        answer.add(Site(col, r.check, row), r.severity, "" if pd.isna(r.value) else str(r.value))
    return answer


def join_unique_sets(schema: Any, answer: Answer, columns: Any = None) -> Answer:
    """pandera names each column of a duplicated set at each row; datacheck one site per row
    under the set's columns joined by ',' (DIFFERENCES ``unique``)."""
    by_row: dict[Any, list[str]] = {}
    out = Answer()
    for site, sev in answer.sites.items():
        if isinstance(site.column, tuple) and site.column[0] == "unique-set":
            by_row.setdefault(site.row, []).append(site.column[1])
        else:
            out.sites[site] = sev
            out.kinds[site] = answer.kinds[site]
    sets = _unique_sets(schema)
    for row, cols in by_row.items():
        match = next((s for s in sets if set(cols) <= set(s)), sorted(cols))  # nulls dropped
        if columns is not None:  # the set's columns the file has
            match = [c for c in match if c in columns] or match
        out.add(Site(",".join(match), "unique", row), "error", "unique")
    return out


def _unique_sets(schema: Any) -> list[list[str]]:
    unique = schema.unique or []
    items = [unique] if isinstance(unique, str) else list(unique)
    sets = [items] if all(isinstance(x, str) for x in items) else items
    return [[c for c in dict.fromkeys(s)] for s in sets]


# --- the comparison, row by row of DIFFERENCES -------------------------------------------

Rule = Callable[["Example", Answer, Answer, Site, str], bool]


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _is_inf(v: Any) -> bool:
    return isinstance(v, float) and math.isinf(v)


def _columns(ex: Example, col: str | None) -> list[Any]:
    """The schema columns (pandera ``Column`` objects) that name a file column."""
    if col is None:
        return []
    return [
        c for k, c in ex.schema.columns.items() if (re.match(k, str(col)) if c.regex else k == col)
    ]


def _in_column(answer: Answer, col: Any, kinds: set[str] | None = None, check: str | None = None):
    return [
        s
        for s in answer.sites
        if s.column == col
        and (check is None or s.check == check)
        and (kinds is None or answer.kinds.get(s, set()) & kinds)
    ]


def _nan(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    """NaN is not null: a ``nan`` finding at a NaN (in a CSV, text pandas reads as NaN);
    what pandera reports at it (null, a check it fails) is explained where the scan reports
    the NaN."""
    v = ex.value(site.column, site.row)
    spelt = ex.fmt == "csv" and isinstance(v, str) and v.strip().lower() in ("nan", "-nan")
    if not (_is_nan(v) or spelt):
        return False
    if side == "datacheck":
        return site.check == "nan"
    return Site(site.column, "nan", site.row) in ours.sites


def _inf(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    if not _is_inf(ex.value(site.column, site.row)):
        return False
    if side == "datacheck":
        return site.check == "inf"
    return Site(site.column, "inf", site.row) in ours.sites


def _dtype(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    """One ``schema`` finding for a column of another stored type, where pandera may name
    values; a stored type that is the schema's (pandas reads another: int64 with nulls);
    a category's null left to ``nullable``."""
    if site.check != "schema":
        return False
    if side == "datacheck":  # pandera names values, or passes what pandas read instead
        if site.row is not None:
            return False
        return bool(_in_column(theirs, site.column, {"dtype"})) or (
            ex.fmt == "parquet" and not _stored_type_is_schemas(ex, site.column)
        )
    if not theirs.kinds.get(site, set()) <= {"dtype", "coerce"}:
        return False
    if Site(site.column, "schema", None) in ours.sites:
        return True
    if "dtype" in theirs.kinds.get(site, set()) and _stored_type_is_schemas(ex, site.column):
        return True
    is_category = any(str(c.dtype) == "category" for c in _columns(ex, site.column))
    return is_category and ex.value(site.column, site.row) is None


def _stored_type_is_schemas(ex: Example, col: str | None) -> bool:
    """pandera's dtype check passes on what pandas reads from the stored type, without nulls."""
    from pandera.engines import pandas_engine

    if ex.fmt != "parquet" or col not in ex.table.column_names:
        return False
    stored = pq.read_schema(ex.path).field(col).type
    if pa.types.is_timestamp(stored):  # units are not compared (DIFFERENCES dtype)
        stored = pa.timestamp("ns", stored.tz)
    elif pa.types.is_duration(stored):
        stored = pa.duration("ns")
    try:
        read = pa.array([], stored).to_pandas().dtype
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    dtypes = [c.dtype for c in _columns(ex, col) if c.dtype is not None]
    if ex.schema.dtype is not None:
        dtypes = [ex.schema.dtype]
    try:
        return bool(dtypes) and all(_admits(d, pandas_engine.Engine.dtype(read)) for d in dtypes)
    except (TypeError, ValueError):
        return False


def _admits(dtype: Any, read: Any) -> bool:
    """pandera's dtype check, where pandas' nullable types (``Int64``, ``boolean``, ...) also
    admit the numpy type pandas reads Parquet into (DIFFERENCES ``dtype``)."""
    from pandera.engines import pandas_engine

    if bool(dtype.check(read)):
        return True
    if isinstance(getattr(dtype, "type", None), pd.api.extensions.ExtensionDtype):
        try:
            numpy = pandas_engine.Engine.numpy_dtype(dtype)
            return bool(pandas_engine.Engine.dtype(numpy).check(read))
        except TypeError:
            return False
    return False


def _fp16(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    v = ex.value(site.column, site.row)
    if side != "datacheck" or site.check != "extreme" or ours.sites[site] != "warning":
        return False
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    if abs(v) <= 65504:
        return False
    return not any(c.name == "max_abs" for col in _columns(ex, site.column) for c in col.checks)


def _text_dtype(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    """CSV stores no types: the scan reads a column the schema gives a numeric or str dtype
    as that type, others as Arrow infers them; pandas infers its own.  Where the two read
    a column as different kinds of data, what is checked on it differs."""
    if ex.fmt != "csv":
        return False
    if _read_differently(ex, ours, site.column):
        return True
    if site.column is None and site.check != "schema":  # a schema-level check sees them all
        if site.row is not None and any(  # a cell not of its dtype is null afterwards
            Site(c, "schema", site.row) in ours.sites for c in ex.frame.columns
        ):
            return True
        return any(_read_differently(ex, ours, c) for c in ex.frame.columns)
    if site.check != "schema":  # a cell that is not of the dtype is not checked further
        cells = [s for s in _in_column(ours, site.column, check="schema") if s.row is not None]
        if side == "datacheck" and site.row is None and cells:
            return True  # a check that raised on the column read as the schema's type
        if _whole_column(ex, site.column, site.check):  # nor seen by a check of the column
            return any(s.row is not None for s in _in_column(ours, site.column, check="schema"))
        return site.row is not None and Site(site.column, "schema", site.row) in ours.sites
    if side == "pandera":
        return bool(theirs.kinds.get(site, set()) & {"dtype"})
    return site.row is None or bool(_in_column(theirs, site.column, {"dtype"}))


def _kind(text: str) -> str:
    for word, kind in (("int", "number"), ("float", "number"), ("double", "number")):
        if word in text:
            return kind
    for word in ("bool", "timestamp", "datetime", "date", "null"):
        if word in text:
            return word.replace("datetime", "timestamp")
    return "text" if ("str" in text or "object" in text or "utf8" in text) else text


def _read_differently(ex: Example, ours: Answer, col: str | None) -> bool:
    if col is None or col not in ex.frame.columns or col not in ours.types:
        return False
    pandas_kind = _kind(str(ex.frame[col].dtype).lower())
    if pandas_kind == "number" and ex.frame[col].isna().all():
        pandas_kind = "null"
    return pandas_kind != _kind(ours.types[col].lower())


def _whole_column(ex: Example, col: str | None, name: str) -> bool:
    """The column's check of that name answers for a row from other rows too."""
    from datacheck.engine._schemacheck import per_value

    checks = [c for s in _columns(ex, col) for c in s.checks if report_name(c) == name]
    return bool(checks) and not all(per_value(c) for c in checks)


def _coerce(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    col = site.column
    if col is None and site.row is not None and site.check != "schema":  # a schema-level check
        return any(  # sees the cast values of a row whose cast failed, or that pandera changed
            _coerce(ex, theirs, ours, Site(c, site.check, site.row), side)
            for c in ex.frame.columns
            if Site(c, "schema", site.row) in ours.sites or _pandera_cast_changes(ex, c, site.row)
        )
    if isinstance(col, str) and "," in col and col not in ex.frame.columns:  # a unique set
        return any(
            _coerce(ex, theirs, ours, Site(c, site.check, site.row), side) for c in col.split(",")
        )
    frame_cast = ex.schema.dtype is not None and (  # pandera casts the whole frame
        ex.schema.coerce or any(c.coerce for c in ex.schema.columns.values())
    )
    coerced = any(c.coerce for c in _columns(ex, col)) or ex.schema.coerce or frame_cast
    if not coerced:
        return False
    if site.check == "schema":
        if side == "pandera":
            if _isna(theirs.values.get(site)) and theirs.kinds.get(site, set()) & {"coerce"}:
                return True  # pandera's cast fails on a null: a null stays null
            if col is None and site.row is None:  # the frame's cast failed: the scan names it
                return any(s.check == "schema" for s in ours.sites)
            if theirs.kinds.get(site) == {"dtype"} and _in_column(theirs, col, {"coerce"}):
                return True  # pandera names a cast that failed a second time, as its dtype
            if (
                theirs.kinds.get(site) == {"dtype"}
                and _frame_cast_failed(ex, theirs)
                and (any(s.check == "schema" for s in ours.sites) or _holds_null(ex))
            ):
                return True  # the frame left uncast (a null stays null: no finding)
            if site.row is None:  # pandera fails the column as a whole: the scan names rows
                return bool([s for s in _in_column(ours, col, check="schema") if s.row is not None])
            return ex.value(col, site.row) is None  # a null stays null
        if site.row is not None:
            v = ex.value(col, site.row)  # NaN or Inf into an integer: pandera drops NaN
            if (_is_nan(v) or _is_inf(v)) and _integer_target(ex, col):  # from its failures
                return True
            return _pandera_cast_changes(ex, col, site.row) or bool(
                _in_column(theirs, col, {"coerce"})
            )
        return False
    if site.row is not None and _pandera_cast_changes(ex, col, site.row):
        return True  # pandera's cast changed the value (a null into bool is True): it checks that
    if _whole_column(ex, col, site.check) and [
        s for s in _in_column(ours, col, check="schema") if s.row is not None
    ]:
        return True  # a check of the whole column: some of its values did not cast
    if (site.check == "unique" or site.row is None) and any(
        _pandera_cast_changes(ex, col, r) for r in range(len(ex.frame))
    ):
        return True  # a value pandera's cast made (from a null) duplicates this one, or the
        # column pandera checks as a whole holds it
    if bool(_in_column(theirs, col, {"coerce"})) or _frame_cast_failed(ex, theirs):
        return True  # pandera checks the uncast column
    raised = theirs.kinds.get(Site(col, site.check, None), set())
    if side == "datacheck" and "check_error" in raised and _in_column(ours, col, check="schema"):
        return True  # the check raised on what pandera's cast made; the scan's ran on its own
    return site.row is not None and Site(col, "schema", site.row) in ours.sites


def _integer_target(ex: Example, col: str | None) -> bool:
    dtypes = [c.dtype for c in _columns(ex, col) if c.dtype is not None]
    if ex.schema.dtype is not None:
        dtypes = [ex.schema.dtype]
    return any(re.match(r"^u?int|^bool", str(d), re.IGNORECASE) for d in dtypes)


def _holds_null(ex: Example) -> bool:
    return any(c.null_count for c in ex.table.columns)


def _frame_cast_failed(ex: Example, theirs: Answer) -> bool:
    """A schema-level ``dtype`` cast that failed somewhere: pandera casts the frame whole or
    not at all, so every column stays as pandas read it (and fails its dtype)."""
    frame_cast = ex.schema.dtype is not None and (
        ex.schema.coerce or any(c.coerce for c in ex.schema.columns.values())
    )
    return frame_cast and any("coerce" in k for k in theirs.kinds.values())


def _pandera_cast_changes(ex: Example, col: str | None, row: int) -> bool:
    """pandera's cast of the value pandas read changes it (a wrap, a cut fraction, NaN or
    Inf into an integer, an overflow, text into bool)."""
    cast = [c for c in _columns(ex, col) if c.coerce or ex.schema.coerce]
    dtypes = [c.dtype for c in cast if c.dtype is not None]
    if ex.schema.dtype is not None:
        dtypes = [ex.schema.dtype]
    if not dtypes or col not in ex.frame.columns:
        return False
    series = ex.frame[col].iloc[[row]]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if ex.schema.dtype is not None:  # pandera casts the frame as a whole (astype)
                cast = ex.schema.dtype.coerce(ex.frame[[col]].iloc[[row]])[col]
            else:
                cast = dtypes[0].coerce(series)
    except Exception:  # noqa: BLE001 - pandera's cast fails: it names the value itself
        return False
    before, after = series.iloc[0], cast.iloc[0]
    if _isna(before) or _isna(after):
        return _isna(before) != _isna(after) or _is_nan(ex.value(col, row))
    try:
        if isinstance(after, (bool, np.bool_)) or isinstance(before, str):
            return str(after) != str(before)
        return bool(after != before) or math.isfinite(float(after)) != math.isfinite(float(before))
    except (TypeError, ValueError):
        return str(after) != str(before)


def _undeclared(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    if side != "datacheck" or site.check not in ("nan", "inf", "extreme"):
        return False
    col = site.column
    if col is None or str(col).startswith("index:") or _columns(ex, col):
        return False
    if ex.schema.strict == "filter":
        return False
    return site.check != "extreme" or _fp16(ex, theirs, ours, site, side)


def _null_column(ex: Example, theirs: Answer, ours: Answer, site: Site, side: str) -> bool:
    """A summary of the column's ``null`` findings (each compared with pandera's on its own):
    at least half its rows."""
    if side != "datacheck" or site.check != "null_column" or site.row is not None:
        return False
    nulls = len(_in_column(ours, site.column, check="null"))
    return bool(len(ex.frame)) and nulls >= 0.5 * len(ex.frame)


def _mapped(*_: Any) -> bool:
    return False  # applied while the sites are built, not as an explanation


RULES: dict[str, Rule] = {
    "nan": _nan,
    "inf": _inf,
    "rows": _mapped,  # pandera's index labels -> rows of the file (pandera_answer)
    "range_name": _mapped,  # report_name
    "dtype": _dtype,
    "unique": _mapped,  # join_unique_sets
    "fp16": _fp16,
    "text_dtype": _text_dtype,
    "aggregate": _mapped,  # a verdict on the whole file: row None on both sides
    "index": _mapped,  # index_label on both sides
    "coerce": _coerce,
    "check_error": _mapped,  # pandera's exception text -> row None (_pandera_sites)
    "n_failure_cases": _mapped,  # quiet(): every failure case
    "drop_invalid_rows": _mapped,  # quiet(): the rows are reported
    "null_column": _null_column,
    "undeclared": _undeclared,
}
"""The code of each DIFFERENCES row; ``tests/schema/test_generated.py`` pins the keys."""


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    """Differences no DIFFERENCES row explains: empty when the two agree."""
    used: dict[str, int] = field(default_factory=dict)
    """How many differences each DIFFERENCES row explained."""


def compare(ex: Example, theirs: Answer, ours: Answer) -> Verdict:
    """Every difference between the two answers, explained by a row of DIFFERENCES or not."""
    assert set(RULES) == set(DIFFERENCES), "every DIFFERENCES row has its code, and only those"
    verdict = Verdict()
    for side, mine, other in (("pandera", theirs, ours), ("datacheck", ours, theirs)):
        for site in mine.sites:
            if site in other.sites:
                continue
            key = next((k for k in DIFFERENCES if RULES[k](ex, theirs, ours, site, side)), None)
            if key is None:
                v = ex.value(site.column, site.row)
                verdict.problems.append(f"{side} only: {site} (value {v!r})")
            else:
                verdict.used[key] = verdict.used.get(key, 0) + 1
    for site in theirs.sites.keys() & ours.sites.keys():
        if theirs.sites[site] == ours.sites[site]:
            continue
        key = next((k for k in DIFFERENCES if RULES[k](ex, theirs, ours, site, "severity")), None)
        if key is None:
            verdict.problems.append(
                f"severity of {site}: pandera {theirs.sites[site]}, datacheck {ours.sites[site]}"
            )
        else:
            verdict.used[key] = verdict.used.get(key, 0) + 1
    return verdict


def differences(ex: Example, ours: Answer) -> Verdict:
    """pandera on ``ex.frame`` against datacheck's answer ``ours``."""
    theirs, _ = pandera_answer(ex.schema, ex.frame)
    theirs = join_unique_sets(ex.schema, theirs, ex.frame.columns)
    return compare(ex, theirs, ours)


# --- hand-written cases (tests/schema/test_differential.py) ------------------------------


@dataclass
class Case:
    """A schema, the data (an Arrow table: NaN and null kept apart), and where it runs."""

    name: str
    schema: Any
    data: pa.Table
    formats: tuple[str, ...] = ("parquet", "csv")
    allowed: frozenset[str] = field(default_factory=frozenset)
    """Unused: every difference is explained by the rules (kept for the cases' readability)."""
    row_group_size: int | None = 2
    index: pd.Index | None = None
    """A pandas index to store in the Parquet file (written through pandas)."""


def index_names(schema: Any, index: pd.Index | None) -> dict[str, str]:
    """Stored index columns and the schema's index levels -> the name pandera gives them:
    a single level's own name in the schema (a MultiIndex: each level by its name)."""
    names: dict[str, str] = {}
    levels = []
    if getattr(schema, "index", None) is not None:
        levels = list(getattr(schema.index, "indexes", [schema.index]))
        for i, lv in enumerate(levels):
            names[lv.name or f"__index_level_{i}__"] = lv.name or f"__index_level_{i}__"
    if index is not None:
        stored = [n if n is not None else f"__index_level_{i}__" for i, n in enumerate(index.names)]
        for name in stored:
            names.setdefault(name, name)
        if len(levels) == 1 and len(stored) == 1:
            names[stored[0]] = levels[0].name or "__index_level_0__"
    return names


def run(case: Case, fmt: str, folder: Path, spec: Any = None) -> list[str]:
    """The differences no DIFFERENCES row explains (empty: the case passes)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write(case.data, fmt, folder, case.row_group_size, case.index)
    schema = case.schema
    names = index_names(schema, case.index)
    ours = datacheck_answer(schema if spec is None else spec, path, folder / "out", names)
    ex = Example(schema, case.data, fmt, path, read(path), names)
    return differences(ex, ours).problems


# --- generated examples (tests/schema/test_generated.py) ---------------------------------


@dataclass
class Outcome:
    """One generated example, judged."""

    status: str
    """``agree``, ``disagree``, ``refused`` (datacheck refused what pandera runs),
    ``no_oracle`` (pandera itself raised)."""
    problems: list[str] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)


def check_generated(gen: Any, folder: Path, cli: bool = False) -> Outcome:
    """Write the example, validate it with pandera, scan it with datacheck (in this process,
    or through the CLI), compare."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write(gen.table, gen.fmt, folder, gen.row_group_size, gen.index)
    spec: Any = gen.schema
    try:
        schema = gen.pandera_schema
    except Exception as exc:  # noqa: BLE001 - a model pandera cannot build: datacheck refuses it
        try:
            datacheck_answer(spec, path, folder / "out", set())
        except Refused:
            return Outcome("no_oracle", [f"pandera: {exc}"[:300]])
        return Outcome("disagree", [f"pandera cannot build the schema ({exc}); datacheck ran it"])
    if gen.yaml or cli:
        try:
            text = schema.to_yaml()
        except Exception:  # noqa: BLE001 - lambdas and the like have no YAML
            text = None
        if text is not None:
            (folder / "schema.yaml").write_text(text)
            spec = folder / "schema.yaml"
            try:
                schema = pa_.DataFrameSchema.from_yaml(text)
            except Exception as exc:  # noqa: BLE001 - pandera cannot read its own YAML
                try:
                    datacheck_answer(spec, path, folder / "out", set())
                except Refused:  # nor can datacheck: one line
                    return Outcome("no_oracle", [f"pandera from_yaml: {exc}"[:300]])
                return Outcome(
                    "disagree", [f"pandera cannot read its YAML ({exc}); datacheck ran it"]
                )
        elif cli:
            return Outcome("no_oracle", ["no YAML for this schema"])
    frame = read(path)
    names = index_names(schema, gen.index)
    try:
        theirs, _ = pandera_answer(schema, frame)
    except PanderaRaised as exc:
        return Outcome("no_oracle", [str(exc)])
    try:
        if cli:
            ours = cli_answer(spec, path, folder / "out", names)
        else:
            ours = datacheck_answer(spec, path, folder / "out", names)
    except Refused as exc:
        return Outcome("refused", [str(exc)])
    ex = Example(schema, gen.table, gen.fmt, path, frame, names)
    verdict = compare(ex, join_unique_sets(schema, theirs, frame.columns), ours)
    return Outcome("disagree" if verdict.problems else "agree", verdict.problems, verdict.used)


def cli_answer(spec: Any, path: Path, out: Path, names: Any) -> Answer:
    """The real CLI, as a user runs it: exit 0/1 with a report, 2 with one line."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(datacheck.__file__).parents[1])}
    cmd = [sys.executable, "-m", "datacheck", "scan", str(path), "--schema", str(spec)]
    res = subprocess.run(
        [*cmd, "--out", str(out)], env=env, capture_output=True, text=True, timeout=300
    )
    if res.returncode == 2:
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        raise Refused(res.stderr.strip())
    assert res.returncode in (0, 1), f"exit {res.returncode}: {res.stderr[-2000:]}"
    report = datacheck.load_report(out)
    answer = findings_answer(report.findings, names)
    answer.types = dict(report.data["files"][0].get("columns") or {})
    return answer
