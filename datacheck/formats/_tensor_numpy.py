"""NumPy files: ``.npy`` (memory-mapped, read a few MiB of samples at a time) and ``.npz``.

``.npy`` is opened with ``np.load(mmap_mode="r", allow_pickle=False)`` (C or Fortran order);
pages already checked are dropped from the process (``madvise``) so RSS stays bounded on files
larger than memory.  An array of records (a structured dtype) is checked field by field: a key
per numeric field (``x``, ``pos.x`` nested; ``member.x`` in an ``.npz``), strings never read.
``.npz`` members are streamed out of the zip (compressed or not) without extracting anything:
each member's declared size must match what its ``.npy`` header describes, and a compressed
member may not claim to inflate far beyond its compressed size (zip bomb guard).
"""

from __future__ import annotations

import math
import mmap
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from datacheck.formats import MEMORY_SHARE, Format, Opened, WorkUnit, memory_budget, mib
from datacheck.formats._tensor_common import (
    BOMB_FLOOR,
    CHUNK_BYTES,
    MAX_INFLATE_RATIO,
    Source,
    TensorFileError,
    check_unique,
    npy_data_bytes,
    opened,
    read_npy_header,
    record_sources,
    release_pages,
    sample_view,
)

SINGLE_KEY = "tensor"
"""The key (manifest ``column``) of a file holding one unnamed array (``.npy``, a bare tensor)."""


def _npy_header(path: str, size: int) -> tuple[tuple[int, ...], np.dtype, int]:
    with open(path, "rb") as fh:
        shape, _, dtype = read_npy_header(fh)
        header = fh.tell()
    need = npy_data_bytes(shape, dtype)
    if need < 0 or header + need > size:
        raise TensorFileError(
            f"truncated: header says shape {shape} {dtype} ({need} bytes of data), "
            f"the file holds {size - header}"
        )
    return shape, dtype, header


def _memmap_release(arr: np.ndarray) -> Callable[[int], None] | None:
    """Drop pages of samples already checked from a ``np.load(mmap_mode='r')`` array."""
    mm = getattr(arr, "_mmap", None)
    if mm is None or arr.ndim == 0:
        return None
    base = int(getattr(arr, "offset", 0)) % mmap.ALLOCATIONGRANULARITY
    row = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    return lambda hi: release_pages(mm, base, base + hi * row)


