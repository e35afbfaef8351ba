"""Shared pieces of the tensor readers: safety limits, chunking by sample, mapped files.

Tensor readers describe each array as a :class:`Source` (key, shape, dtype and a function that
reads a range of samples); :func:`whole_chunks` turns sources into bounded :class:`Chunk`
objects, a few MiB of samples at a time.  Sample-wise containers (WebDataset tar shards, a
``.pt`` list of samples) go through :class:`SampleBatcher`, which stacks consecutive samples of
the same shape into one array so that the checks stay vectorised.

Everything here treats the file as hostile: sizes and offsets claimed by headers are checked
against the bytes that exist before anything is allocated, and nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import io
import math
import mmap
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from datacheck.formats import Chunk, Opened, Ragged

CHUNK_BYTES = 8 << 20
"""Target bytes per chunk: small enough to stay in cache for the two passes of the checks."""
MAX_INFLATE_RATIO = 1100
"""A compressed member may claim at most this many times its compressed size (deflate's
theoretical maximum is about 1032:1) ..."""
BOMB_FLOOR = 64 << 20
"""... unless the claimed size is below this: small members are never treated as bombs."""
MAX_MEMBER_BYTES = 1 << 30
"""Largest member read into memory whole (``.pt`` members, compressed tar shards)."""
MAX_TEXT_BYTES = 64 << 20
"""Largest JSON / numeric-text member parsed."""
MAX_NPY_HEADER = 10000
"""numpy's own default limit on a ``.npy`` header."""

PICKLE_MSG = "requires unpickling arbitrary code, which datacheck never does (not loaded)"


class TensorFileError(ValueError):
    """A tensor file that is damaged, lies about its sizes, or is unsafe to load."""


class Refused(TensorFileError):
    """Content datacheck will not load, however well formed: a pickle, or a piece past the
    unit's memory budget.  Inside a container it fails the whole file, not one sample."""


def pickle_error(what: str) -> TensorFileError:
    """The error for content that only a pickle could load."""
    return Refused(f"{what} {PICKLE_MSG}")


@dataclass
class SampleChunk(Chunk):
    """A chunk of a sample-wise container: shapes and dtypes may vary from sample to sample."""

    samples: int = 0
    """Samples this chunk accounts for (including samples with no numeric member)."""
    per_sample: ClassVar[bool] = True

    @property
    def num_rows(self) -> int:
        return self.samples


@dataclass
class Source:
    """One array of a file, read a range of samples at a time."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    """The dtype as the file declares it (``bfloat16`` stays ``bfloat16``)."""
    itemsize: int
    read: Callable[[int, int], np.ndarray] | None
    """Samples ``[lo, hi)`` as a NumPy array (the whole value for 0-d); None: listed, not read."""
    row_cost: int | None = None
    """Bytes a sample costs to read when not its value's own: the first field of a record
    carries the whole record (the others 0), read once for all of its fields."""

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_bytes(self) -> int:
        if self.row_cost is not None:
            return self.row_cost
        return self.itemsize * math.prod(self.shape[1:])

    @property
    def empty(self) -> bool:
        """True if the array holds no values at all (a zero in its shape), however many rows."""
        return bool(self.shape) and 0 in self.shape


def whole_chunks(
    sources: list[Source],
    release: Callable[[int], None] | None = None,
    close: Callable[[], None] | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[Chunk]:
    """Chunks of at most ``chunk_bytes`` (default :data:`CHUNK_BYTES`) across all sources.

    Only arrays that hold values set the number of chunks.  An array with a zero in its shape
    (``(2**55, 0)`` costs no bytes, so no size check can refuse it) holds no values: its rows
    ride along in the chunks of the other arrays and the rows past those come as one last
    chunk, so a header's row count never turns into a loop.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    readable = [s for s in sources if s.read is not None]
    valued = [s for s in readable if not s.empty]
    n = max((s.rows for s in valued), default=0)
    total = max((s.rows for s in readable), default=0)
    per_sample = sum(s.row_bytes for s in valued if s.shape)
    step = max(1, chunk_bytes // max(per_sample, 1))
    try:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            yield Chunk(row_offset=lo, tensors=_slice(readable, lo, hi))
            if release is not None:
                release(hi)
        if total > n:  # rows of arrays without values only: one chunk, no per-chunk loop
            yield Chunk(row_offset=n, tensors=_slice(readable, n, total))
    finally:
        if close is not None:
            close()


def _slice(readable: list[Source], lo: int, hi: int) -> dict[str, np.ndarray]:
    """Samples ``[lo, hi)`` of every source that has them (0-d sources in the first chunk)."""
    tensors: dict[str, np.ndarray] = {}
    for s in readable:
        if not s.shape:
            if lo == 0:
                tensors[s.key] = s.read(0, 1)  # type: ignore[misc]
        elif lo < s.rows:
            tensors[s.key] = s.read(lo, min(hi, s.rows))  # type: ignore[misc]
    return tensors


def opened(
    sources: list[Source],
    release: Callable[[int], None] | None = None,
    close: Callable[[], None] | None = None,
) -> Opened:
    """An :class:`Opened` for whole-array sources: dtypes, full shapes and sample count."""
    n = max((s.rows for s in sources if s.read is not None), default=0)
    return Opened(
        {s.key: s.dtype for s in sources},
        whole_chunks(sources, release, close),
        expected_rows=n,
        extra={"shapes": {s.key: s.shape for s in sources}},
    )


NUMERIC_KINDS = "biufc"
"""dtype kinds the checks read (complex: its real and imaginary parts)."""


def record_leaves(
    dtype: np.dtype, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], np.dtype]]:
    """The numeric fields of a structured dtype, nested ones included: (field path, dtype
    with its subarray shape); strings, objects and opaque bytes are none of them."""
    for name in dtype.names or ():
        sub = dtype.fields[name][0]  # type: ignore[index]
        if sub.base.names:
            yield from record_leaves(sub.base, (*path, name))
        elif sub.base.kind in NUMERIC_KINDS:
            yield (*path, name), sub


