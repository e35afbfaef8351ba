"""Readers: one module per format family behind one small seam.

A :class:`Format` knows how to recognise a file (extension, magic bytes), how to split it into
work units (a whole file, or a range of Parquet row groups), and how to stream a unit as
:class:`Chunk` objects, each a bounded slice of rows (an Arrow record batch, or a dict of
tensors whose first axis is the sample index).  The scan engine never sees a file handle.

A format owns its I/O both ways: besides the scan's :meth:`Format.open`, exploration reads rows
back through :meth:`Format.tables` and ``clean_copy`` writes a file without its flagged rows
through :meth:`Format.write_without`.  Nothing outside this package branches on format names.

To add a format: subclass :class:`Format`, and call :func:`register` at import time of a module
listed in ``_BUILTIN_MODULES`` (imported lazily, so heavy readers cost nothing until used).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from datacheck.checks._numpy import Hits
    from datacheck.findings import Finding

__all__ = [
    "Chunk",
    "Format",
    "Opened",
    "Ragged",
    "WorkUnit",
    "check_requirements",
    "detect",
    "estimated_work",
    "format_modules",
    "get_format",
    "memory_budget",
    "register",
]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkUnit:
    """A file, or a row-group range of a large file: the unit of parallel work."""

    path: str
    format: str
    size: int
    mtime: float
    part: int = 0
    """Index of this unit within its file (0 for a whole file)."""
    n_parts: int = 1
    row_groups: tuple[int, int] | None = None
    """Half-open row-group range, or None for the whole file."""
    row_offset: int = 0
    """Row index in the file of the unit's first row."""
    partition_columns: tuple[str, ...] = ()
    """Hive partition keys found in the path (``key=value`` folders)."""
    etag: str = ""
    """Object-store ETag / generation of a remote file ("" for local files)."""

    @property
    def key(self) -> str:
        """Stable identity for resume: path, size, mtime (and ETag when remote) and the part."""
        key = f"{self.path}|{self.size}|{self.mtime:.6f}|{self.part}/{self.n_parts}"
        return f"{key}|{self.etag}" if self.etag else key


@dataclass(frozen=True)
class Ragged:
    """The values of one key over consecutive samples whose shapes differ (a JSON document's
    floats, an ``ndarray`` column of varying shape): one flat array, each sample's start in
    it and its shape. Checked per sample as a tensor is, without a chunk per sample."""

    values: np.ndarray
    starts: np.ndarray
    """``int64``, one more than there are samples: sample ``i`` is ``values[starts[i]:starts[i + 1]]``."""
    shapes: tuple[tuple[int, ...], ...]


@dataclass
class Chunk:
    """A bounded slice of a file's rows, starting at ``row_offset``."""

    row_offset: int
    batch: pa.RecordBatch | pa.Table | None = None
    tensors: Mapping[str, np.ndarray] | None = None
    """Tensor key -> array with the sample index on axis 0 (tensor formats)."""
    findings: list[Finding] = field(default_factory=list)
    """What the reader found itself, rows absolute (an image member that does not decode)."""
    hits: list[tuple[str, Hits]] = field(default_factory=list)
    """(key, hits) the reader found itself, rows relative to ``row_offset`` (token ids past
    the vocabulary): vectorised, for findings that may number millions."""
    ragged: Mapping[str, Ragged] = field(default_factory=dict)
    """Key -> values of samples from ``row_offset`` on whose shapes differ (see :class:`Ragged`)."""
    skipped: int = 0
    """Rows of the file this chunk accounts for that hold no values to check (a CSV line
    that does not parse: its ``corrupt`` finding is in ``findings``); counted, not checked."""

    @property
    def num_rows(self) -> int:
        if self.batch is not None:
            return self.batch.num_rows
        if self.tensors:
            return max(len(a) if a.ndim else 1 for a in self.tensors.values())
        return 0


