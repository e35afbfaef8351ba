"""The schema's file-level findings: columns missing, unexpected, out of order, repeated, or of
another dtype, and the index levels pandas stored."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Protocol

import pyarrow as pa

from datacheck import findings as fnd
from datacheck.checks._registry import Severity
from datacheck.schema._dtypes import arrow_type_for, dtype_matches
from datacheck.schema._spec import ColumnSpec, CompiledSchema

ERR = Severity.ERROR


class SchemaRun(Protocol):
    """What the file-level findings read of a unit's schema run
    (:class:`datacheck.engine._schemacheck.SchemaRun`)."""

    schema: CompiledSchema
    path: str
    text: bool
    stored_index: list[str]
    index_specs: dict[str, ColumnSpec]


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


def match_index(stored: list[str], specs: tuple[ColumnSpec, ...], ordered: bool) -> dict:
    """Stored index column -> the schema's level: in order (pandera: each named level is the
    first stored one of its name after the level before it; one not found there is
    ``column_ordered`` and not checked; an unnamed level is the one at its place), or (a
    ``MultiIndex`` with ``ordered: false``) by name, unnamed levels taking the stored ones left
    over in order."""
    if len(specs) < 2:
        return dict(zip(stored, specs, strict=False))
    if ordered:  # the levels in their order: each named one after the one before it
        out, at = {}, 0
        for i, s in enumerate(specs):
            if s.name.startswith("__index_level_"):  # unnamed: the level at its place
                if i < len(stored):
                    out[stored[i]] = s
                    at = max(at, i + 1)
            elif s.name in stored[at:]:
                j = stored.index(s.name, at)
                out[stored[j]], at = s, j + 1
        return out
    out = {s.name: s for s in specs if s.name in stored}
    rest = [c for c in stored if c not in out]
    unnamed = [s for s in specs if s.name.startswith("__index_level_")]
    out.update(zip(rest, unnamed, strict=False))
    return out


def parse_type(dname: str | None) -> pa.DataType | None:
    """What a CSV column of a numeric dtype is parsed as before it is cast to that dtype:
    float64 (a ``nan``, a ``1.5`` or a ``1e300`` in an integer or float32 column is data to
    check: the cast names it)."""
    t = arrow_type_for(dname)
    if t is None or pa.types.is_string(t):
        return None
    return pa.float64()


def _in_the_file(name: str, columns: dict[str, str], declared: Any) -> str:
    """``; did you mean 'lpi_per_visit' (in the file)?``: a column of the file the schema does
    not declare, named like the one it misses (a typo in the schema, or a renamed column)."""
    others = [c for c in columns if c not in declared]
    close = difflib.get_close_matches(name, others, n=1, cutoff=0.6)
    if not close:
        lower = {c.lower(): c for c in others}
        close = [lower[name.lower()]] if name.lower() in lower else []
    return f"; did you mean {close[0]!r} (in the file)?" if close else ""


def file_findings(
    run: SchemaRun,
    columns: dict[str, str],
    names: list[str],
    types: dict[str, Any],
    partition_columns: Any,
) -> list[fnd.Finding]:
    """Every file-level ``schema`` finding of one file (its first unit)."""
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
                out += _dtype_finding(path, c, types.get(c), spec, run.text)
            continue
        if name not in columns:
            if spec.required and not spec.fill and name not in partition_columns:
                msg = "column missing" + _in_the_file(name, columns, schema.columns)
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
            elif spec.fill and schema.fills(columns) and not _added_as(spec):
                msg = f"added as {spec.own_dtype} (add_missing_columns), schema says {spec.dtype}"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
            continue
        out += _dtype_finding(path, name, types.get(name), spec, run.text)
    out += _index_findings(run, types)
    known = [c for c in columns if c not in index]
    if schema.undeclared is not None and not schema.columns:
        for name in known:  # pandera: a schema-level dtype with no columns covers them all
            out += _dtype_finding(path, name, types.get(name), schema.undeclared, run.text)
    if schema.strict is True:
        for name in known:
            if schema.spec_for(name) is None:
                msg = "unexpected column (schema is strict)"
                out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
    return out + _order_findings(run, known, names)


def _order_findings(run: SchemaRun, known: list[str], names: list[str]) -> list[fnd.Finding]:
    schema, path = run.schema, run.path
    out: list[fnd.Finding] = []
    if schema.ordered:
        out += _out_of_order(run, known)
    if schema.unique_column_names and len(set(names)) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                out.append(fnd.Finding(path, "schema", ERR, "column name repeated", column=name))
            seen.add(name)
    return out


def _out_of_order(run: SchemaRun, known: list[str]) -> list[fnd.Finding]:
    """pandera's order: the schema's columns in turn (a pattern: the columns it matches, in
    the file's order); each of the file's schema columns is compared with the next expected
    one, and is out of order where they differ."""
    expected: list[str] = []
    for name, spec in run.schema.columns.items():
        if spec.regex:
            expected += [c for c in known if re.match(name, c)]
        elif name in known:
            expected.append(name)
    order = list(dict.fromkeys(expected))
    wanted, out = iter(order), []
    for got in (c for c in known if c in set(order)):
        want = next(wanted, None)
        if want == got:
            continue
        where = f"expected {want!r} here" if want is not None else "it comes again"
        msg = f"column out of order (schema is ordered): {where}"
        out.append(fnd.Finding(run.path, "schema", ERR, msg, column=got))
    return out


def _index_findings(run: SchemaRun, types: dict[str, Any]) -> list[fnd.Finding]:
    schema, path = run.schema, run.path
    out: list[fnd.Finding] = []
    for name, spec in run.index_specs.items():
        t = types.get(name)
        if t is not None and pa.types.is_null(t) and spec.dtype == "str" and not spec.coerce:
            # pandera: an index level of objects (all null) is not text; a column of them is
            msg = f"dtype {t}, schema says {spec.dtype}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=name))
            continue
        out += _dtype_finding(path, name, t, spec)
    if schema.index and not run.stored_index:
        spec = schema.index[0]
        out += _dtype_finding(path, spec.name, pa.int64(), spec)
    matched = {s.name for s in run.index_specs.values()}
    for i, spec in enumerate(schema.index):  # pandera checks a named level's name
        named = not spec.name.startswith("__index_level_")
        actual = run.stored_index[i] if i < len(run.stored_index) else None
        if schema.index_ordered and named and actual not in (None, spec.name):
            msg = f"index level named {actual!r}, schema says {spec.name!r}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
        elif named and not run.stored_index and i == 0:
            msg = f"the file stores no index (pandas reads the row number), schema names it {spec.name!r}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
        elif not schema.index_ordered and run.stored_index and spec.name not in matched:
            msg = f"index level missing: the file stores {run.stored_index}"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
    stored = len(run.stored_index) or 1  # no stored index: the row number, one level
    if schema.index_ordered or not run.stored_index:
        for spec in schema.index[stored:]:
            msg = f"index level missing: the file stores {stored} index level(s)"
            out.append(fnd.Finding(path, "schema", ERR, msg, column=spec.name))
    return out


def _added_as(spec: ColumnSpec) -> bool:
    """pandera builds a column it adds in the column's own dtype, then checks the schema's
    (a schema-level ``dtype`` differs: a mismatch, unless it casts)."""
    if spec.coerce or spec.target is None or spec.own_dtype is None:
        return True
    try:
        return bool(spec.target.check(spec.own_dtype))
    except (TypeError, ValueError):
        return True


def _dtype_finding(
    path: str, name: str, t: Any, spec: ColumnSpec, text: bool = False
) -> list[fnd.Finding]:
    if t is None or spec.dtype is None or dtype_matches(spec.dtype, t):
        return []
    if pa.types.is_string(t) and parse_type(spec.dtype) is not None and text:
        return []  # a CSV's numeric column, read as text and parsed cell by cell
    if spec.coerce and spec.target is not None:
        return []  # any column can be cast: what fails is found value by value
    if spec.default is not None and pa.types.is_null(t):
        return []  # pandera: an all-null column filled with the default takes its type
    msg = f"dtype {t}, schema says {spec.dtype}"
    return [fnd.Finding(path, "schema", ERR, msg, column=name)]
