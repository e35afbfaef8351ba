"""``coerce``: the cast pandera would do, and every value it would fail on or silently change.

One semantics for every column a schema coerces (:func:`cast`):

- the result is what pandera's coercion (``DataType.coerce``, pandas ``astype`` on what pandas
  reads) gives for each value;
- a value is **bad** (a ``schema`` finding at its row, null afterwards) when pandera's coercion
  fails on it (``DataType.coerce_value`` raises: ``"x"`` to an integer, ``300`` to ``int8``, a
  value outside a category's categories), and also when the cast would change it without
  saying so (pandera passes these): a fraction cut to an integer (``2.5`` -> ``2``), a number
  wrapped into a narrower integer (``300.0`` -> ``int8`` 44, ``-1`` -> ``uint64``), NaN or
  +/-Inf into an integer (INT64_MIN), a finite number overflowing a float (``1e300`` ->
  ``float32`` inf), anything but 0/1 or the text True/False into ``bool``;
- a null stays null (the column's ``nullable`` decides), and NaN becomes null only in
  pandas' nullable types (``Int64``, ``boolean``, ...), as in pandas (the scan reports the
  NaN itself: NaN is not null).

Numbers and booleans are cast on Arrow buffers (a cast and the cast back, compared); any
other cast runs pandera's own ``DataType.coerce`` on pandas, value by value only where it fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_INT = re.compile(r"^(u?)int(8|16|32|64)$", re.IGNORECASE)
_FLOAT = re.compile(r"^float(16|32|64)$", re.IGNORECASE)


@dataclass(frozen=True)
class Cast:
    """A column after ``coerce``."""

    values: pa.Array
    """The cast values (bad ones null); the column as it was when it cannot be cast at all."""
    bad: np.ndarray | None = None
    """Rows whose value pandera's coercion fails on or the cast would change (bool mask)."""
    error: str | None = None
    """The column cannot be cast and no value is to blame (pandera: a column-level failure)."""


def numeric_target(dtype: Any) -> pa.DataType | None:
    """The Arrow type of a number or boolean dtype (``int8`` ... ``Float64``, ``bool``,
    ``boolean``), None for any other."""
    name = str(dtype)
    if m := _INT.match(name):
        return getattr(pa, f"{m.group(1).lower()}int{m.group(2)}")()
    if m := _FLOAT.match(name):
        return {"16": pa.float16(), "32": pa.float32(), "64": pa.float64()}[m.group(1)]
    if name in ("bool", "boolean"):
        return pa.bool_()
    return None


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _masked(dtype: Any) -> bool:
    """A pandas nullable type (``Int64``, ``boolean``, ``Float64``): NaN casts to null."""
    import pandas as pd

    return isinstance(getattr(dtype, "type", None), pd.api.extensions.ExtensionDtype)


def cast(arr: pa.Array, dtype: Any) -> Cast:
    """Cast ``arr`` to the pandera ``dtype`` as :mod:`this module <._coerce>` describes."""
    target = numeric_target(dtype)
    if target is not None and _is_number(arr.type):
        try:
            return _cast_number(arr, target, _masked(dtype))
        except pa.ArrowNotImplementedError:  # no Arrow kernel (bool -> float16): pandas'
            pass
    return _cast_pandas(arr, dtype, target)


def _cast_number(arr: pa.Array, target: pa.DataType, masked: bool) -> Cast:
    """Numbers and booleans: cast, cast back, compare; what does not come back is bad."""
    out = pc.cast(arr, target, safe=False)
    if pa.types.is_floating(target):  # floats round; only an overflow to +/-Inf changes a value
        bad = _filled(pc.and_(_finite(arr), pc.invert(_finite(out))))
    else:
        back = pc.cast(out, arr.type, safe=False)
        bad = _filled(pc.not_equal(back, arr))  # NaN != NaN: NaN is bad too
        if pa.types.is_integer(arr.type) and pa.types.is_integer(target):  # -1 <-> 2**64 - 1
            bad |= _negative(arr) != _negative(out)
    if masked and pa.types.is_floating(arr.type):  # NaN -> <NA> in pandas' nullable types
        nan = _filled(pc.is_nan(arr))
        bad &= ~nan
        out = _null_where(out, nan)
    return Cast(_null_where(out, bad), bad if bad.any() else None)


def _negative(arr: pa.Array) -> np.ndarray:
    if pa.types.is_unsigned_integer(arr.type):
        return np.zeros(len(arr), dtype=bool)
    return _filled(pc.less(arr, pa.scalar(0, arr.type)))


def _finite(arr: pa.Array) -> Any:
    if pa.types.is_floating(arr.type):
        return pc.is_finite(arr)
    return pc.is_valid(arr)


