"""Reading a schema file: bounded YAML and a strict check of every key pandera's YAML can hold.

pandera's ``from_yaml`` drops what it does not know (a misspelt ``nulable:`` or ``in_rnage:``
under a column, an option name it has no use for): here every key is checked first, so a
schema means exactly what it says or is refused with one line.  The YAML itself is read with
limits (size, nesting, aliases, integer digits) so a hostile file is one line too.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Any

from datacheck.errors import SchemaError

MAX_BYTES = 16 << 20
"""A schema file larger than this is refused (an inferred schema of 10,000 columns is ~3 MB)."""
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_NODES = 1_000_000
"""Values after alias expansion: bounds an alias bomb."""
MAX_INT_DIGITS = 100

FRAME_KEYS = frozenset(
    {
        "schema_type",
        "version",
        "api",
        "dataframe_library",
        "columns",
        "checks",
        "index",
        "multiindex",
        "dtype",
        "coerce",
        "strict",
        "name",
        "ordered",
        "unique",
        "report_duplicates",
        "unique_column_names",
        "add_missing_columns",
        "title",
        "description",
        "drop_invalid_rows",
        "metadata",
        "tensors",
    }
)
COMPONENT_KEYS = frozenset(
    {
        "title",
        "description",
        "dtype",
        "nullable",
        "checks",
        "name",
        "unique",
        "coerce",
        "required",
        "regex",
        "default",
        "report_duplicates",
        "drop_invalid_rows",
        "metadata",
    }
)
MULTIINDEX_KEYS = frozenset({"coerce", "strict", "name", "ordered", "unique"})
CHECK_OPTIONS = frozenset(
    {
        "check_name",
        "ignore_na",
        "raise_warning",
        "n_failure_cases",
        "groupby",
        "groups",
        "error",
        "name",
        "title",
        "description",
    }
)


def read_schema_text(path: Path) -> str:
    """The file's text: a regular file (never a FIFO or device), at most :data:`MAX_BYTES`."""
    where = repr(str(path))
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SchemaError(
            f"schema {where}: cannot read it ({exc.strerror}); check the path"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise SchemaError(f"schema {where}: not a regular file; pass a pandera YAML file")
    if st.st_size > MAX_BYTES:
        raise SchemaError(
            f"schema {where}: {st.st_size} bytes, over the {MAX_BYTES >> 20} MiB limit for a schema"
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SchemaError(
            f"schema {where}: cannot read it ({exc.strerror}); check the path"
        ) from None
    if len(data) > MAX_BYTES:
        raise SchemaError(f"schema {where}: over the {MAX_BYTES >> 20} MiB limit for a schema")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(f"schema {where}: not a text file; pass a pandera YAML file") from None


class _LimitError(Exception):
    pass


def _loader(text: str) -> Any:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if base is not yaml.SafeLoader:  # the C loader cannot be hooked per node: use the Python one
        base = yaml.SafeLoader

    class Loader(base):  # type: ignore[misc, valid-type]
        depth = 0
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise _LimitError(f"more than {MAX_ALIASES} YAML aliases")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _LimitError(f"nested more than {MAX_DEPTH} levels deep")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node: Any) -> Any:
            if sum(c.isdigit() for c in str(node.value)) > MAX_INT_DIGITS:
                raise _LimitError(f"an integer with more than {MAX_INT_DIGITS} digits")
            return super().construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return Loader(text)


def _count_nodes(doc: Any) -> None:
    """Refuse a document that expands (through aliases) to more than :data:`MAX_NODES` values."""
    seen = 0
    stack = [doc]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise _LimitError(f"more than {MAX_NODES} values once aliases are expanded")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def load_yaml(text: str, where: str) -> Any:
    """Parse bounded YAML; every failure is a :class:`SchemaError` of one line."""
    import yaml

    loader = _loader(text)
    try:
        doc = loader.get_single_data()
        _count_nodes(doc)
        return doc
    except _LimitError as exc:
        raise SchemaError(f"schema {where}: {exc}; a schema needs none of that") from None
    except RecursionError:
        raise SchemaError(f"schema {where}: nested too deeply") from None
    except yaml.YAMLError as exc:
        raise SchemaError(f"schema {where}{_yaml_problem(exc)}; fix the syntax") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: Exception) -> str:
    """`` line 4, column 7: invalid YAML (mapping values are not allowed here)``."""
    mark = getattr(exc, "problem_mark", None)
    at = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(getattr(exc, "problem", None) or "").split())
    context = " ".join(str(getattr(exc, "context", None) or "").split())
    what = "; ".join(t for t in (problem, context) if t)
    return f"{at}: invalid YAML" + (f" ({what})" if what else "")


