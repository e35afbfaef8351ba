"""Arrow columns in the shapes the checks read: every float value reachable, by type.

Arrow can store the same values in several encodings; the checks read plain arrays, lists and
structs.  :func:`plain` turns dictionary, run-end-encoded, list-view, map and extension columns
(Arrow's ``fixed_shape_tensor``; ``datasets``' ``Array2D``..``Array5D`` once ``datasets`` is
imported: their storage) (also nested) into those, so a NaN in a dictionary's values or in a map's values is found at its row
like any other.  :func:`readable` tells the column types that pyarrow cannot even hand to
Python (month and day-time intervals): such columns hold no numbers and are skipped by type,
before any array of them is built, as are columns nested deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["plain", "readable", "readable_columns"]

_UNWRAPPABLE = frozenset({21, 22})
"""Arrow type ids pyarrow has no array class for: INTERVAL_MONTHS, INTERVAL_DAY_TIME."""


def _children(t: pa.DataType) -> list[pa.DataType]:
    if isinstance(t, pa.BaseExtensionType):
        return [t.storage_type]
    if pa.types.is_dictionary(t):
        return [t.index_type, t.value_type]
    if pa.types.is_run_end_encoded(t):
        return [t.run_end_type, t.value_type]
    return [t.field(i).type for i in range(t.num_fields)]


MAX_DEPTH = 64
"""Columns nested deeper than this (JSON ``[[[[...]]]]``) are not checked: walking them would
take the reader's stack, and no dataset nests numbers that deep."""


def _walk_type(t: pa.DataType) -> tuple[bool, bool]:
    """(readable, encoded): any unwrappable type or nesting past MAX_DEPTH; any encoding."""
    stack, encoded = [(t, 0)], False
    while stack:
        t, depth = stack.pop()
        if t.id in _UNWRAPPABLE or depth > MAX_DEPTH:
            return False, encoded
        encoded = encoded or _is_encoding(t)
        stack.extend((c, depth + 1) for c in _children(t))
    return True, encoded


def readable(t: pa.DataType) -> bool:
    """False for a type pyarrow cannot wrap as a Python array, or nested past MAX_DEPTH."""
    return _walk_type(t)[0]


def readable_columns(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch | pa.Table:
    """``batch`` without the columns of unreadable types (no array of them is built)."""
    keep = [i for i, f in enumerate(batch.schema) if readable(f.type)]
    return batch if len(keep) == batch.num_columns else batch.select(keep)


def _is_encoding(t: pa.DataType) -> bool:
    return (
        isinstance(t, pa.BaseExtensionType)
        or pa.types.is_dictionary(t)
        or pa.types.is_run_end_encoded(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
        or pa.types.is_map(t)
    )


def _encoded(t: pa.DataType) -> bool:
    """True if ``t`` holds a dictionary, run-end, list-view or map encoding at any depth."""
    return _walk_type(t)[1]


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _from_views(arr: pa.Array) -> pa.Array:
    """A list-view array as a list array with the same rows (a view may share values)."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    large = pa.types.is_large_list_view(arr.type)
    cls = pa.LargeListArray if large else pa.ListArray
    offsets_arr = pa.array(offsets if large else offsets.astype(np.int32))
    return cls.from_arrays(offsets_arr, plain(pc.list_flatten(arr)), mask=_mask(arr))


def plain(arr: pa.Array) -> pa.Array:
    """``arr`` with every encoding replaced by plain arrays, lists and structs, row for row."""
    t = arr.type
    if not _encoded(t):
        return arr
    if isinstance(t, pa.BaseExtensionType):  # Arrow's fixed_shape_tensor, datasets' Array2D, ...
        return plain(arr.storage)
    if pa.types.is_dictionary(t):
        return plain(arr.dictionary_decode())
    if pa.types.is_run_end_encoded(t):
        return plain(pc.run_end_decode(arr))
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return _from_views(arr)
    if pa.types.is_map(t):  # list<struct<key, value>>: keys and values are columns of their own
        entries = pa.StructArray.from_arrays(
            [plain(arr.keys), plain(arr.items)], names=[t.key_field.name, t.item_field.name]
        )
        return pa.ListArray.from_arrays(arr.offsets, entries, mask=_mask(arr))
    if pa.types.is_fixed_size_list(t):
        k = t.list_size
        values = plain(arr.values.slice(arr.offset * k, len(arr) * k))
        return pa.FixedSizeListArray.from_arrays(values, k, mask=_mask(arr))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return type(arr).from_arrays(arr.offsets, plain(arr.values), mask=_mask(arr))
    if pa.types.is_struct(t):
        children = [plain(c) for c in arr.flatten()]  # flatten merges the struct's nulls
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=_mask(arr))
    return arr  # a union: left as it is
