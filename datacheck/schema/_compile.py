"""A pandera ``DataFrameSchema`` -> what a scan runs: every construct compiled or refused.

The rule: each field pandera offers either runs (with pandera's meaning, or a difference listed
in :data:`DIFFERENCES`) or the schema is refused with one line.  Nothing is dropped.

Per column there are two plans, picked by the file's Arrow type at scan time (never by the
schema's dtype, which may be absent or wrong): ``rules`` for numeric data (range, membership
and magnitude checks run vectorised on Arrow buffers; the rest through pandera on pandas) and
``other_rules`` for anything else (every check through pandera on pandas).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from datacheck.checks._pandas import ELEMENTWISE, NumericCheck
from datacheck.checks._registry import BF16_MAX, FP16_MAX, FP16_OVERFLOW, Severity
from datacheck.checks._rules import (
    Allowed,
    Bound,
    ColumnRules,
    Normalized,
    Range,
    Reference,
    default_rules,
)
from datacheck.errors import SchemaError
from datacheck.schema._dtypes import arrow_type_for, dtype_name

DIFFERENCES: dict[str, str] = {
    "nan": "NaN is not null: a float NaN is a `nan` finding even in a nullable column "
    "(pandera: NaN is null, so it passes a nullable column and fails a non-nullable one as "
    "`not_nullable`). Checks skip NaN unless `ignore_na: false`, as in pandera.",
    "inf": "+/-Inf is always an `inf` finding; range and magnitude checks skip it (pandera: "
    "it fails `less_than` etc.).",
    "rows": "`row` is the row in the file (0-based); pandera's index is the DataFrame index.",
    "range_name": "`in_range`, `greater_than*`, `less_than*` (and `between`, `gt`, ...) report "
    "as `out_of_range`, one finding per value however many range checks it fails.",
    "dtype": "`dtype` is compared with the file's stored (Arrow) type: `int64` means a 64-bit "
    "integer column, so an int64 column with nulls passes (pandas would read it as float64); "
    "datetime/timedelta units are not compared.",
    "unique": "`unique` (column or schema) reports under `unique`, one finding per duplicated "
    "row (a schema-level set names its columns joined by ','); it needs the file whole in one "
    "work unit and keeps those columns' values in memory. A column's nulls are ignored, as in "
    "pandera.",
    "fp16": "float columns without `max_abs` keep datacheck's own `extreme` warning "
    "(abs(x) > 65504, the float16 maximum); pandera has no such check.",
    "text_dtype": "CSV/JSON Lines store no types: a column the schema gives a numeric or `str` "
    "dtype is read as that type (a CSV cell that is not a number is a `schema` finding at its "
    "row), others as Arrow infers them (pandas may infer another).",
    "aggregate": "a check whose result is one value (`unique_values_eq`, a custom aggregate, "
    "schema-level) is evaluated once on the whole file: its columns are held in memory.",
    "index": "`index` levels are the columns pandas stored the index in (Parquet); with none "
    "stored, the index is the row number, as pandas reads it.",
    "coerce": "`coerce`: each value is cast as pandera casts it; a value pandera's cast fails "
    "on, or that the cast would change without a word (pandera passes these: a fraction cut "
    "to an integer, a number wrapped into a narrower integer, NaN or Inf into an integer, a "
    "float overflowing to Inf, anything but 0/1 or True/False into `bool`), is a `schema` "
    "finding at its row (where pandera fails the column as a whole, at each row it would "
    "change) and null afterwards, with no `null` finding; a null stays null (pandera fails it "
    "for numpy integer and bool dtypes, and makes it True for `bool`). The checks run on the "
    "cast values (pandera runs them on the uncast column when a value fails).",
    "check_error": "a check that raises on the data (e.g. `str_matches` on integers) is one "
    "finding for the column, row null, with the exception as the value.",
    "n_failure_cases": "`n_failure_cases` limits pandera's error message only: datacheck "
    "reports every failing row.",
    "drop_invalid_rows": "`drop_invalid_rows`: the rows pandera would drop are reported.",
}
"""Differences from pandera kept on purpose: the README's table is made from this one."""

