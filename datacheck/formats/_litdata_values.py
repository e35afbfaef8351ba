"""The leaves of a litdata item, checked as litdata's serializers would read them back.

Written against litdata 0.2.76 (``litdata/streaming/serializers.py``, ``constants.py``).  A
leaf is the bytes one serializer wrote for one value of an item; ``data_format`` in the
``index.json`` names the serializer of each leaf.  Checked, each a ``corrupt`` finding at the
item's row and the leaf's column when it fails:

* ``int``/``float`` (8 bytes, little endian), ``bool`` (1 byte) of the wrong size;
* ``str``/``text`` not UTF-8;
* ``no_header_numpy:K``/``no_header_tensor:K`` (the dtype in the name) and ``numpy`` (``uint32``
  dtype code, rank and dims) / ``tensor`` (big-endian ``uint32`` dtype code, rank and dims)
  whose dtype code is unknown or whose value bytes do not fit the shape;
* ``pil`` (as MDS writes it), ``jpeg``, ``image:EXT``, ``jpeg_array`` that do not decode (every
  image fully decoded); ``audio:wav|flac|ogg|mp3`` that libsndfile does not decode;
* ``json`` (litdata's compact nested encoding, or plain JSON) that does not parse;
* ``pickle`` whose opcodes do not parse (read by :mod:`pickletools`, never unpickled).

The numbers a loader hands on (arrays and tensors in their shape, the floats inside ``json``, a
pickled NumPy float scalar, mode-``F`` ``pil`` pixels) are returned beside the findings and go
on as the item's tensor under the leaf's name, so every check (NaN/Inf, ``extreme``, a schema's
``tensors:`` rules) reads them as in any tensor file; float audio is checked for NaN/Inf as an
audio file is; ``int`` and ``float`` leaves go on as one value per item.  ``bytes`` and ``file:EXT`` are taken
as they are.  :func:`unsupported` names the serializers whose values datacheck cannot read
(video, NIfTI, meshes, PDFs, graphs, TIFFs, a custom serializer): their files are listed under
``ignored`` with that reason, never passed unread.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats._image import DecodeError, Problem
from datacheck.formats._mds_values import (
    Check,
    Decoded,
    _Bad,
    _elements,
    _image_findings,
    _pickle,
    _pil,
    decoding,
)
from datacheck.schema._media import ImageRules

__all__ = ["NUMPY_DTYPES", "TORCH_DTYPES", "leaf_check", "unsupported"]

NUMPY_DTYPES = ["i1", "<i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8"]
NUMPY_DTYPES += ["<c8", "<c16", "?"]
"""litdata's ``_NUMPY_DTYPES_MAPPING`` by code (its ``_NUMPY_SCTYPES`` order); codes 14-17
(object, bytes, str, void) hold no values litdata can read back."""
TORCH_DTYPES = ["<f4", "<f4", "<f8", "<f8", "<c8", "<c8", "<c16", "<c16", "<f2", "<f2", ""]
TORCH_DTYPES += ["u1", "i1", "<i2", "<i2", "<i4", "<i4", "<i8", "<i8", "?", "<u2"]
"""litdata's ``_TORCH_DTYPES_MAPPING`` by code; code 10 (bfloat16) it cannot write (its
serializers go through NumPy, which has no bfloat16), so none is read either."""
_AUDIO = ("wav", "flac", "ogg", "mp3")
"""``audio:EXT`` payloads libsndfile decodes (litdata's others need torchcodec)."""
_UNREAD = {
    "video": "video (decoded by torchcodec)",
    "nifti": "NIfTI volumes",
    "mesh": "meshes",
    "pdf": "PDFs",
    "graph": "graphs",
    "tifffile": "TIFFs written by tifffile",
    "tiff": "TIFFs written by tifffile",
}


def unsupported(fmt: str) -> str | None:
    """Why datacheck cannot read a serializer's values (None: it can)."""
    name, _, arg = fmt.partition(":")
    if name in _UNREAD:
        return f"its {fmt!r} leaves are {_UNREAD[name]}, which datacheck does not decode"
    if name == "audio" and arg not in _AUDIO:
        return f"its {fmt!r} leaves need torchcodec to decode"
    if name in ("no_header_numpy", "no_header_tensor"):
        table = NUMPY_DTYPES if name == "no_header_numpy" else TORCH_DTYPES
        if not arg.isdigit() or int(arg) >= len(table) or not table[int(arg)]:
            return f"its {fmt!r} leaves have a dtype code datacheck does not know"
        return None
    if fmt in _CHECKS or name in ("image", "file", "audio", "jpeg", "jpeg_array", "json"):
        return None
    return f"serializer {fmt!r} is not one of litdata's own: datacheck cannot read its leaves"


def _fixed(size: int, dtype: str | None = None) -> Callable[[bytes], np.ndarray]:
    def check(data: bytes) -> np.ndarray:
        if len(data) != size:
            raise _Bad(f"{len(data)} bytes, not {size}")
        return np.frombuffer(data, dtype) if dtype else _NONE

    return check


def _utf8(data: bytes) -> np.ndarray:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return _NONE


def _values(data: bytes, dtype: str, shape: tuple[int, ...] | None) -> np.ndarray:
    """The values of an array leaf, in its shape (flat when the serializer keeps none)."""
    item = np.dtype(dtype).itemsize
    if len(data) % item or (shape is not None and len(data) // item != _prod(shape)):
        raise _Bad(f"{len(data)} value bytes do not fit shape {shape} of {np.dtype(dtype).name}")
    values = np.frombuffer(data, dtype)
    return values if shape is None else values.reshape(shape)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _header_array(data: bytes, big: bool) -> np.ndarray:
    """``numpy``: ``<u4`` dtype code, rank, dims; ``tensor``: the same big-endian."""
    order, table = (">", TORCH_DTYPES) if big else ("<", NUMPY_DTYPES)
    if len(data) < 8:
        raise _Bad(f"header cut short ({len(data)} bytes)")
    code, rank = struct.unpack_from(order + "II", data)
    if code >= len(table) or not table[code]:
        raise _Bad(f"dtype code {code} is not one litdata writes")
    if len(data) < 8 + 4 * rank:
        raise _Bad(f"a rank-{rank} shape does not fit in {len(data)} bytes")
    shape = struct.unpack_from(f"{order}{rank}I", data, 8)
    return _values(data[8 + 4 * rank :], table[code], shape)


_NONE = np.empty(0)
_CHECKS: dict[str, Callable[[bytes], np.ndarray]] = {
    "int": _fixed(8, "<i8"),
    "float": _fixed(8, "<f8"),
    "bool": _fixed(1),
    "str": _utf8,
    "text": _utf8,
    "bytes": lambda data: _NONE,
    "numpy": lambda data: _header_array(data, big=False),
    "tensor": lambda data: _header_array(data, big=True),
    "pil": _pil,
    "pickle": _pickle,
}


def leaf_check(fmt: str, rules: ImageRules) -> Check | None:
    """The check of one leaf's values by its serializer name (None: nothing to check)."""
    name, _, arg = fmt.partition(":")
    if name in ("jpeg", "image"):
        return lambda path, row, col, data: (_image_findings(path, row, col, data, rules), None)
    if name == "jpeg_array":
        return _jpeg_array(rules)
    if name == "audio":
        return _audio
    check: Callable[[bytes], np.ndarray] | None
    if name in ("no_header_numpy", "no_header_tensor"):
        dtype = (NUMPY_DTYPES if name == "no_header_numpy" else TORCH_DTYPES)[int(arg)]
        check = lambda data: _values(data, dtype, None)  # noqa: E731
    elif name == "json":
        check = _json
    else:
        check = _CHECKS.get(fmt)
    return None if check is None or name in ("bytes", "file") else decoding(fmt, check)


def _jpeg_array(rules: ImageRules) -> Check:
    def decoded(path: str, row: int, name: str, data: bytes) -> Decoded:
        try:
            parts = _elements(data, 0)
        except _Bad as exc:
            return [Finding(path, "corrupt", Severity.ERROR, f"jpeg_array: {exc}", name, row)], None
        out: dict[str, Finding] = {}
        for k, part in enumerate(parts):
            for f in _image_findings(path, row, name, part, rules):
                out.setdefault(f.check, replace(f, value=f"jpeg_array: image {k}: {f.value}"))
        return list(out.values()), None

    return decoded


def _audio(path: str, row: int, name: str, data: bytes) -> Decoded:
    from datacheck.formats._audio import check_audio

    try:
        problems: list[Problem] = check_audio(data)
    except DecodeError as exc:
        return [Finding(path, "corrupt", Severity.ERROR, str(exc), name, row)], None
    return [Finding(path, p.check, p.severity, p.message, name, row) for p in problems], None


# --- litdata's compact nested encoding of JSON-like leaves (serializers._nested_dumps) ------

_JSON, _STRS, _I64S, _F64S, _BOOLS, _DICT, _RECS, _STR, _I64, _F64, _BOOL, _NULL = range(12)
_REC_SIZES = {0x10: 0, 0x12: 8, 0x13: 8, 0x14: 1}
"""Record field tags and their value sizes (``0x11``, a string, is sized by its prefix)."""
_MAX_DEPTH = 64


def _json(data: bytes) -> np.ndarray:
    """A ``json`` leaf: litdata's tagged encoding (first byte <= 0x20) or plain JSON; the
    floats it holds (for NaN/Inf)."""
    if data and data[0] <= 0x20:
        floats: list[np.ndarray] = []
        end = _Nested(data, floats).value(0, 0)
        if end != len(data):
            raise _Bad(f"{len(data) - end} bytes past the end of the value")
        return np.concatenate(floats) if floats else _NONE
    _plain_json(data)
    return _NONE


def _plain_json(data: bytes) -> None:
    try:
        json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"not JSON ({str(exc)[:60] or type(exc).__name__})") from None


class _Nested:
    """A walk over one tagged value: every length checked against the bytes that exist."""

    def __init__(self, data: bytes, floats: list[np.ndarray]) -> None:
        self.data, self.floats = data, floats

    def _take(self, at: int, n: int) -> int:
        if n < 0 or at + n > len(self.data):
            raise _Bad(f"a length at byte {at} runs past the end of the value")
        return at + n

    def _u32(self, at: int) -> int:
        self._take(at, 4)
        return int.from_bytes(self.data[at : at + 4], "little")

    def _text(self, at: int) -> int:
        n = self._u32(at)
        end = self._take(at + 4, n)
        _utf8(self.data[at + 4 : end])
        return end

    def value(self, at: int, depth: int) -> int:
        """Where the value at ``at`` ends."""
        if depth > _MAX_DEPTH:
            raise _Bad(f"nested past {_MAX_DEPTH} levels")
        tag = self.data[self._take(at, 1) - 1]
        at += 1
        if tag == _STR:
            return self._text(at)
        if tag in (_I64, _F64):
            end = self._take(at, 8)
            if tag == _F64:
                self.floats.append(np.frombuffer(self.data, "<f8", 1, at))
            return end
        if tag == _BOOL:
            return self._take(at, 1)
        if tag == _NULL:
            return at
        n = self._u32(at)
        at += 4
        if tag == _JSON:
            end = self._take(at, n)
            _plain_json(self.data[at:end])
            return end
        if tag in (_I64S, _F64S, _BOOLS):
            end = self._take(at, n * (1 if tag == _BOOLS else 8))
            if tag == _F64S:
                self.floats.append(np.frombuffer(self.data, "<f8", n, at))
            return end
        if tag == _STRS:
            for _ in range(n):
                at = self._text(at)
            return at
        if tag == _DICT:
            for _ in range(n):
                at = self.value(self._text(at), depth + 1)
            return at
        if tag == _RECS:
            return self._records(at, n)
        raise _Bad(f"unknown tag {tag} at byte {at - 1}")

    def _records(self, at: int, rows: int) -> int:
        keys = self._u32(at)
        at += 4
        for _ in range(keys):
            at = self._text(at)
        for _ in range(rows * keys):
            kind = self.data[self._take(at, 1) - 1]
            at += 1
            if kind == 0x11:
                at = self._text(at)
            elif kind in _REC_SIZES:
                if kind == 0x13:
                    self.floats.append(np.frombuffer(self.data, "<f8", 1, self._take(at, 8) - 8))
                at = self._take(at, _REC_SIZES[kind])
            else:
                raise _Bad(f"unknown record field tag {kind} at byte {at - 1}")
        return at
