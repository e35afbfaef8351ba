"""Arrow arrays whose values buffer is longer than their values (found by tests/fuzz: an Arrow
file whose buffer length was not a whole number of float64 passed validation, then NumPy
refused the whole buffer and the scan ended with exit 3)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datacheck.checks._columns import flatten


def test_a_buffer_with_stray_bytes_is_read_by_count() -> None:
    values = np.array([1.0, np.nan, 3.0, 4.0])
    buf = pa.py_buffer(values.tobytes() + b"\x01\x02\x03\x04\x05")  # 37 bytes
    arr = pa.Array.from_buffers(pa.float64(), 4, [None, buf])
    arr.validate(full=True)  # long enough: Arrow accepts it
    flat = flatten(arr)
    np.testing.assert_array_equal(flat.values, values)
    sliced = flatten(arr.slice(1, 2))
    np.testing.assert_array_equal(sliced.values, values[1:3])