_NATIVE_RANGE = {
    "in_range": lambda s: (
        s.get("min_value"),
        s.get("max_value"),
        s.get("include_min", True),
        s.get("include_max", True),
    ),
    "greater_than": lambda s: (s["min_value"], None, False, True),
    "greater_than_or_equal_to": lambda s: (s["min_value"], None, True, True),
    "less_than": lambda s: (None, s["max_value"], True, False),
    "less_than_or_equal_to": lambda s: (None, s["max_value"], True, True),
}
RANGE_CHECKS = frozenset(_NATIVE_RANGE)
WHOLE_FILE_CHECKS = frozenset({"unique_values_eq"})
DATACHECK_CHECKS = ("finite", "max_abs", "fp16_safe", "bf16_safe", "reference_stats", "normalized")
PANDAS_BUILTINS = frozenset(
    {
        "equal_to",
        "not_equal_to",
        "greater_than",
        "greater_than_or_equal_to",
        "less_than",
        "less_than_or_equal_to",
        "in_range",
        "isin",
        "notin",
        "str_matches",
        "str_contains",
        "str_startswith",
        "str_endswith",
        "str_length",
        "unique_values_eq",
    }
)
"""pandera's built-in checks with a pandas body (the others are for xarray and the like)."""
_REFUSED_CHECKS = {
    "one_sample_ttest": "hypothesis tests",
    "two_sample_ttest": "hypothesis tests",
}


@dataclass(frozen=True)
class ColumnSpec:
    """One schema column (or index level) after compilation."""

    name: str
    rules: ColumnRules
    """Rules for numeric data."""
    required: bool = True
    float_rules: ColumnRules | None = None
    """``rules`` plus the fp16 warning when the schema sets no ``max_abs``, for float data."""
    other_rules: ColumnRules | None = None
    """Rules for data that is not numeric: every check runs through pandera."""
    regex: bool = False
    """``name`` is a pattern (pandera: ``re.match`` on each column name)."""
    unique: str | None = None
    """``report_duplicates`` when the column must be unique, else None."""
    coerce: bool = False
    fill: bool = False
    """A missing column is added by pandera (``add_missing_columns`` with a default or nullable)."""
    aggregate: bool = False
    """Some check may answer for the column as a whole: the file is checked in one unit."""
    target: Any = None
    """pandera's own ``DataType`` (pandas engine): what ``coerce`` casts to, and a category's
    categories."""

    @property
    def dtype(self) -> str | None:
        return self.rules.dtype


