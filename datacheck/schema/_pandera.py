"""pandera schemas as datacheck's schema language: loading YAML or ``module:attr``.

Users write pandera schemas, in pandera's own YAML (what ``DataFrameSchema.to_yaml()`` writes
loads as is, and the older forms ``from_yaml`` still reads) or in Python (``module:attr``).
datacheck's own checks (``finite``, ``max_abs``, ``fp16_safe``, ``bf16_safe``,
``reference_stats``, ``normalized``) are registered through pandera's extension API, so the
same file validates a pandas DataFrame in pandera and drives ``datacheck scan``.
:mod:`._yaml` reads the file with limits and refuses unknown keys; :mod:`._compile` turns the
schema into what a scan runs, or refuses what cannot run.

``module:attr`` **imports user code** (the module runs, as any Python import does): it must
resolve to a ``DataFrameSchema``, a ``DataFrameModel`` class, or a function taking no
arguments that returns one of those.  The current folder is searched first, as ``python -m``
does.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from datacheck.checks._pandas import register_pandera_checks
from datacheck.errors import SchemaError
from datacheck.schema._compile import ColumnSpec, CompiledSchema, compile_schema
from datacheck.schema._yaml import load_yaml, read_schema_text, validate_document

__all__ = ["ColumnSpec", "CompiledSchema", "compile_schema", "load_schema"]


_FINDINGS_OF = {"finite": ("nan", "inf"), "max_abs": ("extreme",), "reference_stats": ("extreme",)}
_FINDINGS_OF.update(normalized=("unnormalized",))


def _checks_of(body: Any) -> list[tuple[Any, Any]]:
    """(name, check mapping) of a column's ``checks:``, list or older mapping form."""
    checks = body.get("checks") if isinstance(body, dict) else None
    if isinstance(checks, dict):
        return list(checks.items())
    if not isinstance(checks, list):
        return []
    return [
        (c["options"].get("check_name"), c)
        for c in checks
        if isinstance(c, dict) and isinstance(c.get("options"), dict)
    ]


def _pop_mostly(doc: Any, where: str) -> dict[str, dict[str, float]]:
    """Take each check's ``options: {mostly: F}`` out of the document (pandera does not know
    it): column -> finding check (``in_range`` -> ``out_of_range``, ...) -> F."""
    from datacheck.schema._compile import RANGE_CHECKS

    columns = doc.get("columns") if isinstance(doc, dict) else None
    out: dict[str, dict[str, float]] = {}
    for col, body in columns.items() if isinstance(columns, dict) else ():
        for name, check in _checks_of(body):
            options = check.get("options") if isinstance(check, dict) else None
            if not isinstance(options, dict) or "mostly" not in options:
                continue
            raw = options.pop("mostly")
            ok = isinstance(raw, (int, float)) and not isinstance(raw, bool)
            mostly = float(raw) if ok else math.nan
            if not 0 < mostly <= 1:
                raise SchemaError(
                    f"schema {where}, column {col!r}, check {name!r}: mostly must be a "
                    f"fraction in (0, 1], e.g. 0.999, got {raw!r:.40}"
                )
            found = ("out_of_range",) if name in RANGE_CHECKS else _FINDINGS_OF.get(name, (name,))
            for finding in found:
                out.setdefault(str(col), {})[str(finding)] = float(mostly)
    return out


def _load_yaml(path: Path) -> tuple[Any, Any, Any, dict[str, dict[str, float]]]:
    """The pandera schema (None without ``columns:``), the ``tensors:`` and media sections,
    and the checks' ``mostly`` tolerances."""
    from pandera.io.pandas_io import deserialize_schema

    from datacheck.schema._media import SECTIONS, parse_media_sections
    from datacheck.schema._tensors import load_tensor_yaml, parse_tensor_section

    where = repr(str(path))
    text = read_schema_text(path)
    doc = load_tensor_yaml(text, lambda t: load_yaml(t, where))
    tensors = None
    media = parse_media_sections(doc, where) if isinstance(doc, dict) else None
    if isinstance(doc, dict) and ("tensors" in doc or media is not None):  # pandera never sees
        tensors = parse_tensor_section(doc.pop("tensors"), where) if "tensors" in doc else None
        for name in SECTIONS:
            doc.pop(name, None)
        if "columns" not in doc:
            return None, tensors, media, {}
    mostly = _pop_mostly(doc, where)
    validate_document(doc, where)
    try:
        return deserialize_schema(doc), tensors, media, mostly
    except Exception as exc:  # noqa: BLE001 - pandera raises many types here
        msg = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise SchemaError(f"schema {where}: pandera cannot load it: {msg}") from None


