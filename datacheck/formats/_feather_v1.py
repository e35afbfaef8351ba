"""Feather v1 metadata checked before pyarrow reads it: pyarrow's v1 reader trusts the file's
flatbuffer, so a damaged one made it read wild pointers (SIGSEGV/SIGBUS, or a spin until the
time limit: the commonest native crash under the fuzzer).

A v1 file is ``FEA1``, the column buffers, a ``CTable`` flatbuffer, its ``uint32`` length and
``FEA1``.  Every offset the reader follows (root table, vtables, the columns vector, each
column's name, values and type metadata, strings) is checked to land inside the flatbuffer,
and every column's buffer (``offset``, ``total_bytes``) inside the data between the magic and
the metadata; counts must be non-negative.  Layout per Arrow's ``feather.fbs``
(``CTable{description, num_rows, columns, version, metadata}``, ``Column{name, values,
metadata_type, metadata, user_metadata}``, ``PrimitiveArray{type, encoding, offset, length,
null_count, total_bytes}``).
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["FeatherV1Error", "check_feather_v1"]

MAGIC = b"FEA1"
_TYPE_CODES = 22
"""Feather v1 ``Type`` values (BOOL .. LARGE_BINARY)."""
_OFFSET_WIDTH = {11: 4, 12: 4, 17: 8, 18: 8}
"""Bytes per offset of the binary-like types (UTF8, BINARY, LARGE_UTF8, LARGE_BINARY)."""
_UNION = {1: "CategoryMetadata", 2: "TimestampMetadata", 3: "DateMetadata", 4: "TimeMetadata"}
"""``Column.metadata`` types; pyarrow reads the table of each but DateMetadata's."""


class FeatherV1Error(ValueError):
    """The file's metadata is damaged: corrupt, never handed to pyarrow."""


class _Table:
    """One flatbuffer table, bounds-checked against the buffer."""

    def __init__(self, buf: bytes, pos: int, what: str) -> None:
        self.buf, self.pos, self.what = buf, pos, what
        _need(buf, pos, 4, what)
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        _need(buf, vtable, 4, f"{what} vtable")
        size, table_size = struct.unpack_from("<HH", buf, vtable)
        if size < 4 or size % 2:
            raise FeatherV1Error(f"{what}: vtable of {size} bytes")
        _need(buf, vtable, size, f"{what} vtable")
        _need(buf, pos, table_size, what)
        self.fields = struct.unpack_from(f"<{(size - 4) // 2}H", buf, vtable + 4)

    def _at(self, i: int, width: int) -> int | None:
        off = self.fields[i] if i < len(self.fields) else 0
        if not off:
            return None
        _need(self.buf, self.pos + off, width, f"{self.what} field {i}")
        return self.pos + off

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        at = self._at(i, struct.calcsize(fmt))
        return default if at is None else int(struct.unpack_from(fmt, self.buf, at)[0])

    def ref(self, i: int) -> int | None:
        """Where the offset field ``i`` points (a string, vector or table), checked."""
        at = self._at(i, 4)
        if at is None:
            return None
        target = at + struct.unpack_from("<I", self.buf, at)[0]
        _need(self.buf, target, 4, f"{self.what} field {i}")
        return target

    def table(self, i: int, what: str) -> _Table | None:
        at = self.ref(i)
        return None if at is None else _Table(self.buf, at, what)

    def string(self, i: int, required: bool = False) -> None:
        at = self.ref(i)
        if at is not None:
            (n,) = struct.unpack_from("<I", self.buf, at)
            _need(self.buf, at + 4, n + 1, f"{self.what} string")  # + its NUL
        elif required:
            raise FeatherV1Error(f"{self.what}: no field {i}")

    def tables(self, i: int, what: str) -> list[_Table]:
        at = self.ref(i)
        if at is None:
            raise FeatherV1Error(f"{self.what}: no {what}s")
        (n,) = struct.unpack_from("<I", self.buf, at)
        _need(self.buf, at + 4, 4 * n, f"{what} vector")
        return [
            _Table(self.buf, p + struct.unpack_from("<I", self.buf, p)[0], f"{what} {k}")
            for k, p in enumerate(range(at + 4, at + 4 + 4 * n, 4))
        ]