@dataclass(frozen=True)
class CompiledSchema:
    """What a scan needs from a schema; picklable, so it travels to worker processes."""

    source: str
    columns: Mapping[str, ColumnSpec] = field(default_factory=dict)
    strict: bool | str = False
    """True, False or ``"filter"`` (unexpected columns are dropped, not reported)."""
    arrow_types: Mapping[str, Any] = field(default_factory=dict)
    """Arrow types to parse text formats (CSV, JSON Lines) with."""
    tensors: Any = None
    """The ``tensors:`` section (a ``datacheck.schema._tensors.TensorSchema``), or None."""
    media: Any = None
    """The ``images:``/``tokens:`` sections (a ``datacheck.schema._media.MediaSchema``), or None."""
    ordered: bool = False
    unique_column_names: bool = False
    unique: tuple[tuple[tuple[str, ...], str], ...] = ()
    """Schema-level ``unique`` column sets with their ``report_duplicates``."""
    frame_checks: tuple[Any, ...] = ()
    """Schema-level pandera checks, run on the file's rows as a pandas DataFrame."""
    index: tuple[ColumnSpec, ...] = ()
    """Index levels, checked on the columns pandas stored the index in (or the row number)."""
    dtype: str | None = None
    """A schema-level ``dtype``: every column of the file must have it."""
    mostly: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Column -> finding check -> the fraction of rows that must pass (a check's ``mostly``
    option); the scan's verdict tolerates the rest (see ``datacheck.report._gate``)."""

    def __reduce__(self) -> Any:
        """Worker processes receive the schema; a check that is a lambda or a local function
        does not pickle, so those travel through cloudpickle (installed with dask)."""
        import pickle

        state = {f.name: getattr(self, f.name) for f in fields(self)}
        try:
            pickle.dumps(state)
        except (pickle.PicklingError, AttributeError, TypeError):
            try:
                import cloudpickle
            except ImportError:
                raise SchemaError(
                    f"schema {self.source!r}: a check is a lambda or local function, which "
                    "cannot reach worker processes; define it at module level or install "
                    "cloudpickle"
                ) from None
            return (_from_bytes, (cloudpickle.dumps(state),))
        return (_from_state, (state,))

    def arrow_types_for(self, fmt: str) -> Mapping[str, Any]:
        """The types to read a text format with.  CSV reads numeric columns as text, parsed
        cell by cell in the scan: a cell like ``#DIV/0!`` is a finding at its row, not a
        file the reader gives up on."""
        if fmt != "csv":
            return self.arrow_types
        import pyarrow as pa

        return {n: pa.string() for n in self.arrow_types}

    def rules_for(self, name: str, is_float: bool, is_numeric: bool) -> ColumnRules:
        spec = self.spec_for(name)
        if spec is None:
            return default_rules(is_float, is_numeric)
        return spec_rules(spec, is_float, is_numeric)

    def spec_for(self, name: str) -> ColumnSpec | None:
        spec = self.columns.get(name)
        if spec is not None and not spec.regex:
            return spec
        import re

        for s in self.columns.values():
            if s.regex and re.match(s.name, name):
                return s
        return None

    @property
    def whole_file(self) -> bool:
        """Some check needs a file's rows in one work unit (uniqueness, aggregates)."""
        specs = (*self.columns.values(), *self.index)
        return bool(self.unique or self.frame_checks or any(s.unique or s.aggregate for s in specs))

    @property
    def needs_pandera(self) -> bool:
        """Workers must load pandera (the schema has checks that run through it)."""
        specs = (*self.columns.values(), *self.index)
        return bool(self.frame_checks) or any(s.rules.pandas_checks for s in specs)


def _from_state(state: dict[str, Any]) -> CompiledSchema:
    return CompiledSchema(**state)


def _from_bytes(data: bytes) -> CompiledSchema:
    import pickle

    return CompiledSchema(**pickle.loads(data))


def spec_rules(spec: ColumnSpec, is_float: bool, is_numeric: bool) -> ColumnRules:
    if not is_numeric and spec.other_rules is not None:
        return spec.other_rules
    return spec.float_rules if is_float and spec.float_rules is not None else spec.rules


def _severity(check: Any) -> Severity:
    return Severity.WARNING if getattr(check, "raise_warning", False) else Severity.ERROR


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or value is None:
        raise SchemaError(f"{where}: {key} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SchemaError(f"{where}: {key} must be a number, got {value!r:.40}") from None
    if math.isnan(out):
        raise SchemaError(f"{where}: {key} must be a number, got NaN")
    return out


def _native(check: Any, where: str, sev: Severity) -> Any:
    """The Arrow body of a check, or None when it runs through pandera."""
    stats = dict(check.statistics or {})
    name = check.name
    ignore_na = bool(getattr(check, "ignore_na", True))
    if name in _NATIVE_RANGE:
        try:
            lo, hi, inc_lo, inc_hi = _NATIVE_RANGE[name](stats)
        except KeyError as exc:
            raise SchemaError(f"{where}: {exc.args[0]} is missing") from None
        if not all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            for v in (lo, hi)
            if v is not None
        ):
            return None  # datetime or text bounds: pandera's body
        return Range("out_of_range", sev, lo, hi, bool(inc_lo), bool(inc_hi), ignore_na)
    if name in ("isin", "notin", "equal_to", "not_equal_to"):
        key = {"isin": "allowed_values", "notin": "forbidden_values"}.get(name, "value")
        raw: Any = stats.get(key)
        values = list(raw or ()) if name in ("isin", "notin") else [raw]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return None
        negate = name in ("notin", "not_equal_to")
        return Allowed(name, sev, tuple(values), negate, ignore_na)
    return None