def _resolve(obj: Any, spec: str) -> Any:
    """A schema, a ``DataFrameModel`` class, or a zero-argument function returning one."""
    from pandera.api.dataframe.model import DataFrameModel
    from pandera.api.pandas.container import DataFrameSchema

    if inspect.isclass(obj) and issubclass(obj, DataFrameModel):
        return _to_schema(obj, spec)
    if isinstance(obj, DataFrameSchema):
        return obj
    if inspect.isfunction(obj):
        params = inspect.signature(obj).parameters.values()
        if any(
            p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
        ):
            raise SchemaError(f"schema {spec!r}: the function takes arguments; it must take none")
        try:
            made = obj()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, reported in one line
            raise SchemaError(f"schema {spec!r}: calling it raised {_one_line(exc)}") from None
        if inspect.isclass(made) and issubclass(made, DataFrameModel):
            return _to_schema(made, spec)
        if isinstance(made, DataFrameSchema):
            return made
        obj = made
    raise SchemaError(
        f"schema {spec!r}: {type(obj).__name__} is not a pandera DataFrameSchema, a "
        "DataFrameModel class, or a function with no arguments returning one"
    )


def _to_schema(model: Any, spec: str) -> Any:
    """A ``DataFrameModel``'s schema; the model's own error (a bad ``Field``, a check on a
    field it does not have) is one line."""
    try:
        return model.to_schema()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, reported in one line
        raise SchemaError(
            f"schema {spec!r}: {model.__name__}.to_schema() raised {_one_line(exc)}"
        ) from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _load_python(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SchemaError(f"schema {spec!r}: write it as module:attr, e.g. my_schemas:train")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:  # a module in the current folder is found, as `python -m` finds it
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SchemaError(
            f"schema {spec!r}: cannot import module {module_name!r} ({exc})"
        ) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, reported in one line
        raise SchemaError(
            f"schema {spec!r}: importing {module_name!r} raised {_one_line(exc)}"
        ) from None
    finally:
        if added and sys.path and sys.path[0] == cwd:
            sys.path.pop(0)
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SchemaError(
                f"schema {spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return _resolve(obj, spec)


def _sibling(path: Path) -> str:
    """`` (did you mean 'schemas/rand_hie.yaml'?)`` for a YAML file beside it named alike."""
    import difflib

    folder = path.parent
    try:
        names = [p.name for p in folder.iterdir() if p.suffix.lower() in (".yaml", ".yml")]
    except OSError:
        return f" (no folder {str(folder)!r})" if not folder.exists() else ""
    close = difflib.get_close_matches(path.name, sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {str(folder / close[0])!r}?)" if close else ""


def load_schema(spec: Any) -> CompiledSchema | None:
    """Load a schema from a YAML path, ``module:attr``, or a pandera schema or model.

    Raises:
        SchemaError: with what is wrong, where, and how to fix it (one line).
    """
    if spec is None:
        return None
    if isinstance(spec, CompiledSchema):
        return spec
    register_pandera_checks()
    if hasattr(spec, "columns") or inspect.isclass(spec):
        return compile_schema(_resolve(spec, type(spec).__name__), "<python schema>")
    text = str(spec)
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml") or os.path.lexists(path):
        if not os.path.lexists(path):
            raise SchemaError(
                f"schema {text!r}: no such file{_sibling(path)}; pass a pandera YAML file or "
                "module:attr"
            )
        frame, tensors, media, mostly = _load_yaml(path)
        compiled = (
            compile_schema(frame, str(path)) if frame is not None else CompiledSchema(str(path))
        )
        return replace(compiled, tensors=tensors, media=media, mostly=mostly)
    if ":" in text:
        return compile_schema(_load_python(text), text)
    raise SchemaError(
        f"schema {text!r}: not a file and not module:attr; pass a pandera YAML file or module:attr"
    )
