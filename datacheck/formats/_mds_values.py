"""The values of an MDS sample, checked as streaming's ``mds_decode`` would read them.

A damaged byte that the shard's framing does not catch (no index hashes; a codec without a
checksum) lands in one column value.  Every value that streaming would fail to decode is
``corrupt`` at the sample's row (column: the column's name), with the reason:

* scalars (``int``, ``int8`` ... ``uint64``, ``float16/32/64``) of the wrong byte count;
* ``str`` not UTF-8; ``str_int``/``str_float``/``str_decimal`` not a number; ``json`` not JSON (its float numbers, at any depth, checked);
* ``ndarray`` (any of its four layouts) whose dtype byte, shape header or value bytes do not
  add up; ``pil`` whose mode is not one or whose raw pixels are fewer than its size needs;
* ``jpeg``/``png`` that do not fully decode (:func:`._image.check_image`, with the image rules);
* ``list[pil]``/``list[jpeg]``/``list[png]`` (``uint32`` placeholder, count, sizes, elements)
  and ``jpeg_array`` (count, sizes, JPEGs; streaming refuses an empty one) whose sizes do not
  add up to the value, or with an element that fails its own encoding's check;
* ``pkl`` whose opcodes do not parse (:func:`pickletools.dis`: read, never executed); a
  pickled NumPy float scalar is read from its opcodes and checked for NaN/Inf.

The numbers a loader hands on from a value (``str_float``/``str_decimal``, ``ndarray`` values in
their shape, the floats of a ``json`` document, a pickled NumPy float scalar, the pixels of a
``pil`` image of mode ``F``) are returned beside the findings: the reader passes them on as the
sample's tensor under the column's name, so every check (NaN/Inf, ``extreme``, a schema's
``tensors:`` rules) reads them as in any tensor file.  The fixed-size scalar columns go on as
tensors too, without coming here (:mod:`._mds`).
``bytes`` and encodings datacheck does not know are taken as they are.
"""

from __future__ import annotations

import functools
import json
import pickletools
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats._image import DecodeError, check_image
from datacheck.schema._media import ImageRules

__all__ = ["SCALARS", "Check", "Decoded", "decode_sample", "value_check"]

Decoded = tuple[list[Finding], "np.ndarray | None"]
"""What decoding one value found (``corrupt``, an image's problems) and the numbers a loader
hands on from it (None: none; integers too, for a schema's rules)."""
Check = Callable[[str, int, str, bytes], Decoded]
"""``(path, row, column, value bytes) -> (findings, values)`` for one column's values."""

SCALARS = {
    "int": "<i8",
    **{n: np.dtype(n).newbyteorder("<").str for n in ("int8", "int16", "int32", "int64")},
    **{n: np.dtype(n).newbyteorder("<").str for n in ("uint8", "uint16", "uint32", "uint64")},
    **{n: np.dtype(n).newbyteorder("<").str for n in ("float16", "float32", "float64")},
}
_VALUE_DTYPES = {8: "u1", 9: "i1", 16: "<u2", 17: "<i2", 18: "<f2", 32: "<u4", 33: "<i4"}
_VALUE_DTYPES |= {34: "<f4", 64: "<u8", 65: "<i8", 66: "<f8"}
"""Streaming's ``NDArray`` dtype codes (the byte before a dynamic-dtype array)."""
_NAMED_DTYPES = {np.dtype(d).name: d for d in _VALUE_DTYPES.values()}
_NONE = np.empty(0)
_DIS_BYTES = 64 << 10


class _Bad(Exception):
    """A value streaming's decoder would fail on (the message says why)."""


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def _number(parse: Callable[[str], Any], what: str) -> Callable[[bytes], np.ndarray]:
    def check(data: bytes) -> np.ndarray:
        text = _text(data)
        try:
            value = parse(text)
        except (ValueError, InvalidOperation):
            raise _Bad(f"{text[:40]!r} is not {what}") from None
        if isinstance(value, float):
            return np.array([value])
        if isinstance(value, Decimal) and not value.is_finite():  # 1E+999 stays finite
            return np.array([np.nan if value.is_nan() else float(value)])
        return _NONE

    return check


