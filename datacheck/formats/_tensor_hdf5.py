"""HDF5 files (``h5py``, written by h5py, PyTables, pandas ``to_hdf``, netCDF4, ...).

Every dataset is read a few MiB of samples at a time; its key (the manifest ``column``) is its
path in the file (``train/images``).  What a dataset holds decides how it is read:

* numbers (bool, int, uint, float, complex; any byte order): as they are;
* records (a compound type: a PyTables ``Table``, an h5py structured dataset): every numeric
  field, nested ones included, under ``path.field`` (``table.info.x``), read through a memory
  type holding those fields only (HDF5 converts by field name: strings and other members are
  never copied out);
* types h5py has no NumPy type for: floats (IEEE quad precision) read as float64 through
  HDF5's own conversion; PyTables' ``Time32``/``Time64`` (``H5T_TIME``: integer seconds, which
  hold no NaN) read raw, which proves their bytes decode; any other type listed, not read,
  with the reason as its dtype;
* ragged rows (variable-length numbers: a PyTables ``VLArray``): each row checked as a list
  column's row is (``_tensor_hdf5_ragged``);
* strings, opaque bytes and references: listed, not read; datasets stored in external files
  and virtual datasets (which point at other paths): listed, never read.

A dataset compressed with a filter h5py does not build in (PyTables' blosc, blosc2 and bzip2;
lz4, zstd, ...) is read through ``hdf5plugin`` when it is installed (imported then only).  One
that still cannot be decoded makes the file ``corrupt`` with h5py's own reason, once the rest
of the file was checked.  Rows past a dataset's last written chunk are never read: one finding
per check from the fill value they all read as.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datacheck.findings import Finding
from datacheck.formats import Chunk, Format, Opened, WorkUnit, memory_budget, mib
from datacheck.formats._tensor_common import (
    CHUNK_BYTES,
    NUMERIC_KINDS,
    SampleChunk,
    Source,
    TensorFileError,
    field_of,
    opened,
    record_leaves,
    record_sources,
    sample_view,
)
from datacheck.formats._tensor_hdf5_ragged import Ragged, ragged_base, with_ragged

__all__ = ["Hdf5Format"]

_MAX_CHUNKS_LISTED = 1 << 20
"""Datasets with more written chunks than this are read as usual (listing them costs)."""


@dataclass
class _Plan:
    """How one dataset is read: its memory dtype, the HDF5 memory type if not h5py's own
    (None), and a label when it is listed without being read."""

    name: str
    shape: tuple[int, ...]
    mem: np.dtype | None
    mtype: Any = None
    label: str = ""
    """The dtype shown for the dataset; set when ``mem`` is None (not read) or a conversion."""
    raw: bool = False
    """Read to prove its bytes decode, not checked (integer time stamps)."""
    ragged: np.dtype | None = None
    """Rows of variable length of this numeric type (read as a list column)."""


def _h5() -> Any:
    import h5py

    return h5py


def _plan(name: str, ds: Any) -> _Plan:
    """How to read ``ds`` (never raises for a type h5py cannot map: that is a label)."""
    if ds.shape is None:  # a null dataspace (h5py.Empty): an attribute-like marker, no values
        return _Plan(name, (), None, label="empty (a null dataspace: no values)")
    shape = tuple(int(d) for d in ds.shape)
    if bool(getattr(ds, "external", None)) or bool(getattr(ds, "is_virtual", False)):
        return _Plan(name, shape, None, label="external (not read)")
    try:
        dt = ds.dtype
    except (TypeError, ValueError) as exc:  # no NumPy type: quad floats, H5T_TIME, ...
        return _unmapped(name, shape, ds.id.get_type(), exc)
    if dt.names is not None:
        return _Plan(name, shape, _numeric_only(dt), label=str(dt)[:200])
    if (base := ragged_base(dt, shape)) is not None:
        return _Plan(name, shape, None, label=f"vlen {base.name}", ragged=base)
    if dt.kind not in NUMERIC_KINDS:
        return _Plan(name, shape, None, label=_listed_label(dt))
    return _Plan(name, shape, dt)


def _listed_label(dt: np.dtype) -> str:
    """The dtype shown for a dataset listed, not read (strings, references, ragged rows)."""
    h5py = _h5()
    if h5py.check_vlen_dtype(dt) is not None and h5py.check_string_dtype(dt) is None:
        return f"{dt} (rows of variable length: not read)"
    if h5py.check_string_dtype(dt) is not None:
        return "string"
    if h5py.check_ref_dtype(dt) is not None:
        return "reference"
    return str(dt)


def _numeric_only(dt: np.dtype) -> np.dtype | None:
    """A record dtype reduced to its numeric fields (nested records too), or None if it has
    none: the memory type HDF5 converts the records to, by field name."""
    fields: list[tuple[Any, ...]] = []
    for name in dt.names or ():
        sub = dt.fields[name][0]  # type: ignore[index]
        if sub.base.names is not None:
            inner = _numeric_only(sub.base)
            if inner is not None:
                fields.append((name, inner, sub.shape) if sub.shape else (name, inner))
        elif sub.base.kind in NUMERIC_KINDS:
            fields.append((name, sub))
    return np.dtype(fields) if fields else None


def _unmapped(name: str, shape: tuple[int, ...], tid: Any, exc: BaseException) -> _Plan:
    h5py = _h5()
    cls = tid.get_class()
    if cls == h5py.h5t.FLOAT:  # HDF5 converts any float it can describe to a double
        label = f"float{8 * tid.get_size()} (read as float64)"
        return _Plan(name, shape, np.dtype("f8"), h5py.h5t.NATIVE_DOUBLE, label)
    if cls == h5py.h5t.COMPOUND and (numeric := _mappable(tid)) is not None:
        return _Plan(name, shape, numeric)  # HDF5 converts the members that map, by name
    if cls in (h5py.h5t.TIME, h5py.h5t.COMPOUND):  # read as its own bytes: no conversion
        size = tid.get_size()
        kind = "time" if cls == h5py.h5t.TIME else "compound"
        label = f"{kind}{8 * size} (read, not checked: integer time stamps)"
        return _Plan(name, shape, np.dtype(f"V{size}"), tid, label, raw=True)
    return _Plan(name, shape, None, label=f"not read: {' '.join(str(exc).split())}"[:200])


def _mappable(tid: Any) -> np.dtype | None:
    """The numeric members of a compound type h5py cannot map whole (one of its members has
    no NumPy type: PyTables' ``Time64Col``), nested compounds recursed; None if none."""
    h5py = _h5()
    fields: list[tuple[str, np.dtype]] = []
    for i in range(tid.get_nmembers()):
        name = tid.get_member_name(i).decode("utf-8", "replace")
        member = tid.get_member_type(i)
        try:
            dt = member.dtype
        except (TypeError, ValueError):
            sub = _mappable(member) if member.get_class() == h5py.h5t.COMPOUND else None
        else:
            sub = _numeric_only(dt) if dt.names is not None else dt
            numeric = sub is not None and (sub.names is not None or sub.base.kind in NUMERIC_KINDS)
            sub = sub if numeric else None
        if sub is not None:
            fields.append((name, sub))
    return np.dtype(fields) if fields else None


def _reader(ds: Any, plan: _Plan) -> Any:
    """``read(lo, hi)``: samples ``[lo, hi)`` as an array of ``plan.mem`` (the whole value for
    a 0-d dataset), through HDF5's conversion to the plan's memory type."""
    h5py = _h5()
    assert plan.mem is not None
    mem, mtype = plan.mem, plan.mtype

    def read(lo: int, hi: int) -> np.ndarray:
        shape = plan.shape
        if not shape:
            buf = np.empty((), dtype=mem)
            mspace = h5py.h5s.create(h5py.h5s.SCALAR)
            fspace = ds.id.get_space()
        else:
            buf = np.empty((hi - lo, *shape[1:]), dtype=mem)
            if buf.size == 0:
                return buf
            mspace = h5py.h5s.create_simple(buf.shape)
            fspace = ds.id.get_space()
            fspace.select_hyperslab((lo, *[0] * (len(shape) - 1)), buf.shape)
        ds.id.read(mspace, fspace, buf, mtype=mtype)
        return buf

    return read


def _sources(plan: _Plan, ds: Any) -> list[Source]:
    """The dataset's :class:`Source` objects: one, or one per numeric field of its records."""
    mem = plan.mem
    if mem is None:
        return [Source(plan.name, plan.shape, plan.label, 1, None)]
    read = _reader(ds, plan)
    if plan.raw:
        return [Source(plan.name, plan.shape, plan.label, mem.itemsize, _discard(read))]
    if mem.names is not None and not plan.shape:  # one record: one sample
        return record_sources(plan.name, (1,), mem, lambda lo, hi: read(0, 1)[None])
    if mem.names is not None:
        return record_sources(plan.name, plan.shape, mem, read)
    dtype = plan.label or mem.name
    return [Source(plan.name, plan.shape, dtype, mem.itemsize, read)]


def _discard(read: Any) -> Any:
    """Reads that prove the bytes decode, handing the checks no values."""

    def checked(lo: int, hi: int) -> np.ndarray:
        read(lo, hi)
        return np.empty((max(hi - lo, 0), 0), dtype=np.uint8)

    return checked


def _plugins() -> bool:
    """Register hdf5plugin's filters with h5py's HDF5 (once); False if it is not installed."""
    try:
        import hdf5plugin  # noqa: F401 - importing it registers the filters
    except ImportError:
        return False
    return True


def _missing_filters(ds: Any) -> list[str]:
    """The filters of a dataset's pipeline this HDF5 library cannot run: ``name (id)``."""
    h5py = _h5()
    plist = ds.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        code, _, _, name = plist.get_filter(i)
        if not h5py.h5z.filter_avail(code):
            out.append(f"{name.decode('utf-8', 'replace') or 'unnamed'} ({code})")
    return out


def _undecodable(ds: Any, plan: _Plan) -> tuple[str, str] | None:
    """(the filters, h5py's error) for a dataset behind a filter h5py cannot run, read on its
    first sample; None when it reads (hdf5plugin had the filter, or nothing was written)."""
    missing = _missing_filters(ds)
    if not missing or plan.mem is None:
        return None
    if _plugins():
        missing = _missing_filters(ds)
        if not missing:
            return None
    try:
        _reader(ds, plan)(0, min(1, plan.shape[0]) if plan.shape else 1)
    except (OSError, ValueError, RuntimeError) as exc:
        return ", ".join(missing), " ".join(str(exc).split())
    return None


def _undecodable_error(found: list[tuple[str, str, str]]) -> TensorFileError:
    """The file's error for its datasets that cannot be decoded: (name, filters, h5py's)."""
    names = ", ".join(repr(n) for n, _, _ in found[:3]) + (" ..." if len(found) > 3 else "")
    filters = ", ".join(sorted({f for _, f, _ in found}))
    fix = (
        "no HDF5 plugin installed here provides it"
        if _plugins()
        else "pip install hdf5plugin adds blosc, blosc2, bzip2, lz4, zstd and more"
    )
    return TensorFileError(
        f"{len(found)} dataset(s) ({names}) compressed with HDF5 filter {filters}, which h5py "
        f"cannot decode here ({fix}); h5py: {found[0][2]}"
    )


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


def _fill_value(ds: Any, plan: _Plan) -> np.ndarray:
    """The value every never-written element of ``ds`` reads as, in the plan's memory type."""
    assert plan.mem is not None
    fill = np.zeros((), dtype=plan.mem)
    with contextlib.suppress(OSError, ValueError, TypeError):  # none defined: zeros, as read
        ds.id.get_create_plist().get_fill_value(fill)
    return fill


def _fill_findings(
    file_path: str, plan: _Plan, ds: Any, start: int, tensors: Any
) -> tuple[list[Source], list[Finding]]:
    """One finding per failed check for the rows of a dataset from ``start`` on, which were
    never written, computed from its fill value (what every element there reads as) instead
    of materialising 4 TiB of it; the rules of the schema's ``tensors:`` section if any.
    Returns the dataset's sources as listed (not read) beside the findings."""
    from datacheck.checks._rules import default_rules
    from datacheck.checks._tensor import sample_hits

    fill = _fill_value(ds, plan)
    where = "never written" if start == 0 else f"rows {start}.. never written"
    listed = [Source(s.key, s.shape, s.dtype, s.itemsize, None) for s in _sources(plan, ds)]
    if plan.raw or plan.mem is None:
        return listed, []
    leaves = [((), plan.mem)] if plan.mem.names is None else list(record_leaves(plan.mem))
    out: list[Finding] = []
    for path, leaf in leaves:
        key = ".".join((plan.name, *path))
        value = np.asarray(field_of(fill, path))
        if value.dtype.kind == "c":
            value = np.stack((value.real, value.imag), axis=-1)
        if value.dtype.kind not in "iuf":
            continue
        n = (plan.shape[0] - start) * math.prod(plan.shape[1:]) * math.prod(leaf.shape)
        is_float = value.dtype.kind == "f"
        rules = tensors.rules_for(key, is_float) if tensors else default_rules(is_float, True)
        shown = value.item() if value.size == 1 else value.tolist()
        why = f"{where}: all {n} values are the fill value {shown!r}"
        out.extend(
            Finding(file_path, h.check, h.severity, why, key, None, n)
            for h in sample_hits(value.reshape(1, -1), rules)
        )
    return listed, out


def _with_fill_rows(base: Opened, unwritten: list[Source], findings: list[Finding]) -> Opened:
    """``base`` plus the rows only never-written datasets have, as one chunk carrying their
    findings (no values read: the rows are counted, the findings say every value)."""
    read = base.expected_rows or 0
    total = max(read, *(s.rows for s in unwritten))

    def chunks() -> Iterator[Chunk]:
        yield from base.chunks
        yield SampleChunk(row_offset=read, tensors={}, samples=total - read, findings=findings)

    return Opened(base.columns, chunks(), expected_rows=total, extra=base.extra)


def _then_fail(base: Opened, error: Exception) -> Opened:
    """``base``, whose chunks end in ``error`` (once every readable dataset was checked)."""

    def chunks() -> Iterator[Chunk]:
        yield from base.chunks
        raise error

    return Opened(base.columns, chunks(), expected_rows=None, extra=base.extra)


def _read_at_once(ds: Any) -> bool:
    """True when the whole dataset comes in one slice of samples (its bytes fit a chunk of
    the scan), so no chunk is decoded twice: PyTables' blosc2 declares chunks of ~500 MB
    for a 40-row table, and a cache sized for one held it beside HDF5's own buffer."""
    return math.prod(ds.shape) * ds.id.get_type().get_size() <= CHUNK_BYTES // 4


def _chunk_cached(fh: Any, name: str, budget: float) -> Any:
    """``ds`` reopened with a chunk cache that holds a row of its chunks (all the chunks one
    slice of samples crosses): HDF5's default 1 MiB cache re-inflated a 256 MiB chunk for
    every few MiB of samples read.  A chunk past ``budget`` decoded is refused first."""
    h5py = _h5()
    ds = fh[name]
    chunks, shape = ds.chunks, ds.shape
    if chunks is None or not shape:
        return ds
    chunk = math.prod(chunks) * ds.id.get_type().get_size()
    if chunk > budget:
        raise TensorFileError(
            f"dataset {name!r}: chunks of {chunk} bytes decoded, over the {mib(budget)} a unit "
            "may decode at once (raise --unit-memory-mb to read it)"
        )
    across = math.prod(-(-n // c) for n, c in zip(shape[1:], chunks[1:], strict=True))
    if chunk * across <= 1 << 20 or _read_at_once(ds):
        return ds  # the default cache holds it, or each chunk is decoded once anyway
    del ds  # closed, so that the dataset opens again with its own cache
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(
        max(521, 8 * across + 1), int(min(chunk * across, budget)) + (1 << 20), 1.0
    )
    return h5py.Dataset(h5py.h5d.open(fh.id, name.encode(), dapl))


@dataclass
class _FileRead:
    """What :meth:`Hdf5Format.open` gathers over a file's datasets."""

    sources: list[Source]
    unwritten: list[Source]
    findings: list[Finding]
    undecodable: list[tuple[str, str, str]]
    """(dataset, filters, h5py's error) of the datasets no filter here decodes."""
    ragged: list[Ragged]


def _dataset(
    fh: Any, name: str, unit: WorkUnit, options: Mapping[str, Any], acc: _FileRead
) -> None:
    """Plan one dataset and add its sources (or why it cannot be read) to ``acc``."""
    ds = fh[name]
    plan = _plan(name, ds)
    if plan.ragged is not None:
        acc.ragged.append(Ragged(name, plan.shape[0], plan.ragged))
        acc.sources.append(Source(name, plan.shape, plan.label, plan.ragged.itemsize, None))
        return
    if plan.mem is not None and (why := _undecodable(ds, plan)) is not None:
        acc.undecodable.append((name, *why))
        acc.sources.append(
            Source(name, plan.shape, f"{plan.label or plan.mem} (not read)", 1, None)
        )
        return
    written = _written_rows(ds) if plan.mem is not None else None
    if written is not None:  # the rows past it: one finding per check, not read
        listed, found = _fill_findings(unit.path, plan, ds, written, options.get("tensors"))
        acc.unwritten.extend(listed)
        acc.findings.extend(found)
        if written == 0:
            acc.sources.extend(listed)
            return
    if plan.mem is None:
        acc.sources.extend(_sources(plan, ds))
        return
    del ds  # closed: read through a dataset opened with its own chunk cache
    cached = _chunk_cached(fh, name, memory_budget(options))
    if written is not None:
        plan.shape = (written, *plan.shape[1:])
    if not plan.shape and plan.mem.names is None and not plan.raw:  # a scalar: read it now
        value = _reader(cached, plan)(0, 1)
        acc.sources.append(Source(name, (), plan.label or plan.mem.name, 1, sample_view(value)))
        return
    acc.sources.extend(_sources(plan, cached))


class Hdf5Format(Format):
    name = "hdf5"
    requires = (("h5py", "h5py", "torch"),)
    extensions = (".h5", ".hdf5", ".hdf")
    tabular = False

    def sniff(self, head: bytes) -> bool:
        return head[:8] == b"\x89HDF\r\n\x1a\n"

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        h5py = _h5()
        fh = h5py.File(unit.path, "r")
        names: list[str] = []

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                names.append(name)  # not the object: a dataset left open keeps its cache

        fh.visititems(visit)
        acc = _FileRead([], [], [], [], [])
        try:
            for name in names:
                _dataset(fh, name, unit, options, acc)
        except BaseException:
            fh.close()
            raise
        base = with_ragged(opened(acc.sources), fh, acc.ragged)  # closes the file at the end
        if acc.unwritten:
            base.extra["shapes"].update({s.key: s.shape for s in acc.unwritten})
            base = _with_fill_rows(base, acc.unwritten, acc.findings)
        if acc.undecodable:
            return _then_fail(base, _undecodable_error(acc.undecodable))
        return base