def _hint(name: Any, valid: Any) -> str:
    close = difflib.get_close_matches(str(name), sorted(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_names() -> set[str]:
    """Names a schema may use for a check: pandera's built-ins and registered checks."""
    from pandera.api.checks import Check

    names = {n for n in dir(Check) if not n.startswith("_") and callable(getattr(Check, n))}
    return names - {
        "from_builtin_check_name",
        "get_backend",
        "get_builtin_check_fn",
        "is_builtin_check",
        "register_backend",
        "register_builtin_check_fn",
    }


def _check_list(checks: Any, where: str, names: set[str]) -> None:
    """``checks:`` as a list (``to_yaml``) or the older mapping ``{name: stats}``."""
    if checks is None:
        return
    if isinstance(checks, dict):
        entries = [(name, stats) for name, stats in checks.items()]
        for name, stats in entries:
            _check_name(name, where, names)
            if isinstance(stats, dict):
                _check_options(stats.get("options"), where, name)
        return
    if not isinstance(checks, list):
        raise SchemaError(f"{where}: 'checks' must be a list of checks")
    for check in checks:
        name = None
        if isinstance(check, dict) and isinstance(check.get("options"), dict):
            name = check["options"].get("check_name")
        if name is None:
            raise SchemaError(
                f"{where}: a check has no options.check_name; write checks as pandera's "
                "to_yaml() does, e.g. {max_abs: 10, options: {check_name: max_abs}}"
            )
        _check_name(name, where, names)
        _check_options(check["options"], where, name)


def _check_name(name: Any, where: str, names: set[str]) -> None:
    if not isinstance(name, str) or name not in names:
        raise SchemaError(f"{where}: unknown check {name!r}{_hint(name, names)}")


def _check_options(options: Any, where: str, name: str) -> None:
    if options is None:
        return
    if not isinstance(options, dict):
        raise SchemaError(f"{where}, check {name!r}: 'options' must be a mapping")
    for key in options:
        if key not in CHECK_OPTIONS:
            hint = _hint(key, CHECK_OPTIONS)
            raise SchemaError(f"{where}, check {name!r}: unknown option {key!r}{hint}")


def _component(body: Any, where: str, names: set[str]) -> None:
    if body is None:
        return
    if not isinstance(body, dict):
        raise SchemaError(f"{where}: expected a mapping of column options, got {body!r:.40}")
    for key, value in body.items():
        if key in COMPONENT_KEYS:
            continue
        if key in names:  # the flat form to_yaml() writes: {in_range: {min_value: 0, ...}}
            if isinstance(value, dict):
                _check_options({k: v for k, v in value.items() if k in CHECK_OPTIONS}, where, key)
            continue
        hint = _hint(key, COMPONENT_KEYS | names)
        raise SchemaError(f"{where}: unknown key {key!r}{hint}")
    _check_list(body.get("checks"), where, names)


def validate_document(doc: Any, where: str) -> None:
    """Refuse any key pandera would ignore or misread."""
    if not isinstance(doc, dict):
        raise SchemaError(
            f"schema {where}: expected a YAML mapping with 'columns', got {type(doc).__name__}"
        )
    for key in doc:
        if key not in FRAME_KEYS:
            raise SchemaError(f"schema {where}: unknown key {key!r}{_hint(key, FRAME_KEYS)}")
    columns = doc.get("columns")
    if not isinstance(columns, (dict, list)):
        raise SchemaError(
            f"schema {where}: no 'columns' mapping; write it as pandera's DataFrameSchema.to_yaml() does"
        )
    names = check_names()
    items = (
        columns.items()
        if isinstance(columns, dict)
        else ((c.get("name") if isinstance(c, dict) else None, c) for c in columns)
    )
    for col, body in items:
        _component(body, f"schema {where}, column {col!r}", names)
    index = doc.get("index")
    if index is not None:
        if not isinstance(index, list):
            raise SchemaError(f"schema {where}: 'index' must be a list of index levels")
        for i, body in enumerate(index):
            _component(body, f"schema {where}, index level {i}", names)
    multi = doc.get("multiindex")
    if multi is not None:
        bad = [
            k for k in (multi if isinstance(multi, dict) else [None]) if k not in MULTIINDEX_KEYS
        ]
        if bad:
            raise SchemaError(
                f"schema {where}: unknown multiindex key {bad[0]!r}{_hint(bad[0], MULTIINDEX_KEYS)}"
            )
    _check_list(doc.get("checks"), f"schema {where}, schema-level checks", names)