def _refuse_check(check: Any, where: str) -> None:
    name = check.name
    if name in _REFUSED_CHECKS:
        raise SchemaError(f"{where}: check {name!r} ({_REFUSED_CHECKS[name]}) is not supported")
    if getattr(check, "groupby", None) is not None or getattr(check, "groups", None) is not None:
        raise SchemaError(f"{where}: check {name!r} uses groupby/groups, which is not supported")
    from pandera.api.checks import Check

    custom = getattr(Check, "REGISTERED_CUSTOM_CHECKS", {})
    if name in dir(Check) and name not in PANDAS_BUILTINS and name not in custom:
        raise SchemaError(f"{where}: check {name!r} has no pandas body in pandera")


def _datacheck_rule(check: Any, where: str, sev: Severity) -> Any:
    stats = dict(check.statistics or {})
    name = check.name
    try:
        if name == "normalized":
            return Normalized.from_stats(stats, sev)
        if name == "reference_stats":
            return Reference.from_stats(stats, sev)
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if name == "max_abs":
        return Bound(_number(stats.get("max_abs"), where, "max_abs"), "extreme", sev)
    if name in ("fp16_safe", "bf16_safe"):
        return Bound(FP16_OVERFLOW if name == "fp16_safe" else BF16_MAX, name, sev)
    return None  # finite: nan/inf are always checked on float data


def compile_column(name: Any, column: Any, frame: Any = None) -> ColumnSpec:
    """Compile one pandera ``Column`` (or ``Index``); refuses what it cannot run."""
    where = f"column {name!r}"
    if not isinstance(name, str):
        raise SchemaError(f"{where}: only string column names are supported")
    if getattr(column, "parsers", None):
        raise SchemaError(f"{where}: parsers are not supported; remove them")
    if getattr(column, "on_missing", None) is not None:
        raise SchemaError(f"{where}: on_missing is not supported; remove it")
    frame_dtype = getattr(frame, "dtype", None)  # pandera: it overrides the columns' dtypes
    dtype = frame_dtype if frame_dtype is not None else column.dtype
    dname = dtype_name(dtype, where)
    bounds: list[Bound] = []
    ranges: list[Range] = []
    allowed: list[Allowed] = []
    pandas_checks: list[Any] = []
    other: list[Any] = []
    reference = normalized = None
    for check in column.checks:
        cwhere = f"{where}, check {check.name!r}"
        _refuse_check(check, cwhere)
        sev = _severity(check)
        if check.name in DATACHECK_CHECKS:
            rule = _datacheck_rule(check, cwhere, sev)
            if isinstance(rule, Reference):
                reference = rule
                if (z := rule.zscore_range()) is not None:
                    ranges.append(z)
            elif isinstance(rule, Normalized):
                normalized = rule
            elif isinstance(rule, Bound):
                bounds.append(rule)
            if check.name not in ("reference_stats", "normalized"):
                other.append(NumericCheck(check.name, bool(check.raise_warning)))
            continue
        native = _native(check, cwhere, sev)
        if isinstance(native, Range):
            ranges.append(native)
        elif isinstance(native, Allowed):
            allowed.append(native)
        else:
            pandas_checks.append(check)
        other.append(check)
    rules = ColumnRules(
        nan=Severity.ERROR,
        inf=Severity.ERROR,
        null=None if column.nullable else Severity.ERROR,
        bounds=tuple(bounds),
        ranges=tuple(ranges),
        allowed=tuple(allowed),
        dtype=dname,
        pandas_checks=tuple(pandas_checks),
        reference=reference,
        normalized=normalized,
    )
    float_rules = rules
    if not any(b.check == "extreme" for b in bounds):  # the fp16 warning still applies
        float_rules = replace(rules, bounds=(*rules.bounds, Bound(FP16_MAX)))
    other_rules = ColumnRules(
        nan=None, inf=None, null=rules.null, dtype=dname, pandas_checks=tuple(other)
    )
    coerce = bool(column.coerce or getattr(frame, "coerce", False))
    unique = column.report_duplicates if column.unique else None
    fill = bool(
        getattr(frame, "add_missing_columns", False)
        and (column.default is not None or column.nullable)
    )
    aggregate = any(
        c.name not in ELEMENTWISE and not getattr(c, "element_wise", False) for c in other
    )
    return ColumnSpec(
        name,
        rules,
        bool(getattr(column, "required", True)),
        float_rules,
        other_rules,
        bool(getattr(column, "regex", False)),
        unique,
        coerce,
        fill,
        aggregate,
        dtype if dname is not None else None,
    )