class NpyFormat(Format):
    name = "npy"
    extensions = (".npy",)
    tabular = False

    def sniff(self, head: bytes) -> bool:
        return head[:6] == b"\x93NUMPY"

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        shape, dtype, _ = _npy_header(unit.path, unit.size)
        if npy_data_bytes(shape, dtype) == 0:
            arr = np.empty(shape, dtype)
        else:
            arr = np.load(unit.path, mmap_mode="r", allow_pickle=False)
        release = _memmap_release(arr) if arr.flags.c_contiguous else None
        if dtype.names is not None:  # records: a key per numeric field
            return opened(record_sources(None, shape, dtype, sample_view(arr)), release)
        src = Source(SINGLE_KEY, shape, dtype.name, dtype.itemsize, sample_view(arr))
        return opened([src], release)

    def write_without(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        """Through memory maps, 64 MiB at a time (bounded memory)."""
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        keep = np.ones(len(arr), dtype=bool)
        keep[drop[drop < len(arr)]] = False
        out = np.lib.format.open_memmap(
            dest, mode="w+", dtype=arr.dtype, shape=(int(keep.sum()), *arr.shape[1:])
        )
        step, pos = max(1, (64 << 20) // max(arr[:1].nbytes, 1)), 0
        for start in range(0, len(arr), step):
            block = arr[start : start + step][keep[start : start + step]]
            out[pos : pos + len(block)] = block
            pos += len(block)
        out.flush()
        del out
        return len(arr), pos


def _check_bomb(info: zipfile.ZipInfo) -> None:
    if info.file_size < 0 or info.compress_size < 0:
        raise TensorFileError(f"member {info.filename!r}: negative size in the zip directory")
    if info.compress_type == zipfile.ZIP_STORED:
        return
    limit = max(MAX_INFLATE_RATIO * max(info.compress_size, 1), BOMB_FLOOR)
    if info.file_size > limit:
        raise TensorFileError(
            f"member {info.filename!r} claims to inflate from {info.compress_size} to "
            f"{info.file_size} bytes (over {MAX_INFLATE_RATIO}x): refused as a zip bomb"
        )


def _read_exact(fp: Any, n: int, what: str) -> np.ndarray:
    buf = np.empty(n, dtype=np.uint8)
    view, got = memoryview(buf), 0
    while got < n:
        k = fp.readinto(view[got:])
        if not k:
            raise TensorFileError(f"{what} is truncated: expected {n} bytes, got {got}")
        got += k
    return buf


FORTRAN_BLOCK = 64 << 20
"""Bytes of a Fortran-order member transposed at a time: large enough that every page of the
C-order copy is written whole (1,024 floats per sample and block for 16,384 samples)."""


def _fortran_bytes(shape: tuple[int, ...], dtype: np.dtype, name: str, unit_bytes: float) -> int:
    """The bytes a Fortran-order member's C-order copy takes, if a unit may hold them."""
    need = math.prod(shape) * dtype.itemsize
    if need > unit_bytes:
        raise TensorFileError(
            f"member {name!r}: a Fortran-order array of {need} bytes, over the {mib(unit_bytes)} "
            "a unit may hold (raise --unit-memory-mb to read it)"
        )
    return need


def _fortran_on_disk(
    fp: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, unit_bytes: float
) -> np.memmap:
    """A Fortran-order member as a C-order array in an unlinked temporary file (mapped),
    transposed a block at a time: its samples are strided across the whole member, so
    streaming them would read it once per chunk, and reading it whole took its size in
    memory.  Pages written are dropped from the process as it goes (``madvise``: they stay in
    the file), so RSS holds a block, not the member."""
    need = _fortran_bytes(shape, dtype, name, unit_bytes)
    with tempfile.TemporaryFile(prefix="datacheck-npz-") as tmp:
        tmp.truncate(need)
        out = np.memmap(tmp, dtype=dtype, mode="r+", shape=shape)
    n, trailing = shape[0], math.prod(shape[1:])
    flat = out.reshape(n, trailing)  # a view: C order, one row per sample
    # The file holds the transpose in C order: rows over the trailing indices (first index
    # fastest), each row all samples.  Row r goes to column c(r) of the C-order copy.
    rows_per_block = max(1, FORTRAN_BLOCK // max(n * dtype.itemsize, 1))
    dims = shape[1:][::-1]
    for r0 in range(0, trailing, rows_per_block):
        k = min(rows_per_block, trailing - r0)
        block = _read_exact(fp, k * n * dtype.itemsize, f"member {name!r}").view(dtype)
        block = block.reshape(k, n)
        if len(shape) <= 2:
            flat[:, r0 : r0 + k] = block.T
        else:
            idx = np.unravel_index(np.arange(r0, r0 + k), dims)
            flat[:, np.ravel_multi_index(idx[::-1], shape[1:])] = block.T
        release_pages(out._mmap, 0, len(out._mmap))
    return out


class _MemberReader:
    """Streams one ``.npz`` member sample range by sample range (reads are sequential)."""

    def __init__(
        self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, unit_bytes: float = float("inf")
    ) -> None:
        _check_bomb(info)
        self.name = info.filename
        self.fp = zf.open(info)
        self.shape, fortran, self.dtype = read_npy_header(self.fp)
        header = self.fp.tell()
        need = npy_data_bytes(self.shape, self.dtype)
        if header + need != info.file_size:
            raise TensorFileError(
                f"member {self.name!r} holds {info.file_size - header} bytes of data but its "
                f"header describes shape {self.shape} {self.dtype} ({need} bytes)"
            )
        self.whole: np.ndarray | None = None
        self._unit_bytes = unit_bytes
        self._on_disk = bool(fortran and need > CHUNK_BYTES)  # transposed at the first read
        if self._on_disk:
            _fortran_bytes(self.shape, self.dtype, self.name, unit_bytes)  # refused now
        elif fortran or not self.shape:
            raw = _read_exact(self.fp, need, f"member {self.name!r}").view(self.dtype)
            self.whole = raw.reshape(self.shape, order="F" if fortran else "C")
            self._finish()
        self.next_row = 0

    def read(self, lo: int, hi: int) -> np.ndarray:
        if self._on_disk:
            return self._read_on_disk(lo, hi)
        if self.whole is not None:
            return self.whole if self.whole.ndim == 0 else self.whole[lo:hi]
        assert lo == self.next_row, "npz members are read sequentially"
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        raw = _read_exact(self.fp, (hi - lo) * row, f"member {self.name!r}")
        self.next_row = hi
        if hi == self.shape[0]:
            self._finish()
        return raw.view(self.dtype).reshape((hi - lo, *self.shape[1:]))

    def _read_on_disk(self, lo: int, hi: int) -> np.ndarray:
        """Samples ``[lo, hi)`` of a transposed member, copied out of its mapping, whose pages
        are then dropped; the mapping (and its file) goes with the last sample."""
        if self.whole is None:
            self.whole = _fortran_on_disk(
                self.fp, self.shape, self.dtype, self.name, self._unit_bytes
            )
            self._finish()
        whole = self.whole
        out = np.array(whole[lo:hi])
        mm = getattr(whole, "_mmap", None)
        row = self.dtype.itemsize * math.prod(self.shape[1:])
        release_pages(mm, lo * row, hi * row)
        if hi >= self.shape[0]:
            self.whole = None
            self._on_disk = False
            del whole
        return out

    def _finish(self) -> None:
        # One more read reaches the end of the member, where zipfile verifies the CRC.
        if self.fp.read(1):
            raise TensorFileError(f"member {self.name!r} has bytes after its array data")


class NpzFormat(Format):
    name = "npz"
    extensions = (".npz",)
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        zf = zipfile.ZipFile(unit.path)  # noqa: SIM115 - closed when its chunks end
        infos = [i for i in zf.infolist() if not i.is_dir()]
        total = sum(max(i.file_size, 0) for i in infos)
        if total > max(MAX_INFLATE_RATIO * unit.size, BOMB_FLOOR):
            raise TensorFileError(
                f"members claim {total} bytes in a {unit.size}-byte file: refused as a zip bomb"
            )
        sources = []
        for info in infos:
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if not info.filename.endswith(".npy"):
                sources.append(Source(key, (), "bytes", 1, None))
                continue
            reader = _MemberReader(zf, info, memory_budget(options) * MEMORY_SHARE)
            dt = reader.dtype
            if dt.names is not None:  # records: a key per numeric field, member.field
                sources.extend(record_sources(key, reader.shape, dt, reader.read))
                continue
            sources.append(Source(key, reader.shape, dt.name, dt.itemsize, reader.read))
        check_unique([s.key for s in sources], "npz")
        return opened(sources, close=zf.close)

    def write_without(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        """Arrays with one entry per row (the longest first axis) lose the dropped rows."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: z[key] for key in z.files}
        rows = max((len(a) for a in arrays.values() if a.ndim), default=0)
        kept = rows
        for key, arr in arrays.items():
            if arr.ndim and len(arr) == rows:
                arrays[key] = np.delete(arr, drop[drop < rows], axis=0)
                kept = len(arrays[key])
        with open(dest, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        return rows, kept
