"""A pandera ``DataFrameSchema`` -> what a scan runs: every construct compiled or refused.

The rule: each field pandera offers either runs (with pandera's meaning, or a difference listed
in :data:`DIFFERENCES`) or the schema is refused with one line.  Nothing is dropped.

What comes out is a :class:`~datacheck.schema._spec.CompiledSchema` (``_spec.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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
)
from datacheck.errors import SchemaError
from datacheck.schema._differences import DIFFERENCES
from datacheck.schema._dtypes import arrow_type_for, dtype_name
from datacheck.schema._spec import ColumnSpec, CompiledSchema

__all__ = ["DIFFERENCES", "ColumnSpec", "CompiledSchema", "compile_column", "compile_schema"]

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


def _native(check: Any, where: str, sev: Severity, masked: bool = False) -> Any:
    """The Arrow body of a check, or None when it runs through pandera (``masked``: the
    column is cast to a pandas nullable type, where a check with ``ignore_na: false`` meets
    ``<NA>``, which pandas refuses to compare: pandera's own body decides)."""
    stats = dict(check.statistics or {})
    name = check.name
    ignore_na = bool(getattr(check, "ignore_na", True))
    if masked and not ignore_na:
        return None
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
        values = ([] if raw is None else list(raw)) if name in ("isin", "notin") else [raw]
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
    coerce = _casts(column, frame)
    masked = coerce and _is_masked(dtype)
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
        native = _native(check, cwhere, sev, masked)
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
    unique = column.report_duplicates if column.unique else None
    fill = bool(  # pandera adds a missing column only where it is required
        getattr(frame, "add_missing_columns", False)
        and getattr(column, "required", True)
        and (column.default is not None or column.nullable)
    )
    aggregate = any(
        c.name not in ELEMENTWISE and not getattr(c, "element_wise", False) for c in other
    ) or (masked and any(not getattr(c, "ignore_na", True) for c in pandas_checks))
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
        None if _isna(column.default) else column.default,
        column.dtype,
    )


def _casts(column: Any, frame: Any) -> bool:
    """pandera casts a column that coerces, or every column when the schema coerces; with a
    schema-level ``dtype`` it casts the whole frame once any column (or the index) coerces."""
    if column.coerce or getattr(frame, "coerce", False):
        return True
    if getattr(frame, "dtype", None) is None:
        return False
    index = getattr(frame, "index", None)
    columns = getattr(frame, "columns", None) or {}
    return any(c.coerce for c in columns.values()) or bool(getattr(index, "coerce", False))


def _is_masked(dtype: Any) -> bool:
    import pandas as pd

    return isinstance(getattr(dtype, "type", None), pd.api.extensions.ExtensionDtype) and str(
        dtype
    ).lower() not in ("category", "str", "string")


def _isna(value: Any) -> bool:
    import pandas as pd

    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


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
    # pandera: a schema-level dtype is a single index's too, never a MultiIndex level's (its
    # levels keep their own dtypes; the schema's coerce still reaches them)
    frame = _DtypeOnly(None if hasattr(index, "indexes") else schema.dtype)
    for i, level in enumerate(levels):
        spec = compile_column(level.name or f"__index_level_{i}__", level, frame)
        # pandera casts a level to its own dtype: one without (None) is never cast, and a
        # schema-level dtype it takes is checked, not applied (an object index fails it)
        casts = bool(level.coerce or schema.coerce) and level.dtype is not None
        out.append(replace(spec, coerce=casts))
    return tuple(out)


@dataclass(frozen=True)
class _DtypeOnly:
    """What an index level takes from its schema: the schema-level ``dtype``, nothing else."""

    dtype: Any
    coerce: bool = False
    add_missing_columns: bool = False


def _unique_sets(schema: Any) -> tuple[tuple[tuple[str, ...], str], ...]:
    """pandera's ``unique``: a column, a list of columns (one set), or a list of sets; each
    set is checked in turn and the first with duplicated rows is reported."""
    unique = schema.unique  # pandera keeps a lone name as [name]
    if not unique:
        return ()
    items = list(unique)
    sets = [items] if all(isinstance(n, str) for n in items) else items
    out = []
    for names in sets:
        if isinstance(names, (str, list, tuple)) and all(isinstance(n, str) for n in names):
            out.append((tuple(names), schema.report_duplicates))  # a str: its letters, as pandera
            continue
        raise SchemaError(f"unique must name columns or sets of columns, got {unique!r:.60}")
    return tuple(out)


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
        undeclared = _undeclared(schema)
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
        undeclared=undeclared,
        index_ordered=bool(getattr(schema.index, "ordered", True)),
    )


def _undeclared(schema: Any) -> ColumnSpec | None:
    """A schema-level ``dtype``: with no columns declared, pandera makes every column a
    ``Column(dtype)`` (not nullable); with columns, when it casts the frame (``coerce``, or
    any column's), it casts the others too (nullable, no checks)."""
    from pandera.api.pandas.components import Column

    casts = _casts(Column(), schema)
    if schema.dtype is None or (schema.columns and not casts) or schema.strict == "filter":
        return None  # strict: filter drops the others before pandera casts
    column = Column(schema.dtype, nullable=bool(schema.columns), coerce=casts)
    return compile_column("*", column, schema)