def _json(data: bytes) -> np.ndarray:
    """The document's numbers, at any depth (``json.loads`` reads ``NaN``/``Infinity`` as
    streaming's ``mds_decode`` does): what a loader hands on from the value."""
    try:
        doc = json.loads(_text(data))
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"not JSON ({str(exc)[:60] or type(exc).__name__})") from None
    numbers: list[float] = []
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            numbers.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return np.array(numbers, np.float64) if numbers else _NONE


def _str(data: bytes) -> np.ndarray:
    _text(data)
    return _NONE


class _NullWriter:
    def write(self, text: str) -> None:
        pass


def _pickle(data: bytes) -> np.ndarray:
    """Opcodes parsed, never executed: :func:`pickletools.dis` also follows the stack and memo
    (up to :data:`_DIS_BYTES`: it formats every argument); larger pickles are only parsed."""
    try:
        if len(data) <= _DIS_BYTES:
            pickletools.dis(data, out=_NullWriter())  # type: ignore[arg-type]
        else:
            for _ in pickletools.genops(data):
                pass
    except Exception as exc:  # noqa: BLE001 - whatever the parser meets in damaged bytes
        raise _Bad(f"not a pickle ({str(exc)[:60] or type(exc).__name__})") from None
    return _numpy_float(data) if len(data) <= _SCALAR_PICKLE else _NONE


_SCALAR_PICKLE = 512
"""A pickled NumPy scalar takes ~110 bytes (protocol 4) to ~160 (protocol 2)."""
_SCALAR_MODULES = ("numpy._core.multiarray", "numpy.core.multiarray")
_FLOAT_CODES = ("f2", "f4", "f8", "c8", "c16")


def _numpy_float(data: bytes) -> np.ndarray:
    """The value of a pickled NumPy float scalar (``np.float32(nan)``), read from its opcodes
    as :mod:`pickletools` lists them, never unpickled; empty for any other pickle.  Its
    arguments come in order: the ``scalar`` reconstructor, ``dtype``, the dtype code, the
    byte order, then the value's bytes (protocol 2: latin-1 text through ``_codecs.encode``)."""
    texts: list[str] = []
    raw: bytes | None = None
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL" and isinstance(arg, str):
            texts.extend(arg.split(" ", 1))
        elif isinstance(arg, str):
            texts.append(arg)
        elif isinstance(arg, bytes) and raw is None:
            raw = arg
    if not texts or texts[0] not in _SCALAR_MODULES or texts[1:4] != ["scalar", "numpy", "dtype"]:
        return _NONE
    code, order = texts[4:6] if len(texts) >= 6 else ("", "")
    if raw is None and "latin1" in texts[6:]:  # protocol 2: the bytes as latin-1 text
        raw = texts[texts.index("latin1") - 1].encode("latin-1")
    if code not in _FLOAT_CODES or order not in ("<", ">", "|") or raw is None:
        return _NONE
    dtype = np.dtype(code).newbyteorder(">" if order == ">" else "<")
    if len(raw) != dtype.itemsize:
        return _NONE
    values = np.frombuffer(raw, dtype)
    return values.view(values.real.dtype) if dtype.kind == "c" else values


def _scalar(dtype: str) -> Callable[[bytes], np.ndarray]:
    def check(data: bytes) -> np.ndarray:
        if len(data) != np.dtype(dtype).itemsize:
            raise _Bad(f"{len(data)} bytes, not {np.dtype(dtype).itemsize}")
        return np.frombuffer(data, dtype)

    return check