@dataclass
class Opened:
    """An opened unit: its column types and a stream of chunks."""

    columns: dict[str, str]
    """Column / tensor key -> dtype name (Arrow type string for tables)."""
    chunks: Iterator[Chunk]
    expected_rows: int | None = None
    """Rows the file's own metadata claims for this unit, checked against rows read."""
    arrow_schema: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    dialect: dict[str, str] = field(default_factory=dict)
    """How a text file was read, for the report (a CSV's ``delimiter``, ``decimal`` mark)."""


class Format:
    """A file format family.  Subclasses set ``name``/``extensions`` and implement ``open``."""

    name: str = ""
    extensions: tuple[str, ...] = ()
    tabular: bool = True
    requires: tuple[tuple[str, str, str], ...] = ()
    """(module, package, extra) the reader cannot read a file without (Pillow for images): the
    scan checks them before it starts and stops with one usage line naming the extra."""
    work_per_byte: float = 1.0
    """A worker's CPU per byte read, relative to a columnar file (~500 MB/s with its checks):
    a JPEG decodes at ~55 MB/s (10).  The ``auto`` executor weighs a scan's work with it."""

    def sniff(self, head: bytes) -> bool:
        """True if the first bytes of a file identify this format."""
        return False

    def owns(self, path: str) -> bool:
        """True if the file belongs to a dataset folder this format reads (checked before the
        extension: a Hugging Face split's ``data-*.arrow`` is ``hf``, not plain ``arrow``)."""
        return False

    def unread(self, path: str) -> str | None:
        """Why a file of this format is not read, listed under ``ignored`` with that reason
        instead (a dataset whose encoding datacheck cannot decode); None: it is read."""
        return None

    def plan(self, path: str, size: int, unit_bytes: int) -> list[dict[str, Any]]:
        """Split a file into units (kwargs for :class:`WorkUnit`); default: the whole file."""
        return [{}]

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        """Open a unit for reading.  Any exception becomes a ``corrupt`` finding."""
        raise NotImplementedError

    # -- reading rows back and writing them (exploration, clean_copy) --------------------------

    def exact(self, fn: Callable[[Mapping[str, Any]], T], options: Mapping[str, Any]) -> T:
        """Run ``fn(options)`` so that values come back as the file holds them.

        Text formats override this to read integer columns as integers first (exact) and fall
        back to float64 when the file holds a ``nan`` or ``1.5`` there.
        """
        return fn(options)

    def restore(self, table: pa.Table, options: Mapping[str, Any]) -> pa.Table:
        """Values of a table read under :meth:`exact`'s fallback, as the file holds them."""
        return table

    def tables(
        self,
        path: str,
        options: Mapping[str, Any],
        *,
        rows: np.ndarray | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[tuple[int, pa.Table]]:
        """(first row, Arrow table) of the file's chunks, in order.

        A format may skip chunks holding none of ``rows`` (sorted file rows) and may read only
        ``columns``; callers select what they need from what comes back.
        """
        from datacheck.formats import _storage

        if _storage.is_url(path):  # formats whose open() reads through the storage
            size, mtime, _ = _storage.stat(path)
        else:
            st = os.stat(path)
            size, mtime = st.st_size, st.st_mtime
        unit = WorkUnit(path, self.name, size, mtime)
        for chunk in self.open(unit, options).chunks:
            yield chunk.row_offset, chunk_table(chunk)

    def write_without(
        self, path: str, dest: str, drop: np.ndarray, options: Mapping[str, Any]
    ) -> tuple[int, int]:
        """Write ``path`` to ``dest`` in this format without the rows ``drop`` (sorted file
        rows), a chunk at a time; return (rows read, rows written).

        Raises:
            NotImplementedError: this format cannot be rewritten (``clean_copy`` says so).
        """
        raise NotImplementedError(f"clean_copy cannot rewrite {self.name!r} files")


def chunk_table(chunk: Chunk) -> pa.Table:
    """A chunk as an Arrow table (tensor chunks: one list column per key, a row per sample)."""
    import numpy as np
    import pyarrow as pa

    if chunk.batch is not None:
        return pa.table(chunk.batch) if isinstance(chunk.batch, pa.RecordBatch) else chunk.batch
    cols = {k: list(np.asarray(v)) for k, v in (chunk.tensors or {}).items()}
    return pa.table({k: pa.array([np.asarray(x).tolist() for x in v]) for k, v in cols.items()})


def keep_mask(start: int, n: int, drop: np.ndarray) -> pa.Array:
    """A boolean Arrow mask over rows ``start .. start+n``: False at the rows in ``drop``."""
    import numpy as np
    import pyarrow as pa

    lo, hi = np.searchsorted(drop, [start, start + n])
    keep = np.ones(n, dtype=bool)
    keep[drop[lo:hi] - start] = False
    return pa.array(keep)


_REGISTRY: dict[str, Format] = {}
_OWNERS: list[Format] = []
"""Formats that claim files by their folder (:meth:`Format.owns`)."""
_BUILTIN_MODULES = (
    "datacheck.formats._tabular",
    "datacheck.formats._csv",
    "datacheck.formats._json_lines",
    "datacheck.formats._tensor",
    "datacheck.formats._image",
    "datacheck.formats._audio",
    "datacheck.formats._tokens",
    "datacheck.formats._tfrecord",
    "datacheck.formats._mds",
    "datacheck.formats._hf",
    "datacheck.formats._litdata",
)
_loaded = False
_EXTENSIONS: dict[str, Format] = {}
"""Extension -> format, built from the registry on first use (cleared by :func:`register`)."""
_ODD: list[tuple[str, Format]] = []
"""The extensions among them without a leading dot (a plugin's ``train.bin``)."""


def register(fmt: Format) -> Format:
    """Register a format (later registrations win on extension clashes)."""
    _REGISTRY[fmt.name] = fmt
    _EXTENSIONS.clear()
    _ODD.clear()
    if type(fmt).owns is not Format.owns:
        _OWNERS.append(fmt)
    return fmt


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def check_requirements(units: Iterable[WorkUnit]) -> None:
    """Stop before reading when a file's format needs a package that is not installed.

    Without it every such file would be ``corrupt`` (clean images "broken" in a core install):
    the data is not at fault, the install is, so this is a usage error naming the extra.

    Raises:
        UsageError: one line: how many files, an example, the package, both install commands.
    """
    from datacheck._extras import installed, needs
    from datacheck.errors import UsageError

    files: dict[str, dict[str, None]] = {}
    for u in units:
        files.setdefault(u.format, {})[u.path] = None
    for name, paths in files.items():
        fmt = _REGISTRY.get(name)
        for module, package, extra in getattr(fmt, "requires", ()):
            if not installed(module):
                first = next(iter(paths))
                raise UsageError(
                    f"{len(paths):,} {name} file(s) (e.g. {first!r}): reading them "
                    + needs("", package, extra).lstrip()
                )


def formats() -> dict[str, Format]:
    _ensure_loaded()
    return dict(_REGISTRY)


def get_format(name: str) -> Format:
    _ensure_loaded()
    return _REGISTRY[name]


UNIT_WORK_BYTES = 256 << 10
"""A unit's fixed cost (open, footer, result: ~0.5 ms), as bytes of columnar reading."""


def estimated_work(units: Iterable[WorkUnit]) -> int:
    """The work of scanning ``units``, as bytes of columnar reading: what the ``auto``
    executor weighs against starting more workers (many small images are much work)."""
    _ensure_loaded()
    total = 0.0
    for u in units:
        fmt = _REGISTRY.get(u.format)
        factor = fmt.work_per_byte if fmt is not None else 1.0
        total += u.size / max(u.n_parts, 1) * factor + UNIT_WORK_BYTES
    return int(total)


def format_modules(names: Iterable[str]) -> tuple[str, ...]:
    """The modules that registered these formats, outside the built-in ones: what a worker
    process must import to read them (a plugin's format, a test's)."""
    _ensure_loaded()
    mods = {type(_REGISTRY[n]).__module__ for n in names if n in _REGISTRY}
    return tuple(sorted(m for m in mods if not m.startswith("datacheck.") and m != "__main__"))


def main_formats(names: Iterable[str]) -> tuple[Format, ...]:
    """The formats among ``names`` defined in the ``__main__`` module (a script's own): a
    worker that never runs that script gets them by value (:func:`ensure_registered`)."""
    _ensure_loaded()
    return tuple(
        _REGISTRY[n] for n in sorted(names) if type(_REGISTRY.get(n)).__module__ == "__main__"
    )


def ensure_registered(fmts: Iterable[Format]) -> None:
    """Register each of ``fmts`` unless a format of that name is already registered."""
    for fmt in fmts:
        if fmt.name not in _REGISTRY:
            register(fmt)


UNIT_MEMORY = "unit_memory"
"""Reader option: bytes of memory a worker may hold for one unit (0: no bound; absent:
:data:`DEFAULT_UNIT_MEMORY`).  The scan passes ``--unit-memory-mb`` here."""
DEFAULT_UNIT_MEMORY = 2 << 30
"""The bound when none is given: the smallest a worker gets by default."""
MEMORY_SHARE = 4
"""A decoded piece may take this fraction of the unit's memory: the checks hold masks and
copies beside the data."""


def memory_budget(options: Mapping[str, Any]) -> float:
    """Bytes one decoded piece of a unit (a row group, a value, a member) may take before
    allocating it: a :data:`MEMORY_SHARE` of the unit's memory bound (inf when unbounded).

    Readers check what a file *declares* against this before allocating, so a 1 KB file that
    claims 2**40 rows is refused as ``corrupt`` with the reason instead of growing a worker
    until the memory limit kills it.
    """
    unit = options.get(UNIT_MEMORY)
    if unit is None:
        unit = DEFAULT_UNIT_MEMORY
    return unit / MEMORY_SHARE if unit > 0 else float("inf")


def mib(n: float) -> str:
    """Bytes as MiB for messages (``512 MiB``)."""
    return f"{n / (1 << 20):,.0f} MiB"


COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
"""Compression suffixes a text format may carry, and Arrow's codec name for each."""


def base_name(path: str) -> str:
    """The file name without a compression suffix, lower case (``x.TSV.gz`` -> ``x.tsv``)."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1].lower()
    for suffix in COMPRESSIONS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def is_tsv(path: str) -> bool:
    """Tab-separated, by the file's own name (never by a folder's)."""
    return base_name(path).endswith(".tsv")


def _ext_match(path: str) -> Format | None:
    """The format whose extension is the longest suffix of the file's name: a dict lookup per
    dot in the name (a folder of 20,000 JPEGs is 20,000 calls)."""
    if not _EXTENSIONS:
        for fmt in _REGISTRY.values():
            _EXTENSIONS.update(dict.fromkeys(fmt.extensions, fmt))
        _ODD.extend((e, f) for e, f in _EXTENSIONS.items() if not e.startswith("."))
    lower = base_name(path)
    i = lower.find(".")
    while i != -1:  # the first dot gives the longest suffix
        found = _EXTENSIONS.get(lower[i:])
        if found is not None:
            return _longer_odd(lower, len(lower) - i) or found
        i = lower.find(".", i + 1)
    return _longer_odd(lower, 0)


def _longer_odd(lower: str, than: int) -> Format | None:
    """A plugin's extension without a leading dot (``train.bin``) longer than ``than``."""
    best: tuple[int, Format] | None = None
    for ext, fmt in _ODD:
        if len(ext) > max(than, best[0] if best else 0) and lower.endswith(ext):
            best = (len(ext), fmt)
    return None if best is None else best[1]


def detect(path: str, head: bytes) -> Format | None:
    """The format of a file: by extension, else by magic bytes; None if unknown."""
    _ensure_loaded()
    for owner in _OWNERS:
        if owner.owns(path):
            return owner
    fmt = _ext_match(path)
    if fmt is not None:
        return fmt
    for fmt in _REGISTRY.values():
        if fmt.sniff(head):
            return fmt
    return None
