"""TFRecord framing and protobuf wire format, read without TensorFlow: one reader, two users.

``datacheck scan`` reads ``.tfrecord`` files (:mod:`datacheck.formats._tfrecord`) and
``datacheck logs`` reads TensorBoard event files (:mod:`datacheck.history._tensorboard`); both
are TFRecord files.  Every record is framed as ``uint64 length, uint32 masked CRC32C(length),
data, uint32 masked CRC32C(data)``.  :func:`read_header` reads a record's length and checks its
checksum, never trusting a length past the bytes left in the file; :func:`read_body` reads the
data and says whether its checksum holds.  A bad length checksum loses the framing (nothing
says where the next record starts); a bad data checksum damages one record only.

CRC32C comes from ``google-crc32c`` (the ``media`` extra: a small C extension maintained by
Google for its storage clients, with its own pure-Python fallback); without it, a table-driven
pure-Python CRC is used (correct, about 100x slower).  No numpy, no torch here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO, Any

__all__ = [
    "MAX_RECORD_BYTES",
    "FramingError",
    "crc32c",
    "fields",
    "masked_crc",
    "read_body",
    "read_header",
    "varint",
]

MAX_RECORD_BYTES = 1 << 30
"""Largest record read (a length above it is treated as damage)."""

_HEAD = struct.Struct("<QI")
_CRC = struct.Struct("<I")


class FramingError(ValueError):
    """The framing is lost at ``offset``: a record cut short (``truncated``) or a bad length."""

    def __init__(self, message: str, offset: int, truncated: bool) -> None:
        super().__init__(message)
        self.offset = offset
        self.truncated = truncated


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE: list[int] | None = None
_FAST: Any = None
"""``google_crc32c.value`` once looked up; False without it."""


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of ``data``."""
    global _FAST, _TABLE
    if _FAST is None:
        try:
            import google_crc32c
        except ModuleNotFoundError:
            _FAST = False
        else:
            _FAST = google_crc32c.value
    if _FAST:
        return int(_FAST(data))
    table = _TABLE = _TABLE or _crc_table()
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_header(fh: IO[bytes], row: int, pos: int, size: int | None) -> int | None:
    """The length of record ``row`` at byte ``pos``, or None at the end of the file.

    ``size``: the file's (None for a stream: a length past the end is then found by
    :func:`read_body`).  Raises :class:`FramingError` for a header cut short, a bad length
    checksum, a length past the end of the file or above :data:`MAX_RECORD_BYTES`.
    """
    head = fh.read(12)
    if not head:
        return None
    if len(head) < 12:
        raise FramingError(f"truncated: record {row} header at byte {pos} is cut short", pos, True)
    length, length_crc = _HEAD.unpack(head)
    if masked_crc(head[:8]) != length_crc:
        raise FramingError(
            f"record {row} at byte {pos}: length checksum mismatch (framing lost from here)",
            pos,
            False,
        )
    if length > MAX_RECORD_BYTES:
        raise FramingError(
            f"record {row}: length {length} above the 1 GiB record limit", pos, False
        )
    if size is not None and pos + 16 + length > size:
        raise FramingError(
            f"truncated: record {row} at byte {pos} claims {length} bytes, past the end", pos, True
        )
    return int(length)


def _read(fh: IO[bytes], n: int, what: str, at: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise FramingError(
            f"truncated: {what} at byte {at} needs {n} bytes, {len(data)} left", at, True
        )
    return data


def read_body(fh: IO[bytes], length: int, row: int, pos: int) -> tuple[bytes, bool]:
    """Record ``row``'s data (``length`` bytes, after its header) and whether its checksum holds."""
    data = _read(fh, length, f"record {row}", pos)
    (data_crc,) = _CRC.unpack(_read(fh, 4, f"record {row} checksum", pos))
    return data, masked_crc(data) == data_crc


def varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A protobuf base-128 varint at ``pos``: (value, position after it)."""
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: an int for varints, bytes for
    the others (8 for 64-bit, 4 for 32-bit, the body for length-delimited).

    Raises ValueError on a malformed message (a field past its end, a group wire type).
    """
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("field runs past the end of the message")
        yield num, wire, value