def field_of(records: np.ndarray, path: tuple[str, ...]) -> np.ndarray:
    """One (nested) field of an array of records, subarray axes after the sample axes."""
    out = records
    for name in path:
        out = out[name]
    return out


def record_sources(
    key: str | None,
    shape: tuple[int, ...],
    dtype: np.dtype,
    read: Callable[[int, int], np.ndarray],
) -> list[Source]:
    """A :class:`Source` per numeric field of an array of records (a structured ``.npy``, an
    HDF5 compound dataset, a PyTables Table): keys ``key.field.sub`` (``field.sub`` when
    ``key`` is None).  The records of a range of samples are read once for all the fields;
    the first field carries their cost (:attr:`Source.row_cost`)."""
    cache: dict[tuple[int, int], np.ndarray] = {}

    def records(lo: int, hi: int) -> np.ndarray:
        if (lo, hi) not in cache:
            cache.clear()
            cache[lo, hi] = read(lo, hi)
        return cache[lo, hi]

    sources = []
    for i, (path, sub) in enumerate(record_leaves(dtype)):
        name = ".".join(path if key is None else (key, *path))

        def read_field(lo: int, hi: int, path: tuple[str, ...] = path) -> np.ndarray:
            return field_of(records(lo, hi), path)

        row_cost = dtype.itemsize * math.prod(shape[1:]) if i == 0 else 0
        full = (*shape, *sub.shape)
        sources.append(Source(name, full, sub.base.name, sub.base.itemsize, read_field, row_cost))
    return sources


def check_unique(keys: list[str], what: str) -> None:
    seen: set[str] = set()
    for k in keys:
        if k in seen:
            raise TensorFileError(f"{what}: key {k!r} appears twice")
        seen.add(k)


class MappedFile:
    """A read-only memory map of a whole file, with bounds-checked array views."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as fh:
            fh.seek(0, io.SEEK_END)
            self.size = fh.tell()
            self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None

    @classmethod
    def of_file(cls, fh: Any) -> MappedFile:
        """A map of an open file (which may be closed, even unlinked, afterwards)."""
        mf = cls.__new__(cls)
        fh.seek(0, io.SEEK_END)
        mf.size = fh.tell()
        mf.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if mf.size else None
        return mf

    def bytes(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        return self.mm[offset : offset + length] if self.mm is not None else b""

    def array(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        count = math.prod(shape)
        self._check(offset, count * dtype.itemsize)
        if count == 0:
            return np.empty(shape, dtype)
        return np.frombuffer(self.mm, dtype, count, offset).reshape(shape)  # type: ignore[arg-type]

    def release(self, start: int, end: int) -> None:
        """Drop the pages of ``[start, end)`` from this process (they stay in the page cache)."""
        release_pages(self.mm, start, end)

    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise TensorFileError(
                f"data at bytes {offset}..{offset + length} is past the end of the file "
                f"({self.size} bytes): truncated, or a header lies about offsets"
            )


def release_pages(mm: mmap.mmap | None, start: int, end: int) -> None:
    """``madvise(DONTNEED)`` on the whole pages of ``[start, end)`` so RSS stays bounded."""
    if mm is None or not hasattr(mm, "madvise"):
        return
    page = mmap.PAGESIZE
    lo = (start + page - 1) // page * page
    hi = min(end, len(mm)) // page * page
    if hi > lo:
        with contextlib.suppress(OSError, ValueError):  # best effort
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def read_npy_header(fp: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Read a ``.npy`` header from a stream: (shape, fortran_order, dtype); refuses pickles."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fp, max_header_size=MAX_NPY_HEADER)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(fp, max_header_size=MAX_NPY_HEADER)
    except (ValueError, EOFError, SyntaxError) as exc:
        raise TensorFileError(f"not a valid .npy header: {exc}") from exc
    if dtype.hasobject:
        raise pickle_error(f"dtype {dtype} (Python objects)")
    return tuple(int(d) for d in shape), bool(fortran), dtype


def npy_data_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes of data a ``.npy`` header describes (exact: no int64 overflow); -1 if malformed."""
    return math.prod(shape) * dtype.itemsize if all(d >= 0 for d in shape) else -1


