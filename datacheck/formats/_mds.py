"""MosaicML Streaming (MDS) shards: ``shard.NNNNN.mds`` beside their ``index.json``.

Read without the ``streaming`` package, against the layout ``streaming.MDSWriter`` writes
(mosaicml-streaming 0.13, ``streaming/base/format/mds/writer.py``; its ``StreamingDataset`` is
the oracle in the tests): ``uint32 num_samples``, ``uint32 offsets[num_samples + 1]`` (byte
offsets of each sample in the file), the writer's config as JSON (``json.dumps`` of the
shard's column names, encodings and sizes, compression, hashes, size limit, format and version:
what its ``index.json`` entry says too), then the samples; each sample starts with a ``uint32``
size per variable-size column, then the columns in the order the index names them.  Streaming
itself never reads the config block: it seeks to ``offsets[i]``.

Checked: the index's byte count and hashes of the shard (where present, every one listed:
hashlib's ``sha1``, ``md5``, ... and xxhash's ``xxh64``, ...), the sample count, offsets that
start after the table, rise and end at the end of the file, and every sample's column sizes (any
of these wrong -> ``corrupt``).  A config block that is not the writer's JSON, or that names
other columns than ``index.json``, is a warning (streaming reads the samples regardless); a
shard without ``index.json`` is read with the columns its config names.  Every column value is
then read as streaming would decode it (:mod:`._mds_values`): one that would not decode is
``corrupt`` at the sample's row, float values are checked for NaN/Inf, images fully decoded;
``pkl`` values are parsed, never unpickled.  The fixed-size numeric columns are handed on as
the chunk's tensors instead (every check and the ``tensors:`` schema read them).  Compressed shards (``.mds.zstd``, ``.mds.gz``, ...)
and shards on object stores are first copied (decompressed) into a temporary file, bounded and
hash-checked (:mod:`._mds_zip`).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Format, Opened, WorkUnit, _storage, register
from datacheck.formats._mds_values import SCALARS, decode_sample, value_check
from datacheck.formats._mds_zip import CODECS, Digests, materialize_shard, shard_codec
from datacheck.formats._tensor_common import (
    MappedFile,
    SampleBatcher,
    SampleChunk,
    TensorFileError,
    fixed_width_values,
    utf8_values,
)
from datacheck.schema._media import ImageRules, media_rules

__all__ = ["MdsFormat", "is_mds_index", "is_shard_name", "mds_index_entry"]

MAX_INDEX_BYTES = 64 << 20
MAX_CONFIG_BYTES = 16 << 20
"""A config block past this is not parsed (MDSWriter's are a few hundred bytes)."""
SAMPLES_PER_CHUNK = 1024
_TEXT = ("str", "json", "str_int", "str_float", "str_decimal")
_EXTENSIONS = (".mds", *(f".mds.{codec}" for codec in CODECS))


def is_shard_name(name: str) -> bool:
    """An MDS shard's file name, compressed or not (``shard.00000.mds``, ``....mds.zstd``)."""
    return name.endswith(_EXTENSIONS)


def _split(path: str) -> tuple[str, str]:
    return posixpath.split(path) if _storage.is_url(path) else os.path.split(path)


MERGED_LEVELS = 4
"""How many folders above a shard an ``index.json`` made by ``merge_index`` is looked for."""


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if _storage.is_url(folder) else os.path.join(folder, name)


def _read_index(path: str) -> Any:
    return _storage.json_document(path, MAX_INDEX_BYTES)


def _entries(doc: Any) -> Iterator[dict[str, Any]]:
    shards = doc.get("shards") if isinstance(doc, dict) else None
    yield from (s for s in shards if isinstance(s, dict)) if isinstance(shards, list) else ()


def _basenames(entry: Mapping[str, Any]) -> Iterator[str]:
    for key in ("raw_data", "zip_data"):
        data = entry.get(key)
        if isinstance(data, dict) and isinstance(data.get("basename"), str):
            yield data["basename"]


def is_mds_index(path: str) -> bool:
    """The ``index.json`` beside MDS shards (on an object store: one whose entries name
    shards): the shards' reader uses it; it is not data."""
    folder, name = _split(path)
    if name != "index.json":
        return False
    if not _storage.is_url(path) and any(map(is_shard_name, os.listdir(folder or "."))):
        return True
    # streaming's merge_index: the entries name shards in folders below it (``p0/shard...``)
    return any(is_shard_name(n) for e in _entries(_read_index(path)) for n in _basenames(e))


def mds_index_entry(shard_path: str) -> dict[str, Any] | None:
    """The ``index.json`` entry of a shard, found by its ``raw_data`` or (compressed)
    ``zip_data`` basename: in the index beside it, else in one up to
    :data:`MERGED_LEVELS` folders above it that names it by its path from there (what
    ``merge_index`` writes); None when no index names it."""
    folder, name = _split(shard_path)
    for _ in range(MERGED_LEVELS + 1):
        doc = _read_index(_join(folder, "index.json"))
        entry = next((e for e in _entries(doc) if name in _basenames(e)), None)
        if entry is not None or (doc is not None and name == _split(shard_path)[1]):
            return entry
        folder, up = _split(folder)
        if not up:
            return None
        name = f"{up}/{name}"
    return None


def _check_hashes(mf: MappedFile, raw: Mapping[str, Any]) -> None:
    if isinstance(raw.get("bytes"), int) and raw["bytes"] != mf.size:
        raise TensorFileError(f"index.json says {raw['bytes']} bytes, the shard holds {mf.size}")
    digests = Digests("shard", raw)
    if digests.want:
        digests.update(mf.mm or b"")
        digests.verify()


def _offsets(mf: MappedFile, expected: Any) -> np.ndarray:
    """The offset table: ``n + 1`` offsets from after the table (and the config block) to the
    end of the file, never falling."""
    if mf.size < 4:
        raise TensorFileError(f"truncated: {mf.size} bytes, no sample count")
    n = int(mf.array(0, np.dtype("<u4"), (1,))[0])
    if isinstance(expected, int) and n != expected:
        raise TensorFileError(f"the shard holds {n} samples, index.json says {expected}")
    offsets = mf.array(4, np.dtype("<u4"), (n + 1,)).astype(np.int64)  # bounds-checked
    start = 4 + 4 * (n + 1)
    if offsets[0] < start or offsets[-1] != mf.size or np.any(np.diff(offsets) < 0):
        raise TensorFileError(
            f"sample offsets run {int(offsets[0])}..{int(offsets[-1])}, expected {start} (or "
            f"past it, after the config block)..{mf.size} rising: the offset table is damaged"
        )
    return offsets


def _config(mf: MappedFile, offsets: np.ndarray) -> tuple[dict[str, Any] | None, str | None]:
    """The writer's config block between the offset table and the first sample: (its JSON
    object, None), (None, None) when there is none, or (None, what is wrong with it)."""
    start = 4 + 4 * len(offsets)
    size = int(offsets[0]) - start
    if size == 0:
        return None, None
    where = f"the config block (bytes {start}..{start + size})"
    if size > MAX_CONFIG_BYTES:
        return None, f"{where} is {size} bytes, past {MAX_CONFIG_BYTES}: not read"
    try:
        config = json.loads(mf.bytes(start, size))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the C stack
        return None, f"{where} is not the JSON MDSWriter writes ({str(exc)[:60]}): damaged"
    if not isinstance(config, dict):
        return None, f"{where} is a JSON {type(config).__name__}, not MDSWriter's object"
    return config, None


def _layout(entry: Mapping[str, Any] | None, config: dict[str, Any] | None) -> _Columns | None:
    """The columns samples are split by: ``index.json``'s (what streaming reads them with),
    else the shard's own config block's (None: neither names them)."""
    if entry is not None:
        return _Columns(entry)
    if config is None or "column_names" not in config:
        return None
    try:
        return _Columns(config)
    except TensorFileError:
        return None


def _config_findings(
    path: str, cols: _Columns | None, config: dict[str, Any] | None, problem: str | None
) -> list[Finding]:
    """Warnings about the config block: streaming never reads it, so none of them stops the
    samples from being read (and checked)."""
    if problem is None and config is not None and cols is not None:
        own = tuple(config.get(k) for k in ("column_names", "column_encodings", "column_sizes"))
        if own != (cols.names, cols.encodings, cols.sizes):
            problem = (
                f"the shard's config block names columns {_excerpt(own[0])} "
                f"{_excerpt(own[1])}, index.json {_excerpt(cols.names)} "
                f"{_excerpt(cols.encodings)}: the shard may belong to another dataset "
                "(its samples are read with index.json's columns, as streaming reads them)"
            )
    if problem is None:
        return []
    return [Finding(path, "corrupt", Severity.WARNING, problem, None, None)]


def _is_size(value: Any) -> bool:
    """A fixed column size (a byte count) or None (a variable-size column)."""
    return value is None or (type(value) is int and 0 <= value < 1 << 32)


def _listed(entry: Mapping[str, Any], key: str, valid: Callable[[Any], bool]) -> list[Any]:
    """``entry[key]``, a list whose every item is ``valid`` (else corrupt, naming the item)."""
    values = entry.get(key)
    if values is None:
        return []
    if not isinstance(values, list):
        raise TensorFileError(f"index.json: {key} is {type(values).__name__}, not a list")
    for i, v in enumerate(values):
        if not valid(v):
            raise TensorFileError(f"index.json: {key}[{i}] is {_excerpt(v)}: not valid there")
    return values


def _excerpt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Columns:
    """The column layout of the index entry: names, encodings, fixed sizes (None: variable)."""

    def __init__(self, entry: Mapping[str, Any]) -> None:
        self.names: list[str] = _listed(entry, "column_names", lambda v: isinstance(v, str))
        self.encodings: list[str] = _listed(entry, "column_encodings", lambda v: isinstance(v, str))
        self.sizes: list[int | None] = _listed(entry, "column_sizes", _is_size)
        if not len(self.names) == len(self.encodings) == len(self.sizes):
            raise TensorFileError("index.json: column names, encodings and sizes differ in length")
        self.n_var = sum(s is None for s in self.sizes)

    def split(self, sample: bytes) -> list[bytes]:
        """A sample's column values; ValueError when its sizes do not add up."""
        if len(sample) < 4 * self.n_var:
            raise ValueError(f"{len(sample)} bytes, shorter than its size header")
        var = iter(np.frombuffer(sample, "<u4", self.n_var).tolist())
        pos, out = 4 * self.n_var, []
        for size in self.sizes:
            n = next(var) if size is None else size
            out.append(sample[pos : pos + n])
            pos += n
        if pos != len(sample):
            raise ValueError(f"column sizes add up to {pos} bytes, the sample has {len(sample)}")
        return out


def _scalar_columns(cols: _Columns) -> dict[int, np.dtype]:
    """The fixed-size numeric columns (``int``, ``float32``, ...): handed on as tensors, so
    every check (``extreme``, a schema's value checks) reads them as in any other format."""
    out = {}
    for i, (enc, size) in enumerate(zip(cols.encodings, cols.sizes, strict=True)):
        if enc in SCALARS and size == np.dtype(SCALARS[enc]).itemsize:
            out[i] = np.dtype(SCALARS[enc])
    return out


class _Run:
    """Consecutive samples' scalar values, gathered as bytes and stacked into one chunk."""

    def __init__(self, cols: _Columns, scalars: dict[int, np.dtype]) -> None:
        self.cols, self.scalars = cols, scalars
        self.start, self.counted, self.rows = 0, 0, 0
        self.parts: dict[int, list[bytes]] = {i: [] for i in scalars}

    def add(self, row: int, values: list[bytes]) -> None:
        if not self.rows:
            self.start = row
        for i in self.scalars:
            self.parts[i].append(values[i])
        self.rows += 1

    def flush(self, end: int, found: list[Finding]) -> SampleChunk:
        """The chunk of the run, accounting for the samples up to ``end``."""
        tensors = {
            self.cols.names[i]: np.frombuffer(b"".join(self.parts[i]), dtype)
            for i, dtype in self.scalars.items()
        }
        start = self.start if self.rows else self.counted
        chunk = SampleChunk(
            row_offset=start, tensors=tensors, samples=end - self.counted, findings=found
        )
        self.counted, self.rows = end, 0
        self.parts = {i: [] for i in self.scalars}
        return chunk


def _samples(shard: _Shard, path: str, rules: ImageRules) -> Iterator[SampleChunk]:
    mf, offsets, cols = shard.mf, shard.offsets, shard.cols
    n = len(offsets) - 1
    scalars = _scalar_columns(cols) if cols else {}
    checks = (
        [
            (i, cols.names[i], c)
            for i, e in enumerate(cols.encodings)
            if i not in scalars and (c := value_check(e, rules))
        ]
        if cols
        else []
    )
    values_of = SampleBatcher(counts=False, ragged=True)  # the other columns' numbers, as tensors
    found: list[Finding] = list(shard.findings)
    run = _Run(cols, scalars) if cols else None
    for lo in range(0, max(n, 1), SAMPLES_PER_CHUNK):
        hi = min(n, lo + SAMPLES_PER_CHUNK)
        if cols is None or run is None:  # no columns named anywhere: only the offsets to check
            yield SampleChunk(row_offset=lo, tensors={}, samples=hi - lo, findings=found)
            found = []
            continue
        for row in range(lo, hi):
            sample = mf.bytes(int(offsets[row]), int(offsets[row + 1] - offsets[row]))
            try:
                values = cols.split(sample)
            except ValueError as exc:
                found.append(Finding(path, "corrupt", Severity.ERROR, str(exc), None, row))
                if run.rows:  # the run stops before the sample that does not split
                    yield run.flush(row, [])
                continue
            run.add(row, values)
            if numbers := decode_sample(path, row, checks, values, found):
                yield from values_of.add(row, numbers)
        yield run.flush(hi, found)
        found = []
    yield from values_of.finish(n)


class _Shard:
    """An opened shard: its bytes, offsets, the columns its samples are split by and what the
    config block says about it."""

    def __init__(self, path: str) -> None:
        entry = mds_index_entry(path)
        self.mf = _mapped(path, entry)
        self.offsets = _offsets(self.mf, (entry or {}).get("samples"))
        config, problem = _config(self.mf, self.offsets)
        self.cols = _layout(entry, config)
        self.findings = _config_findings(path, self.cols, config, problem)


def _mapped(path: str, entry: Mapping[str, Any] | None) -> MappedFile:
    codec = shard_codec(path, entry)
    if codec is not None or _storage.is_url(path):  # sizes, hashes checked on the way
        return materialize_shard(path, codec, entry)
    mf = MappedFile(path)
    if entry is not None:
        _check_hashes(mf, entry.get("raw_data") or {})
    return mf


def _arrow_column(enc: str, values: list[bytes | None]) -> pa.Array:
    """Values of one column as Arrow: scalars as numbers, text encodings as strings (null where
    not UTF-8), everything else as the bytes the shard holds."""
    name = enc.partition(":")[0]
    if name in SCALARS and not enc.count(":"):
        return fixed_width_values(values, np.dtype(SCALARS[name]))
    if name in _TEXT:
        return utf8_values(values)
    return pa.array(values, pa.binary())


class MdsFormat(Format):
    name = "mds"
    extensions = _EXTENSIONS
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        shard = _Shard(unit.path)
        cols = shard.cols
        columns = dict(zip(cols.names, cols.encodings, strict=True)) if cols else {}
        chunks = _samples(shard, unit.path, media_rules(options).images)
        return Opened(columns, chunks, expected_rows=len(shard.offsets) - 1)

    def tables(
        self,
        path: str,
        options: Mapping[str, Any],
        *,
        rows: np.ndarray | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[tuple[int, pa.Table]]:
        """The samples' values, :data:`SAMPLES_PER_CHUNK` at a time (only chunks holding one
        of ``rows``): scalars as numbers, ``str``/``json``/``str_*`` as text, the rest (images,
        arrays, pickles, bytes) as the bytes the shard holds; a sample whose sizes do not add up
        is all null.  Where neither ``index.json`` nor the shard's config block names columns:
        one ``sample`` column of each sample's bytes."""
        shard = _Shard(path)
        mf, offsets, cols = shard.mf, shard.offsets, shard.cols
        n = len(offsets) - 1
        starts: Iterable[int] = range(0, n, SAMPLES_PER_CHUNK)
        if rows is not None:
            starts = sorted(
                {int(r) // SAMPLES_PER_CHUNK * SAMPLES_PER_CHUNK for r in rows if r < n}
            )
        for lo in starts:
            samples = [
                mf.bytes(int(offsets[r]), int(offsets[r + 1] - offsets[r]))
                for r in range(lo, min(n, lo + SAMPLES_PER_CHUNK))
            ]
            yield lo, _sample_table(samples, cols, columns)


def _sample_table(
    samples: list[bytes], cols: _Columns | None, wanted: list[str] | None
) -> pa.Table:
    if cols is None:
        return pa.table({"sample": pa.array(samples, pa.binary())})
    split: list[list[bytes] | None] = []
    for sample in samples:
        try:
            split.append(cols.split(sample))
        except ValueError:
            split.append(None)
    arrays = {
        name: _arrow_column(enc, [None if v is None else v[i] for v in split])
        for i, (name, enc) in enumerate(zip(cols.names, cols.encodings, strict=True))
        if wanted is None or name in wanted
    }
    return pa.table(arrays) if arrays else pa.table({"sample": pa.array(samples, pa.binary())})


register(MdsFormat())