def _ndarray(config: str) -> Callable[[bytes], np.ndarray]:
    """``ndarray[:dtype[:shape]]``: ``[dtype byte][ndim << 2 | shape dtype][shape][values]``,
    the parts the encoding fixes left out."""
    args = config.split(":") if config else []
    if len(args) > 2 or (args and args[0] not in _NAMED_DTYPES):
        raise ValueError(config)  # streaming would not write it
    fixed = _NAMED_DTYPES[args[0]] if args else None
    shape = tuple(int(d) for d in args[1].split(",")) if len(args) > 1 else None
    if shape is not None and min(shape, default=0) < 1:
        raise ValueError(config)

    def check(data: bytes) -> np.ndarray:
        pos, dtype = 0, fixed
        if dtype is None:
            if not data or (dtype := _VALUE_DTYPES.get(data[0])) is None:
                raise _Bad(f"unknown dtype code {'0x' + data[:1].hex() if data else '(none)'}")
            pos = 1
        dims = shape
        if dims is None:
            if len(data) <= pos:
                raise _Bad("shape header missing")
            ndim, width = data[pos] >> 2, 1 << (data[pos] & 3)
            if len(data) < pos + 1 + ndim * width:
                raise _Bad(f"shape header of {ndim} dims cut short")
            dims = tuple(np.frombuffer(data, f"<u{width}", ndim, pos + 1).tolist())
            pos += 1 + ndim * width
        item, n = np.dtype(dtype).itemsize, len(data) - pos
        if n % item or n // item != int(np.prod(dims, dtype=object)):
            raise _Bad(f"shape {dims} of {np.dtype(dtype).name} does not fit its {n} value bytes")
        return np.frombuffer(data, dtype, offset=pos).reshape(dims)

    return check


@functools.lru_cache(maxsize=64)
def _pixel_bytes(mode: str) -> int | None:
    """Bytes per pixel of a Pillow mode (0 for the bit-packed ``1``; None: not a mode)."""
    from PIL import Image

    try:
        return 0 if mode == "1" else len(Image.new(mode, (1, 1)).tobytes())
    except (ValueError, KeyError, OSError, TypeError):
        return None


def _pil(data: bytes) -> np.ndarray:
    """``pil``: ``uint32 width, height, mode size``, the mode, the raw pixels (Pillow's
    ``frombytes`` needs at least width x height pixels; checked without allocating them)."""
    if len(data) < 12:
        raise _Bad(f"header cut short ({len(data)} bytes)")
    width, height, size = np.frombuffer(data, "<u4", 3).tolist()
    mode = _text(data[12 : 12 + size])
    if (per := _pixel_bytes(mode)) is None:
        raise _Bad(f"mode {mode[:20]!r} is not a Pillow mode")
    need = (width + 7) // 8 * height if per == 0 else per * width * height
    if len(data) - 12 - size < need:
        raise _Bad(
            f"{width} x {height} {mode} needs {need} pixel bytes, holds {len(data) - 12 - size}"
        )
    if mode == "F":  # 32-bit float pixels, in the byte order of the machine that wrote them
        return np.frombuffer(data, "=f4", width * height, 12 + size)
    return _NONE


_LISTS = {"list[pil]": 4, "list[jpeg]": 4, "list[png]": 4, "jpeg_array": 0, "jpegarray": 0}
"""Streaming's list encodings: the bytes before the element count (a ``uint32`` placeholder
in ``list[*]``, none in ``jpeg_array``)."""