def sample_view(arr: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """A ``read`` function over an in-memory (or memory-mapped) array."""
    if arr.ndim == 0:
        return lambda lo, hi: arr
    return lambda lo, hi: arr[lo:hi]


_SPLIT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]+)$")


def split_member(name: str) -> tuple[str, str] | None:
    """WebDataset naming: ``dir/key.ext.ext2`` -> (``dir/key``, ``ext.ext2``); None if no ext."""
    m = _SPLIT.match(name)
    return (m.group(1), m.group(2)) if m else None


@dataclass
class SampleBatcher:
    """Stacks consecutive samples with the same keys, shapes and dtypes into one chunk."""

    chunk_bytes: int = 0
    """Flush at this many bytes (0: :data:`CHUNK_BYTES` at the time of the flush)."""
    counts: bool = True
    """Whether its chunks account for their samples (False: the reader's own chunks do, and
    these carry only the values of samples those already counted)."""
    ragged: bool = False
    """Samples whose keys and dtypes agree stack even where their shapes differ, a key's
    values then handed on as :class:`~datacheck.formats.Ragged` (False: a new shape starts a
    new chunk)."""
    _start: int = 0
    _rows: int = 0
    _sig: tuple[Any, ...] | None = None
    _lists: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _bytes: int = 0
    _counted: int = 0
    """Samples already accounted for by yielded chunks."""

    def add(self, ordinal: int, sample: dict[str, np.ndarray]) -> Iterator[SampleChunk]:
        """Add sample ``ordinal`` (its numeric arrays by key); yields full chunks."""
        sig = tuple(
            sorted((k, a.ndim if self.ragged else a.shape, a.dtype.str) for k, a in sample.items())
        )
        contiguous = ordinal == self._start + self._rows
        if self._rows and (
            sig != self._sig or not contiguous or self._bytes >= (self.chunk_bytes or CHUNK_BYTES)
        ):
            yield self._flush()
        if not sample:
            return
        if not self._rows:
            self._start, self._sig = ordinal, sig
        for k, a in sample.items():
            self._lists.setdefault(k, []).append(a)
            self._bytes += a.nbytes
        self._rows += 1

    def finish(self, total_samples: int) -> Iterator[SampleChunk]:
        """Flush the last batch, then account for trailing samples without numeric data."""
        if self._rows:
            yield self._flush()
        if self.counts and total_samples > self._counted:
            yield SampleChunk(
                row_offset=self._counted, tensors={}, samples=total_samples - self._counted
            )
            self._counted = total_samples

    def _flush(self) -> SampleChunk:
        tensors, ragged = {}, {}
        for k, v in self._lists.items():
            if len(v) == 1:  # alone: a view with a sample axis (np.stack would copy it)
                tensors[k] = v[0][None]
            elif all(a.shape == v[0].shape for a in v):
                tensors[k] = np.stack(v)
            else:
                sizes = np.fromiter((a.size for a in v), np.int64, len(v))
                starts = np.concatenate(([0], np.cumsum(sizes)))
                values = np.concatenate([a.reshape(-1) for a in v])
                ragged[k] = Ragged(values, starts, tuple(a.shape for a in v))
        end = self._start + self._rows
        samples = end - self._counted if self.counts else 0
        chunk = SampleChunk(row_offset=self._start, tensors=tensors, samples=samples, ragged=ragged)
        self._counted = end
        self._lists, self._rows, self._bytes, self._sig = {}, 0, 0, None
        return chunk


def fixed_width_values(values: list[bytes | None], dtype: np.dtype) -> pa.Array:
    """Serialized scalars (one ``dtype`` value each, as MDS and litdata write them) as one
    Arrow array, decoded in bulk; null where a value is missing or not ``dtype.itemsize``
    bytes long."""
    good = [v for v in values if v is not None and len(v) == dtype.itemsize]
    ok = np.array([v is not None and len(v) == dtype.itemsize for v in values], bool)
    out = np.zeros(len(values), dtype)
    out[ok] = np.frombuffer(b"".join(good), dtype)
    return pa.array(out, mask=~ok)


def utf8_values(values: list[bytes | None]) -> pa.Array:
    """Serialized text as an Arrow string array; null where a value is missing or not UTF-8."""
    return pa.array([_utf8_or_none(v) for v in values], pa.string())


def _utf8_or_none(value: bytes | None) -> str | None:
    try:
        return None if value is None else value.decode("utf-8")
    except UnicodeDecodeError:
        return None
