"""A schema's ``dtype`` against a file's Arrow type: which Arrow types each pandera dtype admits.

Every dtype pandera's pandas engine names is either mapped here or refused when the schema is
compiled, so a ``dtype`` is never silently unchecked.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from datacheck.errors import SchemaError

_INT = re.compile(r"^(u?)int(8|16|32|64)$", re.IGNORECASE)
_FLOAT = re.compile(r"^float(16|32|64)$", re.IGNORECASE)
_DATETIME = re.compile(r"^datetime64(\[(\w+)(, *(.+))?\])?$")
_TIMEDELTA = re.compile(r"^timedelta64(\[\w+\])?$")
_STRINGS = ("string", "str", "string[pyarrow]", "string[python]", "string[pyarrow_numpy]")
_OTHER = ("bool", "boolean", "object", "category", "date", "decimal")


def dtype_name(dtype: Any, where: str) -> str | None:
    """The schema's dtype as one of the names this module understands; refuses the rest."""
    if dtype is None:
        return None
    name = str(dtype)
    if name.lower().startswith("decimal"):
        return "decimal"
    if (
        _INT.match(name)
        or _FLOAT.match(name)
        or _DATETIME.match(name)
        or _TIMEDELTA.match(name)
        or name in _STRINGS
        or name in _OTHER
    ):
        return "str" if name in _STRINGS else name
    raise SchemaError(
        f"{where}: dtype {name!r} cannot be checked in files; use an int/uint/float width, "
        "bool, str, datetime64, timedelta64, category, date, decimal or object"
    )


def arrow_type_for(dname: str | None) -> pa.DataType | None:
    """The Arrow type to read a text format's column with (CSV, JSON Lines), or None."""
    if dname is None:
        return None
    if m := _INT.match(dname):
        return getattr(pa, f"{m.group(1).lower()}int{m.group(2)}")()
    if m := _FLOAT.match(dname):
        return {"16": pa.float16(), "32": pa.float32(), "64": pa.float64()}[m.group(1)]
    if dname == "str":
        return pa.string()  # zip codes stay text: 01234 is not the number 1234
    return None


def _family(t: pa.DataType) -> str:
    if isinstance(t, pa.DictionaryType):
        return "category"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return "str"
    if pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_duration(t):
        return "timedelta"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_decimal(t):
        return "decimal"
    return "other"


def dtype_matches(dname: str | None, t: pa.DataType) -> bool:
    """Whether a column of Arrow type ``t`` has the schema's dtype (see the README table)."""
    if dname is None:
        return True
    if dname == "object":  # what pandas reads as objects (pandas 3 reads text as `str`)
        return _family(t) in ("bool", "date", "decimal", "other")  # bool: with nulls
    if pa.types.is_null(t):  # pandas reads it as objects, all None: pandera's str passes them
        return dname == "str"
    if (m := _INT.match(dname)) or (m := _FLOAT.match(dname)):
        expected = arrow_type_for(dname)
        return t == expected
    if m := _DATETIME.match(dname):
        if not pa.types.is_timestamp(t):
            return False
        tz = m.group(4)
        return (t.tz is None) == (tz is None) and (tz is None or _same_tz(t.tz, tz))
    family = _family(t)
    return {
        "bool": "bool",
        "boolean": "bool",
        "str": "str",
        "category": "category",
        "date": "date",
        "decimal": "decimal",
    }.get(dname, "timedelta" if _TIMEDELTA.match(dname) else "?") == family


def _same_tz(a: str, b: str) -> bool:
    return a.upper() in (b.upper(), "+00:00" if b.upper() == "UTC" else b.upper())
