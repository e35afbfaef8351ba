"""``.safetensors`` (parsed and bounds-checked here, memory-mapped) and HDF5 (``h5py``).

safetensors: the 8-byte header length, the JSON header and every tensor's ``data_offsets`` are
checked against the file before any view is made; a header that lies about its length, a dtype
or shape that does not match the byte range, ranges past the end or overlapping -> ``corrupt``.

HDF5: every numeric dataset (key = its path in the file, e.g. ``train/images``) is read a few
MiB of samples at a time.  Datasets stored in external files or virtual datasets (which point at
other paths) are listed but never read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datacheck.findings import Finding
from datacheck.formats import Chunk, Format, Opened, WorkUnit, memory_budget, mib
from datacheck.formats._tensor_common import (
    MappedFile,
    SampleChunk,
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


def _h5_source(key: str, ds: Any) -> Source:
    dt = ds.dtype
    shape = tuple(int(d) for d in ds.shape) if ds.shape is not None else ()
    external = bool(getattr(ds, "external", None)) or bool(getattr(ds, "is_virtual", False))
    if external or dt.kind not in "biuf" or dt.fields is not None:
        label = "external (not read)" if external else str(dt)
        return Source(key, shape, label, max(dt.itemsize, 1), None)
    if not shape:
        value = np.asarray(ds[()])
        return Source(key, (), dt.name, dt.itemsize, sample_view(value))

    def read(lo: int, hi: int) -> np.ndarray:
        return np.asarray(ds[lo:hi])

    return Source(key, shape, dt.name, dt.itemsize, read)


_MAX_CHUNKS_LISTED = 1 << 20
"""Datasets with more written chunks than this are read as usual (listing them costs)."""


def _written_rows(ds: Any) -> int | None:
    """Rows up to the end of the last written chunk (0: never written), or None when every
    row may hold written data: the rows past it read as the fill value, without I/O."""
    try:
        if not ds.shape or math.prod(ds.shape) == 0:
            return None
        if int(ds.id.get_storage_size()) == 0:
            return 0
        if ds.chunks is None or ds.id.get_num_chunks() > _MAX_CHUNKS_LISTED:
            return None
        step = ds.chunks[0]
        ends = (
            ds.id.get_chunk_info(i).chunk_offset[0] + step for i in range(ds.id.get_num_chunks())
        )
        last = min(max(ends, default=0), ds.shape[0])
    except Exception:  # noqa: BLE001 - h5py raises several kinds; then read it as usual
        return None
    return last if last < ds.shape[0] else None


def _fill_findings(path: str, key: str, ds: Any, start: int, tensors: Any) -> list[Finding]:
    """One finding per failed check for the rows of a dataset from ``start`` on, which were
    never written, computed from its fill value (what every element there reads as) instead
    of materialising 4 TiB of it; the rules of the schema's ``tensors:`` section if any."""
    from datacheck.checks._rules import default_rules
    from datacheck.checks._tensor import sample_hits

    fill = np.asarray(ds.fillvalue if ds.fillvalue is not None else 0, dtype=ds.dtype)
    n = (ds.shape[0] - start) * math.prod(ds.shape[1:])
    is_float = ds.dtype.kind == "f"
    rules = tensors.rules_for(key, is_float) if tensors else default_rules(is_float, True)
    where = "never written" if start == 0 else f"rows {start}.. never written"
    why = f"{where}: all {n} values are the fill value {fill.item()!r}"
    return [
        Finding(path, h.check, h.severity, why, key, None, n)
        for h in sample_hits(fill.reshape(1, 1), rules)
    ]


def _with_fill_rows(base: Opened, unwritten: list[Source], findings: list[Finding]) -> Opened:
    """``base`` plus the rows only never-written datasets have, as one chunk carrying their
    findings (no values read: the rows are counted, the findings say every value)."""
    read = base.expected_rows or 0
    total = max(read, *(s.rows for s in unwritten))

    def chunks() -> Iterator[Chunk]:
        yield from base.chunks
        yield SampleChunk(row_offset=read, tensors={}, samples=total - read, findings=findings)

    return Opened(base.columns, chunks(), expected_rows=total, extra=base.extra)


def _chunk_cached(fh: Any, name: str, budget: float) -> Any:
    """``ds`` reopened with a chunk cache that holds a row of its chunks (all the chunks one
    slice of samples crosses): HDF5's default 1 MiB cache re-inflated a 256 MiB chunk for
    every few MiB of samples read.  A chunk past ``budget`` decoded is refused first."""
    import h5py

    ds = fh[name]
    chunks, shape = ds.chunks, ds.shape
    if chunks is None or not shape:
        return ds
    chunk = math.prod(chunks) * ds.dtype.itemsize
    if chunk > budget:
        raise TensorFileError(
            f"dataset {name!r}: chunks of {chunk} bytes decoded, over the {mib(budget)} a unit "
            "may decode at once (raise --unit-memory-mb to read it)"
        )
    across = math.prod(-(-n // c) for n, c in zip(shape[1:], chunks[1:], strict=True))
    if chunk * across <= 1 << 20:
        return ds  # the default cache holds it
    del ds  # closed, so that the dataset opens again with its own cache
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(
        max(521, 8 * across + 1), int(min(chunk * across, budget)) + (1 << 20), 1.0
    )
    return h5py.Dataset(h5py.h5d.open(fh.id, name.encode(), dapl))


class Hdf5Format(Format):
    name = "hdf5"
    extensions = (".h5", ".hdf5", ".hdf")
    tabular = False

    def sniff(self, head: bytes) -> bool:
        return head[:8] == b"\x89HDF\r\n\x1a\n"

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        import h5py

        fh = h5py.File(unit.path, "r")
        names: list[str] = []
        fill_findings: list[Finding] = []

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                names.append(name)  # not the object: a dataset left open keeps its cache

        fh.visititems(visit)
        budget = memory_budget(options)
        sources, unwritten = [], []
        for name in names:
            ds = fh[name]
            src = _h5_source(name, ds)
            written = _written_rows(ds) if src.read is not None else None
            if written is not None:  # the rows past it: one finding per check, not read
                unwritten.append(Source(name, src.shape, src.dtype, src.itemsize, None))
                found = _fill_findings(unit.path, name, ds, written, options.get("tensors"))
                fill_findings.extend(found)
            if written == 0:
                sources.append(unwritten[-1])
            elif src.read is None:
                sources.append(src)
            else:
                del src, ds  # closed: read through a dataset opened with its own chunk cache
                src = _h5_source(name, _chunk_cached(fh, name, budget))
                if written is not None:
                    src.shape = (written, *src.shape[1:])
                sources.append(src)
        base = opened(sources, close=fh.close)
        if not unwritten:
            return base
        base.extra["shapes"].update({s.key: s.shape for s in unwritten})
        return _with_fill_rows(base, unwritten, fill_findings)
