"""``.safetensors``: parsed and bounds-checked here, memory-mapped (HDF5: ``_tensor_hdf5``).

safetensors: the 8-byte header length, the JSON header and every tensor's ``data_offsets`` are
checked against the file before any view is made; a header that lies about its length, a dtype
or shape that does not match the byte range, ranges past the end or overlapping -> ``corrupt``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from datacheck.formats import Format, Opened, WorkUnit
from datacheck.formats._tensor_common import (
    MappedFile,
    Source,
    TensorFileError,
    opened,
    sample_view,
)

MAX_HEADER_BYTES = 100 << 20
"""The safetensors format's own limit on the JSON header."""

_ST_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
_ST_ITEMSIZE = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}


def _st_header(mf: MappedFile) -> tuple[dict[str, Any], int]:
    if mf.size < 8:
        raise TensorFileError(f"truncated: {mf.size} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(mf.bytes(0, 8), "little")
    if n > MAX_HEADER_BYTES or 8 + n > mf.size:
        raise TensorFileError(
            f"header claims {n} bytes; the file has {mf.size - 8} after the length"
        )
    try:
        header = json.loads(mf.bytes(8, n).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TensorFileError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise TensorFileError("header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise TensorFileError("__metadata__ is not a map of strings to strings")
    return header, 8 + n


def _st_entry(name: str, info: Any, data_len: int) -> tuple[str, tuple[int, ...], int, int, int]:
    """Validate one header entry: (dtype, shape, itemsize, begin, end)."""
    if not isinstance(info, dict):
        raise TensorFileError(f"tensor {name!r}: header entry is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in _ST_DTYPES and dtype not in _ST_ITEMSIZE:
        raise TensorFileError(f"tensor {name!r}: unknown dtype {dtype!r}")
    ok_shape = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
    ok_offsets = (
        isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
    )
    if not ok_shape or not ok_offsets:
        raise TensorFileError(
            f"tensor {name!r}: malformed shape {shape!r} or data_offsets {offsets!r}"
        )
    itemsize = _ST_ITEMSIZE.get(dtype) or np.dtype(_ST_DTYPES[dtype]).itemsize
    begin, end = offsets
    need = math.prod(shape) * itemsize  # exact: an int64 product could wrap to a small size
    if not 0 <= begin <= end <= data_len:
        raise TensorFileError(
            f"tensor {name!r}: data_offsets [{begin}, {end}] outside the {data_len}-byte data section"
        )
    if end - begin != need:
        raise TensorFileError(
            f"tensor {name!r}: data_offsets span {end - begin} bytes, shape {shape} {dtype} needs {need}"
        )
    return dtype, tuple(shape), itemsize, begin, end


def _bf16_reader(raw: np.ndarray) -> Any:
    def read(lo: int, hi: int) -> np.ndarray:
        part = raw if raw.ndim == 0 else raw[lo:hi]
        return (part.astype(np.uint32) << 16).view(np.float32)

    return read


class SafetensorsFormat(Format):
    name = "safetensors"
    extensions = (".safetensors",)
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        mf = MappedFile(unit.path)
        header, start = _st_header(mf)
        entries = sorted(
            ((k, *_st_entry(k, v, mf.size - start)) for k, v in header.items()),
            key=lambda e: e[4],
        )
        sources, spans, prev_end = [], [], 0
        for key, dtype, shape, itemsize, begin, end in entries:
            if begin < prev_end:
                raise TensorFileError(f"tensor {key!r}: data overlaps the previous tensor's")
            if begin > prev_end:
                raise TensorFileError(
                    f"{begin - prev_end} bytes before tensor {key!r} are no tensor's"
                )
            prev_end = end
            if dtype in ("F8_E4M3", "F8_E5M2"):
                sources.append(Source(key, shape, dtype.lower(), itemsize, None))
                continue
            np_dtype = np.dtype("<u2" if dtype == "BF16" else _ST_DTYPES[dtype])
            raw = mf.array(start + begin, np_dtype, shape)
            read = _bf16_reader(raw) if dtype == "BF16" else sample_view(raw)
            name = "bfloat16" if dtype == "BF16" else np_dtype.name
            sources.append(Source(key, shape, name, np_dtype.itemsize, read))
            spans.append((start + begin, itemsize * math.prod(shape[1:])))

        if prev_end != mf.size - start:  # as the safetensors library: every byte is a tensor's
            raise TensorFileError(
                f"{mf.size - start - prev_end} bytes at the end of the data are no tensor's"
            )

        def release(hi: int) -> None:
            for off, row in spans:
                mf.release(off, off + hi * row)

        return opened(sources, release)