def _frame_options(schema: Any) -> None:
    if getattr(schema, "parsers", None):
        raise SchemaError("schema-level parsers are not supported; remove them")
    if schema.strict not in (True, False, "filter"):
        raise SchemaError(f"strict must be true, false or filter, got {schema.strict!r}")
    if getattr(schema, "on_missing_columns", None) not in (None, "raise"):
        raise SchemaError("on_missing_columns is not supported; remove it")
    if schema.report_duplicates not in ("all", "exclude_first", "exclude_last"):
        raise SchemaError(f"report_duplicates {schema.report_duplicates!r} is not supported")


def _index_specs(schema: Any) -> tuple[ColumnSpec, ...]:
    index = schema.index
    if index is None:
        return ()
    levels = list(getattr(index, "indexes", [index]))
    if hasattr(index, "indexes") and (index.unique or index.strict or index.coerce):
        raise SchemaError("multiindex unique/strict/coerce are not supported; remove them")
    out = []
    for i, level in enumerate(levels):
        spec = compile_column(level.name or f"__index_level_{i}__", level, None)
        out.append(replace(spec, coerce=bool(level.coerce)))
    return tuple(out)


def _unique_sets(schema: Any) -> tuple[tuple[tuple[str, ...], str], ...]:
    unique = schema.unique
    if unique is None:
        return ()
    names = (unique,) if isinstance(unique, str) else tuple(unique)
    if not names or not all(isinstance(n, str) for n in names):
        raise SchemaError(f"unique must name columns, got {unique!r}")
    return ((names, schema.report_duplicates),)


def compile_schema(schema: Any, source: str = "<schema>") -> CompiledSchema:
    """Compile a pandera ``DataFrameSchema``; every field runs or is refused.

    Raises:
        SchemaError: naming the construct that cannot run, with the schema's source.
    """
    try:
        _frame_options(schema)
        columns = {name: compile_column(name, col, schema) for name, col in schema.columns.items()}
        for check in schema.checks:
            _refuse_check(check, f"schema-level check {check.name!r}")
        index = _index_specs(schema)
        unique = _unique_sets(schema)
    except SchemaError as exc:
        raise SchemaError(f"schema {source!r}: {exc}") from None
    arrow_types = {
        n: t for n, c in columns.items() if not c.regex and (t := arrow_type_for(c.dtype))
    }
    return CompiledSchema(
        source,
        columns,
        schema.strict,
        arrow_types,
        ordered=bool(schema.ordered),
        unique_column_names=bool(schema.unique_column_names),
        unique=unique,
        frame_checks=tuple(schema.checks),
        index=index,
        dtype=dtype_name(schema.dtype, f"schema {source!r}"),
    )