def _elements(data: bytes, head: int) -> list[bytes]:
    """The elements of a list value: ``[head bytes] uint32 n, uint32 sizes[n], elements``."""
    if len(data) < head + 4:
        raise _Bad(f"header cut short ({len(data)} bytes)")
    n = int.from_bytes(data[head : head + 4], "little")
    table = head + 4 + 4 * n
    if table > len(data):
        raise _Bad(f"{n} element sizes do not fit in {len(data)} bytes")
    if n == 0 and head == 0:
        raise _Bad("no images (streaming refuses an empty jpeg_array)")
    cuts = [table, *(np.cumsum(np.frombuffer(data, "<u4", n, head + 4), dtype=np.int64) + table)]
    if cuts[-1] != len(data):
        raise _Bad(f"element sizes add up to {cuts[-1] - table} bytes, not {len(data) - table}")
    return [data[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _list_check(enc: str, rules: ImageRules) -> Check:
    head = _LISTS[enc]
    pil = enc == "list[pil]"

    def decoded(path: str, row: int, name: str, data: bytes) -> Decoded:
        try:
            parts = _elements(data, head)
        except _Bad as exc:
            return [Finding(path, "corrupt", Severity.ERROR, f"{enc}: {exc}", name, row)], None
        out: dict[str, Finding] = {}  # the first finding of each check, naming its element
        pixels: list[np.ndarray] = []  # the float pixels of mode-F images, end to end
        for k, part in enumerate(parts):
            if pil:
                try:
                    pixels.append(_pil(part))
                    found = []
                except _Bad as exc:
                    found = [Finding(path, "corrupt", Severity.ERROR, str(exc), name, row)]
            else:
                found = _image_findings(path, row, name, part, rules)
            for f in found:
                out.setdefault(f.check, replace(f, value=f"{enc}: element {k}: {f.value}"))
        values = np.concatenate(pixels) if any(p.size for p in pixels) else None
        return list(out.values()), values

    return decoded


def _checker(enc: str) -> Callable[[bytes], np.ndarray] | None:
    name, _, config = enc.partition(":")
    if name in SCALARS and not config:
        return _scalar(SCALARS[name])
    simple: dict[str, Callable[[bytes], np.ndarray]] = {
        "str": _str,
        "str_int": _number(int, "an integer"),
        "str_float": _number(float, "a number"),
        "str_decimal": _number(Decimal, "a decimal"),
        "json": _json,
        "pkl": _pickle,
        "pil": _pil,
    }
    if name in simple and not config:
        return simple[name]
    if name == "ndarray":
        try:
            return _ndarray(config)
        except (TypeError, ValueError):
            return None  # an encoding streaming would not write: its values are not checked
    return None


def value_check(enc: str, rules: ImageRules) -> Check | None:
    """The check of one column's values by its encoding (None: nothing to check)."""
    if enc in ("jpeg", "png"):
        return lambda path, row, name, data: (_image_findings(path, row, name, data, rules), None)
    if enc in _LISTS:
        return _list_check(enc, rules)
    check = _checker(enc)
    return None if check is None else decoding(enc, check)


def decode_sample(
    path: str,
    row: int,
    checks: Sequence[tuple[int, str, Check]],
    values: Sequence[bytes],
    found: list[Finding],
) -> dict[str, np.ndarray]:
    """One sample's values through their columns' checks (``(index, column, check)``): what
    decoding finds is added to ``found``; the numbers a loader gets come back by column, the
    sample's tensors (MDS columns and litdata leaves alike)."""
    numbers = {}
    for i, name, check in checks:
        more, got = check(path, row, name, values[i])
        found += more
        if got is not None:
            numbers[name] = got
    return numbers


def decoding(what: str, check: Callable[[bytes], np.ndarray]) -> Check:
    """A :data:`Check` of a decoder that returns a value's numbers or raises :class:`_Bad`."""

    def decoded(path: str, row: int, name: str, data: bytes) -> Decoded:
        try:
            values = check(data)
        except _Bad as exc:
            return [Finding(path, "corrupt", Severity.ERROR, f"{what}: {exc}", name, row)], None
        return [], values if values.size and values.dtype.kind in "iufc" else None

    return decoded


def _image_findings(
    path: str, row: int, name: str, data: bytes, rules: ImageRules
) -> list[Finding]:
    try:
        problems = check_image(data, rules)
    except DecodeError as exc:
        return [Finding(path, "corrupt", Severity.ERROR, str(exc), name, row)]
    return [Finding(path, p.check, p.severity, p.message, name, row) for p in problems]
