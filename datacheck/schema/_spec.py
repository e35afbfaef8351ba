"""What a scan needs from a schema: :class:`CompiledSchema` and its columns' :class:`ColumnSpec`.

Per column there are two plans, picked by the file's Arrow type at scan time (never by the
schema's dtype, which may be absent or wrong): ``rules`` for numeric data (range, membership
and magnitude checks run vectorised on Arrow buffers; the rest through pandera on pandas) and
``other_rules`` for anything else (every check through pandera on pandas).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from datacheck.checks._registry import Severity
from datacheck.checks._rules import ColumnRules, default_rules
from datacheck.errors import SchemaError


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
    default: Any = None
    """pandera's ``default``: nulls are this value before any check runs."""
    own_dtype: Any = None
    """The column's own pandera ``DataType`` (before a schema-level ``dtype``): pandera
    builds a column it adds with it."""

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
    undeclared: ColumnSpec | None = None
    """What a column the schema does not declare is cast to (a schema-level ``dtype`` with
    ``coerce``: pandera casts every column), None for nothing."""
    index_ordered: bool = True
    """A ``MultiIndex``'s levels are matched by position (else by name)."""
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
        """The declared column a file column is: its own entry and every ``regex`` pattern
        matching it, merged (pandera runs each), or None when the schema does not declare it."""
        import re

        found = [
            s
            for key, s in self.columns.items()
            if (re.match(s.name, name) if s.regex else key == name)
        ]
        if len(found) < 2:
            return found[0] if found else None
        return merge_specs(found)

    def fills(self, present: Any) -> bool:
        """pandera's ``add_missing_columns`` adds the absent columns only when it can add
        every one (each absent required column has a default or is nullable); else it adds
        none and names those it cannot add."""
        return all(
            s.fill
            for n, s in self.columns.items()
            if not s.regex and s.required and n not in present
        )

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


def merge_specs(specs: list[ColumnSpec]) -> ColumnSpec:
    """Several schema columns naming one file column (a name and ``regex`` patterns): each
    one's checks run; the column is non-nullable, unique or coerced if any says so."""
    first = specs[0]
    coerced = [s for s in specs if s.coerce]
    return replace(
        first,
        rules=_merge_rules([s.rules for s in specs]),
        float_rules=_merge_rules([s.float_rules or s.rules for s in specs]),
        other_rules=_merge_rules([s.other_rules or s.rules for s in specs]),
        required=any(s.required for s in specs),
        unique=next((s.unique for s in specs if s.unique), None),
        coerce=bool(coerced),
        target=(coerced or specs)[0].target,
        aggregate=any(s.aggregate for s in specs),
        default=next((s.default for s in specs if s.default is not None), None),
    )


def _merge_rules(rules: list[ColumnRules]) -> ColumnRules:
    def joined(get: Any) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(x for r in rules for x in get(r)))

    return ColumnRules(
        nan=rules[0].nan,
        inf=rules[0].inf,
        null=Severity.ERROR if any(r.null is not None for r in rules) else None,
        bounds=joined(lambda r: r.bounds),
        ranges=joined(lambda r: r.ranges),
        allowed=joined(lambda r: r.allowed),
        dtype=next((r.dtype for r in rules if r.dtype is not None), None),
        pandas_checks=tuple(c for r in rules for c in r.pandas_checks),
        reference=next((r.reference for r in rules if r.reference is not None), None),
        normalized=next((r.normalized for r in rules if r.normalized is not None), None),
    )
