"""pandera schemas as datacheck's schema language, compiled into per-column check rules.

Users write pandera schemas, in pandera's own YAML (what ``DataFrameSchema.to_yaml()`` writes
loads as is) or in Python (``module:attr``).  datacheck's own checks (``finite``, ``max_abs``,
``fp16_safe``, ``bf16_safe``) are registered through pandera's extension API, so the same file
validates a pandas DataFrame in pandera and drives ``datacheck scan``.

Compilation splits each column's checks: range, membership and magnitude checks run on Arrow
buffers (:mod:`datacheck.checks._numpy`); anything else runs through pandera on the batch as
pandas.  NaN is never treated as null here: a float column's NaN is a ``nan`` finding even when
the column is nullable.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from datacheck.checks._pandas import register_pandera_checks
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

__all__ = ["CompiledSchema", "compile_schema", "load_schema"]

DATACHECK_CHECKS = (
    "finite",
    "max_abs",
    "fp16_safe",
    "bf16_safe",
    "reference_stats",
    "normalized",
)
_RANGE_CHECKS = {
    "in_range": lambda s: Range(
        "out_of_range",
        s["sev"],
        s.get("min_value"),
        s.get("max_value"),
        s.get("include_min", True),
        s.get("include_max", True),
    ),
    "greater_than": lambda s: Range(
        "out_of_range", s["sev"], min=s["min_value"], include_min=False
    ),
    "greater_than_or_equal_to": lambda s: Range("out_of_range", s["sev"], min=s["min_value"]),
    "less_than": lambda s: Range("out_of_range", s["sev"], max=s["max_value"], include_max=False),
    "less_than_or_equal_to": lambda s: Range("out_of_range", s["sev"], max=s["max_value"]),
}


@dataclass(frozen=True)
class ColumnSpec:
    """One schema column after compilation."""

    name: str
    rules: ColumnRules
    required: bool = True
    numeric: bool = True
    float_rules: ColumnRules | None = None
    """The rules for float data: ``rules`` plus the fp16 warning when the schema sets no
    ``max_abs``.  Chosen by the data's type, not the schema's dtype, so a column the schema
    calls ``int64`` or ``Float64`` still gets its NaN/Inf checked when the file holds floats."""


@dataclass(frozen=True)
class CompiledSchema:
    """What a scan needs from a schema; picklable, so it travels to worker processes."""

    source: str
    columns: Mapping[str, ColumnSpec] = field(default_factory=dict)
    strict: bool = False
    arrow_types: Mapping[str, Any] = field(default_factory=dict)
    """Arrow types to parse text formats (CSV, JSON Lines) with."""
    tensors: Any = None
    """The ``tensors:`` section (a ``datacheck.schema._tensors.TensorSchema``), or None."""
    media: Any = None
    """The ``images:``/``tokens:`` sections (a ``datacheck.schema._media.MediaSchema``), or None."""

    def rules_for(self, name: str, is_float: bool, is_numeric: bool) -> ColumnRules:
        spec = self.columns.get(name)
        if spec is None:
            return default_rules(is_float, is_numeric)
        return spec.float_rules if is_float and spec.float_rules is not None else spec.rules


def _severity(check: Any) -> Severity:
    return Severity.WARNING if getattr(check, "raise_warning", False) else Severity.ERROR


def _compile_column(name: str, column: Any) -> ColumnSpec:
    dtype = str(column.dtype) if column.dtype is not None else None
    numeric = dtype is None or _is_numeric_dtype(dtype)
    bounds: list[Bound] = []
    ranges: list[Range] = []
    allowed: list[Allowed] = []
    pandas_checks: list[Any] = []
    reference: Reference | None = None
    normalized: Normalized | None = None
    for check in column.checks:
        stats = dict(check.statistics or {})
        sev = _severity(check)
        if check.name == "finite":
            continue  # nan/inf are always checked on float columns
        if check.name in ("reference_stats", "normalized") and numeric:
            try:
                if check.name == "normalized":
                    normalized = Normalized.from_stats(stats, sev)
                    continue
                reference = Reference.from_stats(stats, sev)
            except ValueError as exc:
                raise SchemaError(f"column {name!r}, check {check.name!r}: {exc}") from None
            if (zrange := reference.zscore_range()) is not None:
                ranges.append(zrange)
            continue
        if check.name == "max_abs" and numeric:
            bounds.append(Bound(float(stats["max_abs"]), "extreme", sev))
        elif check.name in ("fp16_safe", "bf16_safe") and numeric:
            limit = FP16_OVERFLOW if check.name == "fp16_safe" else BF16_MAX
            bounds.append(Bound(limit, check.name, sev))
        elif check.name in _RANGE_CHECKS and numeric:
            ranges.append(_RANGE_CHECKS[check.name]({**stats, "sev": sev}))
        elif check.name in ("isin", "notin") and numeric:
            key = "allowed_values" if check.name == "isin" else "forbidden_values"
            allowed.append(Allowed(check.name, sev, tuple(stats[key]), check.name == "notin"))
        else:
            pandas_checks.append(check)
    rules = ColumnRules(
        nan=Severity.ERROR,  # applied to float data only, whatever the schema's dtype says
        inf=Severity.ERROR,
        null=None if column.nullable else Severity.ERROR,
        bounds=tuple(bounds),
        ranges=tuple(ranges),
        allowed=tuple(allowed),
        dtype=dtype,
        pandas_checks=tuple(pandas_checks),
        reference=reference,
        normalized=normalized,
    )
    float_rules = rules
    if not any(b.check == "extreme" for b in bounds):  # the fp16 warning still applies
        float_rules = replace(rules, bounds=(*rules.bounds, Bound(FP16_MAX)))
    return ColumnSpec(name, rules, bool(column.required), numeric, float_rules)


def _is_numeric_dtype(dtype: str) -> bool:
    return dtype.lower().startswith(("float", "int", "uint"))


def _arrow_type(dtype: str | None) -> Any:
    import pyarrow as pa

    if dtype is None or not _is_numeric_dtype(dtype):
        return None
    try:
        return pa.from_numpy_dtype(np.dtype(dtype.lower()))
    except TypeError:
        return None


def compile_schema(schema: Any, source: str = "<schema>") -> CompiledSchema:
    """Compile a pandera ``DataFrameSchema`` into per-column rules."""
    columns = {name: _compile_column(name, col) for name, col in schema.columns.items()}
    arrow_types = {n: t for n, c in columns.items() if (t := _arrow_type(c.rules.dtype))}
    return CompiledSchema(source, columns, bool(schema.strict), arrow_types)


def _known_check_names() -> set[str]:
    from pandera.api.checks import Check

    names = {n for n in dir(Check) if not n.startswith("_")}
    return names | set(DATACHECK_CHECKS)


def _validate_yaml_checks(doc: Any, where: str) -> None:
    """Catch the mistakes pandera reports badly: unknown check names, misspelt keys."""
    if not isinstance(doc, dict):
        raise SchemaError(
            f"schema {where}: expected a YAML mapping with 'columns', got {type(doc).__name__}"
        )
    columns = doc.get("columns")
    if not isinstance(columns, dict):
        raise SchemaError(
            f"schema {where}: no 'columns' mapping; write it as pandera's DataFrameSchema.to_yaml() does"
        )
    known = _known_check_names()
    for col, body in columns.items():
        for check in (body or {}).get("checks") or []:
            name = (
                (check.get("options") or {}).get("check_name") if isinstance(check, dict) else None
            )
            if name is None:
                raise SchemaError(
                    f"schema {where}, column {col!r}: a check has no options.check_name; "
                    "write checks as pandera's to_yaml() does, e.g. {max_abs: 10, options: {check_name: max_abs}}"
                )
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise SchemaError(f"schema {where}, column {col!r}: unknown check {name!r}{hint}")


def _load_yaml(path: Path) -> tuple[Any, Any, Any]:
    """The pandera schema (None without ``columns:``), the ``tensors:`` and media sections."""
    import yaml
    from pandera.api.pandas.container import DataFrameSchema

    from datacheck.schema._media import SECTIONS, parse_media_sections
    from datacheck.schema._tensors import parse_tensor_section, safe_load_yaml

    where = repr(str(path))
    tensors = None
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise SchemaError(f"schema {where}: not a text file; pass a pandera YAML file") from exc
    except OSError as exc:
        raise SchemaError(
            f"schema {where}: cannot read it ({exc.strerror}); check the path"
        ) from exc
    try:
        doc = safe_load_yaml(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        at = f" line {line + 1}" if line is not None else ""
        raise SchemaError(f"schema {where}{at}: invalid YAML; fix the syntax") from exc
    media = parse_media_sections(doc, where) if isinstance(doc, dict) else None
    if isinstance(doc, dict) and ("tensors" in doc or media is not None):  # pandera never sees
        tensors = parse_tensor_section(doc.pop("tensors"), where) if "tensors" in doc else None
        for name in SECTIONS:
            doc.pop(name, None)
        if "columns" not in doc:
            return None, tensors, media
        text = yaml.safe_dump(doc, sort_keys=False)
    _validate_yaml_checks(doc, where)
    try:
        return DataFrameSchema.from_yaml(text), tensors, media
    except Exception as exc:  # pandera raises many types here
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SchemaError(f"schema {where}: pandera cannot load it: {msg}") from exc


def _load_python(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SchemaError(f"schema {spec!r}: cannot import module {module_name!r} ({exc})") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise SchemaError(
            f"schema {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from exc
    if callable(obj) and not hasattr(obj, "columns"):
        obj = obj()
    if hasattr(obj, "to_schema"):  # a DataFrameModel
        obj = obj.to_schema()
    if not hasattr(obj, "columns"):
        raise SchemaError(f"schema {spec!r}: {type(obj).__name__} is not a pandera DataFrameSchema")
    return obj


def load_schema(spec: Any) -> CompiledSchema | None:
    """Load a schema from a YAML path, ``module:attr``, or a pandera schema object.

    Raises:
        SchemaError: with what is wrong, where, and how to fix it.
    """
    if spec is None:
        return None
    register_pandera_checks()
    if isinstance(spec, CompiledSchema):
        return spec
    if hasattr(spec, "columns"):
        return compile_schema(spec)
    text = str(spec)
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise SchemaError(
                f"schema {text!r}: no such file; pass a pandera YAML file or module:attr"
            )
        frame, tensors, media = _load_yaml(path)
        compiled = (
            compile_schema(frame, str(path)) if frame is not None else CompiledSchema(str(path))
        )
        return replace(compiled, tensors=tensors, media=media)
    if ":" in text:
        return compile_schema(_load_python(text), text)
    raise SchemaError(
        f"schema {text!r}: not a file and not module:attr; pass a pandera YAML file or module:attr"
    )
