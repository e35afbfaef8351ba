"""Decoders of the WebDataset member kinds beyond arrays, images and text: MessagePack
(``.mp``, ``.msg``), ``.npz`` archives and webdataset's own tensor encoding (``.ten``, ``.tb``).

Each reads what ``webdataset``'s default decoders read (``msgpack.unpackb``, ``np.load`` of the
archive, ``webdataset.tenbin.decode_buffer``) without unpickling anything, and returns the
member's numeric leaves by column name: a document's numeric top-level fields as
``<ext>.<field>``, an archive's arrays as ``<ext>.<name>``, a tensor list's as ``<ext>.<i>``.
What does not decode raises :class:`TensorFileError` (a ``corrupt`` finding at the sample).
"""

from __future__ import annotations

import io
import struct
import zipfile
from typing import Any

import numpy as np

from datacheck.formats._tensor_common import TensorFileError

__all__ = ["MSGPACK", "NPZ", "TENBIN", "msgpack_document", "npz_arrays", "tenbin_arrays"]

MSGPACK = frozenset({"mp", "msg"})
NPZ = frozenset({"npz"})
TENBIN = frozenset({"ten", "tb"})
_MAGIC = b"~TenBin~"
_TENBIN_DTYPES = {
    b"f2": "<f2", b"f4": "<f4", b"f8": "<f8", b"i1": "i1", b"i2": "<i2", b"i4": "<i4",
    b"i8": "<i8", b"u1": "u1", b"u2": "<u2", b"u8": "<u8",
}  # fmt: skip
"""webdataset.tenbin's short dtype names (its table spells uint32 ``unit32``: none)."""


def msgpack_document(data: bytes | bytearray) -> Any:
    """The document ``msgpack.unpackb`` reads (maps with any keys, as webdataset gets them)."""
    import msgpack

    try:
        return msgpack.unpackb(bytes(data), strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - ExtraData, FormatError, StackError, ValueError...
        raise TensorFileError(f"invalid MessagePack: {type(exc).__name__}: {exc}") from None


def npz_arrays(data: bytes | bytearray, budget: float) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` member (``np.load(allow_pickle=False)``), each one's declared
    size checked against ``budget`` before it is inflated."""
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
            for info in zf.infolist():
                if info.file_size > budget:
                    raise TensorFileError(
                        f"archive member {info.filename!r} declares {info.file_size} bytes, "
                        "past the memory a unit may decode"
                    )
        with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except TensorFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever numpy/zipfile raise: it does not load
        raise TensorFileError(f"not a readable .npz: {type(exc).__name__}: {exc}") from None


def _chunks(buf: memoryview) -> list[memoryview]:
    out, offset = [], 0
    while offset < len(buf):
        if bytes(buf[offset : offset + 8]) != _MAGIC:
            raise TensorFileError(f"tenbin: no magic at byte {offset}")
        if offset + 16 > len(buf):
            raise TensorFileError(f"tenbin: chunk header cut at byte {offset}")
        (n,) = struct.unpack("<q", buf[offset + 8 : offset + 16])
        if n < 0 or offset + 16 + n > len(buf):
            raise TensorFileError(f"tenbin: chunk at byte {offset} claims {n} bytes")
        out.append(buf[offset + 16 : offset + 16 + n])
        offset += 16 + -(-n // 64) * 64
    return out


def _tenbin_array(header: memoryview, data: memoryview) -> np.ndarray:
    h = bytes(header)
    if len(h) < 24 or len(h) % 8:
        raise TensorFileError("tenbin: array header cut short")
    dtype = _TENBIN_DTYPES.get(h[:8].rstrip(b"\0"))
    (rank,) = struct.unpack("<q", h[16:24])
    if dtype is None or not 0 <= rank < 10 or len(h) < 24 + 8 * rank:
        raise TensorFileError("tenbin: unsupported array header")
    shape = struct.unpack(f"<{rank}q", h[24 : 24 + 8 * rank])
    count = int(np.prod(shape, dtype=np.int64))
    if min(shape, default=0) < 0 or count * np.dtype(dtype).itemsize > len(data):
        raise TensorFileError(f"tenbin: shape {shape} {dtype} past its {len(data)} data bytes")
    return np.frombuffer(data, dtype, count).reshape(shape)


def tenbin_arrays(data: bytes | bytearray) -> list[np.ndarray]:
    """The arrays of a ``.ten`` member, in order (header chunk, data chunk, ...)."""
    chunks = _chunks(memoryview(data))
    if len(chunks) % 2:
        raise TensorFileError("tenbin: an array header without its data")
    return [_tenbin_array(h, d) for h, d in zip(chunks[::2], chunks[1::2], strict=True)]