def _filled(mask: Any) -> np.ndarray:
    """An Arrow boolean result as a NumPy mask, null (a null value) as False."""
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def _null_where(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    if not mask.any():
        return arr
    return pc.if_else(pa.array(mask), pa.nulls(len(arr), arr.type), arr)


def _cast_pandas(arr: pa.Array, dtype: Any, target: pa.DataType | None) -> Cast:
    """Any other cast: pandera's ``DataType.coerce`` on the column as pandas reads it; where
    it fails, pandera's ``coerce_value`` names the values (nulls stay null)."""
    series = arr.to_pandas()
    present = series.notna().to_numpy()
    try:
        out = dtype.coerce(series)
        bad = np.zeros(len(series), dtype=bool)
    except Exception:  # noqa: BLE001 - pandas and pandera raise many types here
        bad = present & ~_coercible(series, dtype)
        keep = present & ~bad
        try:
            out = dtype.coerce(series[keep])
        except Exception as exc:  # noqa: BLE001 - no value to blame: the column fails
            text = " ".join(str(exc).split())[:160] or type(exc).__name__
            return Cast(arr, bad if bad.any() else None, f"cannot coerce to {dtype}: {text}")
        return _scatter(out, keep, bad, series, dtype, target)
    return _scatter(out[present], present, bad, series, dtype, target)  # a null stays null


def _coercible(series: Any, dtype: Any) -> np.ndarray:
    """pandera's per-value test (``engines.utils.numpy_pandas_coercible``), on each distinct
    value once."""
    values = series.astype(object).to_numpy()
    ok = np.ones(len(values), dtype=bool)
    verdict: dict[Any, bool] = {}
    for i, v in enumerate(values):
        if v is None or (not isinstance(v, str) and _isna(v)):
            continue
        key = (type(v), v) if _hashable(v) else None
        if key is not None and key in verdict:
            ok[i] = verdict[key]
            continue
        try:
            dtype.coerce_value(v)
            good = True
        except Exception:  # noqa: BLE001 - pandera's own test: any failure is a failure
            good = False
        ok[i] = good
        if key is not None:
            verdict[key] = good
    return ok


def _isna(v: Any) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def _scatter(
    out: Any, keep: np.ndarray, bad: np.ndarray, series: Any, dtype: Any, target: Any
) -> Cast:
    """The cast values (of the rows in ``keep``) back at their rows as Arrow, others null;
    a text cast into a number or boolean that changes the value is bad too."""
    if target is not None:
        changed = keep & _changed(series, out, keep, target)
        if changed.any():
            bad = bad | changed
    try:
        values = pa.array(out, from_pandas=True)
        if isinstance(values, pa.ChunkedArray):  # pandas' Arrow-backed types give chunks
            values = values.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        text = " ".join(str(exc).split())[:160]
        return Cast(pa.array(series, from_pandas=True), None, f"cannot hold {dtype}: {text}")
    rows = np.flatnonzero(keep)
    if len(rows) != len(keep) or bad.any():
        index = np.full(len(keep), -1, dtype=np.int64)
        index[rows] = np.arange(len(rows))
        index[bad] = -1
        values = values.take(pa.array(index, mask=index < 0))
    return Cast(values, bad if bad.any() else None)


def _changed(series: Any, out: Any, keep: np.ndarray, target: pa.DataType) -> np.ndarray:
    """Text (or objects) cast into a number or boolean, changed on the way: a float that
    overflows to +/-Inf, a boolean from anything but True/False."""
    import pandas as pd

    src = series[keep]
    changed = np.zeros(len(keep), dtype=bool)
    if pa.types.is_boolean(target):
        same = src.astype(str).to_numpy() == pd.Series(out).astype(str).to_numpy()
        changed[keep] = ~same
    elif pa.types.is_floating(target):
        before = pd.to_numeric(src, errors="coerce").astype("float64").to_numpy()
        after = pd.Series(out).astype("float64").to_numpy()
        changed[keep] = np.isfinite(before) & ~np.isfinite(after)
    return changed


def categories_outside(arr: pa.Array, dtype: Any) -> np.ndarray | None:
    """Rows whose value is not one of a category dtype's categories (pandera compares each
    value with ``in``: an ``Enum``'s members, the listed values), None when all are."""
    categories = getattr(dtype, "categories", None)
    if categories is None or not hasattr(dtype, "ordered"):
        return None
    if isinstance(arr, pa.DictionaryArray):
        words = arr.dictionary.to_pylist()
        ok_word = np.array([_member(w, categories) for w in words] + [True], dtype=bool)
        index = arr.indices.to_numpy(zero_copy_only=False)
        index = np.where(_filled(pc.is_valid(arr.indices)), index, len(words))
        outside = ~ok_word[index.astype(np.int64)]
    else:
        values = arr.to_pylist()
        verdict: dict[Any, bool] = {}
        outside = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            if v is None:
                continue
            key = (type(v), v) if _hashable(v) else None
            good = verdict.get(key) if key is not None else None
            if good is None:
                good = _member(v, categories)
                if key is not None:
                    verdict[key] = good
            outside[i] = not good
    return outside if outside.any() else None


def _member(value: Any, categories: Any) -> bool:
    return value is None or value in categories