def _need(buf: bytes, pos: int, n: int, what: str) -> None:
    if pos < 0 or n < 0 or pos + n > len(buf):
        raise FeatherV1Error(f"{what} at byte {pos} of the metadata runs past its {len(buf)} bytes")


def _array(t: _Table | None, data_end: int, padded: bool, what: str) -> int:
    """A ``PrimitiveArray``: a known type, counts >= 0, its bytes inside the data section and
    long enough for the null bitmap and offsets pyarrow slices off its front (a negative rest
    crashed it); the values themselves are checked by the batch's full validation."""
    if t is None:
        raise FeatherV1Error(f"{what}: no values")
    kind = t.scalar(0, "<B")
    offset, length, nulls, size = (t.scalar(i, "<q") for i in (2, 3, 4, 5))
    if kind >= _TYPE_CODES:
        raise FeatherV1Error(f"{what}: unknown type code {kind}")
    if not 0 <= length < 1 << 40 or not 0 <= nulls <= length:
        raise FeatherV1Error(f"{what}: {length} values with {nulls} nulls")
    if offset < len(MAGIC) or size < 0 or offset + size > data_end:
        raise FeatherV1Error(
            f"{what}: {size} bytes at {offset}, outside the data (bytes 4..{data_end})"
        )
    pad = (lambda n: -(-n // 8) * 8) if padded else (lambda n: n)
    front = pad(-(-length // 8)) if nulls else 0
    front += pad((length + 1) * _OFFSET_WIDTH.get(kind, 0)) if kind in _OFFSET_WIDTH else 0
    if front > size:
        raise FeatherV1Error(
            f"{what}: {length} values need {front} bytes of bitmap and offsets, it has {size}"
        )
    return length


def check_feather_v1(source: Any) -> None:
    """Check a Feather v1 file's metadata (``source``: a pyarrow ``NativeFile``, left at 0).

    Raises:
        FeatherV1Error: the flatbuffer or a column's buffer lies outside the file.
    """
    size = source.size()
    if size < 12:
        raise FeatherV1Error(f"{size} bytes: too short for a Feather v1 file")
    source.seek(size - 8)
    length, magic = struct.unpack("<I4s", source.read(8))
    if magic != MAGIC:
        raise FeatherV1Error("no FEA1 at the end: truncated")
    data_end = size - 8 - length
    if length < 8 or data_end < len(MAGIC):
        raise FeatherV1Error(f"metadata of {length} bytes in a file of {size}")
    source.seek(data_end)
    buf = source.read(length)
    source.seek(0)
    (root,) = struct.unpack_from("<I", buf, 0)
    table = _Table(buf, root, "table")
    table.string(0)
    rows = table.scalar(1, "<q")
    table.string(4)
    padded = table.scalar(3, "<i") >= 2  # version 2 pads each buffer to 8 bytes
    for k, col in enumerate(table.tables(2, "column")):
        col.string(0, required=True)  # pyarrow dereferences the name, values and metadata
        col.string(4)
        length = _array(col.table(1, f"column {k} values"), data_end, padded, f"column {k}")
        if length != rows:  # pyarrow cuts batches by the table's count: past a column's end
            raise FeatherV1Error(f"column {k} holds {length} values, the table says {rows} rows")
        _type_metadata(col, k, data_end, padded)


def _type_metadata(col: _Table, k: int, data_end: int, padded: bool) -> None:
    """The union ``metadata``: present when its type says so, its fields in range."""
    kind = col.scalar(2, "<B")
    if kind not in _UNION:
        return  # NONE, or a value pyarrow ignores (the values' own type decides)
    meta = col.table(3, f"column {k} metadata")
    if meta is None:
        raise FeatherV1Error(f"column {k}: {_UNION[kind]} without its table")
    if kind == 1:  # the dictionary: an array of its own
        _array(meta.table(0, f"column {k} levels"), data_end, padded, f"column {k} levels")
    elif meta.scalar(0, "<B") > 3:  # TimestampMetadata / TimeMetadata: unit s..ns
        raise FeatherV1Error(f"column {k}: time unit {meta.scalar(0, '<B')}")
    if kind == 2:
        meta.string(1)  # the time zone
