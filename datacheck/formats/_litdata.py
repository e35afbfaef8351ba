"""litdata ``optimize`` output: ``chunk-R-N.bin`` files beside their ``index.json``.

Read without litdata, against what litdata 0.2.76 writes (``litdata/streaming/writer.py``,
``item_loader.py``, ``framed_zstd.py``, ``serializers.py``; its ``StreamingDataset`` is the
oracle in the tests).  ``index.json`` holds ``chunks`` (each chunk's file name, item count and
byte count) and ``config`` (``data_format``: the serializer of each leaf of an item, in
``data_spec``'s flattening order; ``item_loader``; ``compression``, ``compression_level``,
``encryption``).  A chunk is ``uint32 num_items``, ``uint32 offsets[num_items + 1]`` (byte
offsets of each item in the file), then the items; a ``PyTreeLoader`` item is a ``uint32`` size
per leaf, then the leaves; a ``TokensLoader`` item is its tokens, nothing else.  Variants:

* ``compression="zstd"`` with ``compression_level="chunk"``: the whole chunk zstd-compressed
  (``chunk-R-N.zstd.bin``), decompressed bounded by the index's byte count (:mod:`._mds_zip`);
* ``"batch"`` (the default with zstd): ``LDFZ01`` magic, item offsets relative to the items'
  bytes, a table of zstd frames each holding a run of items; ``"sample"``: the classic layout
  with each item zstd-compressed;
* dict rows of plain JSON types: an Arrow IPC file after the items (``LDARW01`` trailer; the
  items themselves may be empty), which litdata reads instead of the items: read as Arrow.

Checked: the item count and byte count against ``index.json``, offsets that start after the
table, rise and end where the items end, each item's leaf sizes; then every leaf as its
serializer reads it back (:mod:`._litdata_values`), at the item's row (the chunk's own item
index) and the leaf's column (its key path in ``data_spec``).  What cannot be read is never
passed: an encrypted dataset, another item loader, a serializer datacheck does not decode ->
the file is listed under ``ignored`` with the reason (:meth:`LitdataFormat.unread`).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import (
    Chunk,
    Format,
    Opened,
    WorkUnit,
    _storage,
    memory_budget,
    mib,
    register,
)
from datacheck.formats._litdata_values import leaf_check, unsupported
from datacheck.formats._mds_values import decode_sample
from datacheck.formats._mds_zip import _chunks, materialize_shard
from datacheck.formats._tensor_common import (
    MappedFile,
    SampleBatcher,
    SampleChunk,
    TensorFileError,
    fixed_width_values,
    utf8_values,
)
from datacheck.schema._media import media_rules

__all__ = ["LitdataFormat", "is_litdata_index"]

MAX_INDEX_BYTES = 64 << 20
ITEMS_PER_CHUNK = 1024
_NAME = re.compile(r"chunk-\d+-\d+(\.zstd(:\d+)?)?\.bin")
_FRAMED = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
_FRAMED_MAGIC = b"LDFZ01\0\0"
_ARROW_MAGIC = b"LDARW01\0"
_LOADERS = ("PyTreeLoader", "TokensLoader")


def _split(path: str) -> tuple[str, str]:
    return posixpath.split(path) if _storage.is_url(path) else os.path.split(path)


def _index(folder: str) -> dict[str, Any] | None:
    """The folder's ``index.json`` when it is litdata's (``chunks`` and ``config``)."""
    join = posixpath.join if _storage.is_url(folder) else os.path.join
    doc = _storage.json_document(join(folder, "index.json"), MAX_INDEX_BYTES)
    ok = isinstance(doc, dict) and isinstance(doc.get("chunks"), list)
    return doc if ok and isinstance(doc.get("config"), dict) else None


def is_litdata_index(path: str) -> bool:
    """litdata's ``index.json``: its chunks' reader uses it; it is not data."""
    folder, name = _split(path)
    return name == "index.json" and _index(folder) is not None


def _entry(path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(config, chunk entry) of a chunk file named in its folder's litdata index."""
    folder, name = _split(path)
    if not _NAME.fullmatch(name) or (doc := _index(folder)) is None:
        return None
    chunk = next(
        (c for c in doc["chunks"] if isinstance(c, dict) and c.get("filename") == name), None
    )
    return None if chunk is None else (doc["config"], chunk)


def _leaf_names(spec: Any) -> list[str] | None:
    """Leaf names in ``tree_flatten`` order from litdata's ``data_spec`` (a dumped torch
    treespec): dict keys, list/tuple positions, joined by dots (None: not one it knows)."""
    try:
        node = json.loads(spec)[1] if isinstance(spec, str) else None
    except (ValueError, IndexError, TypeError, RecursionError):
        return None
    out: list[str] = []

    def walk(node: Any, prefix: str, depth: int) -> bool:
        if not isinstance(node, dict) or depth > 32:
            return False
        children = node.get("children_spec") or []
        if node.get("type") is None:
            out.append(prefix or "value")
            return True
        keys: Any = None
        if node.get("type") in ("builtins.dict", "collections.OrderedDict"):
            keys = json.loads(node.get("context") or "[]")
        if not isinstance(keys, list) or len(keys) != len(children):
            keys = list(range(len(children)))
        return all(
            walk(child, f"{prefix}.{key}" if prefix else str(key), depth + 1)
            for key, child in zip(keys, children, strict=True)
        )

    try:
        return out if walk(node, "", 0) else None
    except (ValueError, TypeError, RecursionError):
        return None


class _Layout:
    """What the index's ``config`` says about every chunk of the dataset."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.loader = config.get("item_loader")
        formats = config.get("data_format")
        self.formats: list[str] = formats if isinstance(formats, list) else []
        names = _leaf_names(config.get("data_spec"))
        if names is None or len(names) != len(self.formats):
            names = [f"leaf{i}" for i in range(len(self.formats))]
        self.names = names
        self.compression = config.get("compression")
        self.level = config.get("compression_level") or "chunk"
        self.encrypted = bool(config.get("encryption"))

    def unread(self) -> str | None:
        """Why datacheck cannot read these chunks (None: it can)."""
        if self.encrypted:
            return "an encrypted litdata dataset: datacheck cannot decrypt it"
        if self.loader not in _LOADERS:
            return f"litdata item loader {self.loader!r}: datacheck reads PyTreeLoader and TokensLoader chunks"
        if not self.formats or not all(isinstance(f, str) for f in self.formats):
            return "litdata index.json: data_format is not a list of serializer names"
        if self.compression and not str(self.compression).startswith("zstd"):
            return f"litdata compression {self.compression!r}: datacheck reads zstd"
        for fmt in self.formats:
            if (why := unsupported(fmt)) is not None:
                return f"a litdata dataset whose {why}"
        return None


def _mapped(path: str, layout: _Layout, chunk: Mapping[str, Any]) -> MappedFile:
    """The chunk's bytes, decompressed when the whole file is zstd (bounded by the index)."""
    raw = chunk.get("chunk_bytes")
    spec = {"raw_data": {"bytes": raw}} if isinstance(raw, int) else None
    whole = layout.compression and layout.level == "chunk"
    if whole or _storage.is_url(path):
        return materialize_shard(path, "zstd" if whole else None, spec)
    mf = MappedFile(path)
    if isinstance(raw, int) and raw != mf.size:
        raise TensorFileError(f"index.json says {raw} bytes, the chunk holds {mf.size}")
    return mf


def _footer(mf: MappedFile) -> tuple[int, pa.Table | None]:
    """Where the items end, and the Arrow rows litdata appended after them (if any)."""
    if mf.size < 12 or mf.bytes(mf.size - 8, 8) != _ARROW_MAGIC:
        return mf.size, None
    (n,) = struct.unpack("<I", mf.bytes(mf.size - 12, 4))
    start = mf.size - 12 - n
    if start < 8:
        raise TensorFileError(f"the Arrow trailer claims {n} bytes, the chunk holds {mf.size}")
    try:
        reader = pa.ipc.open_file(pa.py_buffer(mf.bytes(start, n)))
        table = pa.Table.from_batches(
            [reader.get_batch(i) for i in range(reader.num_record_batches)], reader.schema
        )
        table.validate(full=True)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise TensorFileError(f"the Arrow rows after the items do not read: {exc}") from None
    return start, table


def _table(mf: MappedFile, at: int, n: int) -> np.ndarray:
    return mf.array(at, np.dtype("<u4"), (n,)).astype(np.int64)


def _classic_offsets(mf: MappedFile, end: int, expected: Any) -> np.ndarray:
    n = int(_table(mf, 0, 1)[0])
    if isinstance(expected, int) and n != expected:
        raise TensorFileError(f"the chunk holds {n} items, index.json says {expected}")
    offsets = _table(mf, 4, n + 1)
    start = 4 + 4 * (n + 1)
    if offsets[0] != start or offsets[-1] != end or np.any(np.diff(offsets) < 0):
        raise TensorFileError(
            f"item offsets run {int(offsets[0])}..{int(offsets[-1])}, expected {start}..{end} "
            "rising: the offset table is damaged"
        )
    return offsets


class _Items:
    """The raw bytes of a chunk's items, in order, whatever the wrapping."""

    def __init__(
        self, mf: MappedFile, layout: _Layout, chunk: Mapping[str, Any], budget: float
    ) -> None:
        self.mf, self.budget = mf, budget
        self.framed = layout.compression and layout.level == "batch"
        self.per_item = layout.compression and layout.level == "sample"
        expected = chunk.get("chunk_size")
        if self.framed:
            self.n, self.frames = self._framed_table(expected)
            self.rows: pa.Table | None = None
        else:
            end, self.rows = _footer(mf)
            self.offsets = _classic_offsets(mf, end, expected)
            self.n = len(self.offsets) - 1
            if self.rows is not None and self.rows.num_rows != self.n:
                raise TensorFileError(
                    f"the Arrow rows after the items hold {self.rows.num_rows} rows, the chunk {self.n} items"
                )

    def _framed_table(
        self, expected: Any
    ) -> tuple[int, list[tuple[int, int, int, int, np.ndarray]]]:
        mf = self.mf
        if mf.size < _FRAMED.size or mf.bytes(0, 8) != _FRAMED_MAGIC:
            raise TensorFileError("index.json says zstd batches, the chunk has no LDFZ01 header")
        _, version, _, n, k, n_frames = _FRAMED.unpack(mf.bytes(0, _FRAMED.size))
        if version != 1 or (isinstance(expected, int) and n != expected):
            raise TensorFileError(
                f"framed zstd header: version {version}, {n} items (index.json: {expected})"
            )
        offsets = _table(mf, _FRAMED.size, n + 1)
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise TensorFileError("framed zstd: the item offsets do not rise from 0")
        table_end = _FRAMED.size + 4 * (n + 1) + _FRAME.size * n_frames
        frames, first = [], 0
        for i in range(n_frames):
            f_first, f_n, coff, clen, ulen = _FRAME.unpack(
                mf.bytes(_FRAMED.size + 4 * (n + 1) + _FRAME.size * i, _FRAME.size)
            )
            want = int(offsets[min(f_first + f_n, n)] - offsets[min(f_first, n)])
            if (
                f_first != first
                or f_n < 1
                or f_first + f_n > n
                or coff < table_end
                or coff + clen > mf.size
                or ulen != want
            ):
                raise TensorFileError(
                    f"framed zstd: frame {i} of {n_frames} does not add up to the item offsets"
                )
            frames.append(
                (f_first, f_n, coff, clen, offsets[f_first : f_first + f_n + 1] - offsets[f_first])
            )
            first += f_n
        if first != n:
            raise TensorFileError(f"framed zstd: the frames hold {first} items, the chunk {n}")
        return n, frames

    def __iter__(self) -> Iterator[bytes]:
        if self.framed:
            for _, _, coff, clen, rel in self.frames:
                if rel[-1] > self.budget:
                    raise TensorFileError(
                        f"framed zstd: a frame of {int(rel[-1])} bytes, past the "
                        f"{mib(self.budget)} a piece may take (--unit-memory-mb)"
                    )
                data = _inflate(self.mf.bytes(coff, clen), int(rel[-1]), exact=True)
                yield from (
                    data[a:b] for a, b in zip(rel[:-1].tolist(), rel[1:].tolist(), strict=True)
                )
            return
        for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist(), strict=True):
            data = self.mf.bytes(a, b - a)
            yield _inflate(data, self.budget, exact=False) if self.per_item else data


def _inflate(data: bytes, limit: float, exact: bool) -> bytes:
    """One zstd frame, inflated a bounded step at a time and never past ``limit`` bytes
    (exactly that many when ``exact``): a frame header's own content size is not trusted."""
    cap = int(min(limit, 1 << 62))
    out, total = [], 0
    for piece in _chunks("zstd", io.BytesIO(data), cap):
        total += len(piece)
        if total > cap:
            raise TensorFileError(f"zstd: an item frame inflates past {cap} bytes")
        out.append(piece)
    if exact and total != cap:
        raise TensorFileError(f"zstd: an item frame inflates to {total} bytes, not {cap}")
    return b"".join(out)


_NUMBERS = {"int": "<i8", "float": "<f8", "bool": "?"}


def _arrow(fmt: str, values: list[bytes | None]) -> pa.Array:
    """One leaf of every item as Arrow: numbers as numbers, text as text (null where a value
    is not what its serializer writes), the rest as bytes."""
    if fmt in _NUMBERS:
        return fixed_width_values(values, np.dtype(_NUMBERS[fmt]))
    if fmt in ("str", "text"):
        return utf8_values(values)
    return pa.array(values, pa.binary())


def _leaves(item: bytes, n: int) -> list[bytes]:
    """A PyTree item's leaves: ``uint32`` sizes, then the leaves (ValueError: they do not add
    up to the item)."""
    if len(item) < 4 * n:
        raise ValueError(f"{len(item)} bytes, shorter than its size header")
    sizes = struct.unpack_from(f"<{n}I", item)
    pos, out = 4 * n, []
    for size in sizes:
        out.append(item[pos : pos + size])
        pos += size
    if pos != len(item):
        raise ValueError(f"leaf sizes add up to {pos} bytes, the item has {len(item)}")
    return out


class _Chunk:
    """An opened chunk: its layout, bytes and items."""

    def __init__(self, path: str, options: Mapping[str, Any]) -> None:
        found = _entry(path)
        if found is None:
            raise TensorFileError("no litdata index.json beside the chunk names it")
        config, chunk = found
        self.layout = _Layout(config)
        if (why := self.layout.unread()) is not None:
            raise TensorFileError(why)
        self.mf = _mapped(path, self.layout, chunk)
        self.items = _Items(self.mf, self.layout, chunk, memory_budget(options))
        self.rules = media_rules(options).images

    def samples(self, path: str) -> Iterator[Chunk]:
        items, layout = self.items, self.layout
        if items.rows is not None:  # what litdata reads: the Arrow rows, not the items
            for lo in range(0, items.n, ITEMS_PER_CHUNK):
                yield Chunk(row_offset=lo, batch=items.rows.slice(lo, ITEMS_PER_CHUNK))
            return
        tokens = layout.loader == "TokensLoader"
        checks = [
            (i, layout.names[i], c)
            for i, f in enumerate(layout.formats)
            if (c := leaf_check(f, self.rules))
        ]
        found: list[Finding] = []
        values_of = SampleBatcher(counts=False, ragged=True)  # the leaves' numbers, as tensors
        lo = 0
        for row, item in enumerate(items):
            try:
                values = [item] if tokens else _leaves(item, len(layout.formats))
            except ValueError as exc:
                found.append(Finding(path, "corrupt", Severity.ERROR, str(exc), None, row))
            else:
                if numbers := decode_sample(path, row, checks, values, found):
                    yield from values_of.add(row, numbers)
            if row + 1 - lo == ITEMS_PER_CHUNK:
                yield SampleChunk(row_offset=lo, tensors={}, samples=row + 1 - lo, findings=found)
                found, lo = [], row + 1
        if items.n - lo or not items.n:
            yield SampleChunk(row_offset=lo, tensors={}, samples=items.n - lo, findings=found)
        yield from values_of.finish(items.n)


class LitdataFormat(Format):
    name = "litdata"
    tabular = False

    def owns(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.startswith("chunk-") and name.endswith(".bin") and _entry(path) is not None

    def unread(self, path: str) -> str | None:
        found = _entry(path)
        return None if found is None else _Layout(found[0]).unread()

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        chunk = _Chunk(unit.path, options)
        layout = chunk.layout
        if chunk.items.rows is not None:
            columns = {f.name: str(f.type) for f in chunk.items.rows.schema}
        else:
            columns = dict(zip(layout.names, layout.formats, strict=True))
        return Opened(columns, chunk.samples(unit.path), expected_rows=chunk.items.n)

    def tables(
        self,
        path: str,
        options: Mapping[str, Any],
        *,
        rows: np.ndarray | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[tuple[int, pa.Table]]:
        """The items' leaves, all in one table (a chunk is small): ``int``/``float``/``bool``
        as numbers, ``str``/``text`` as text, the rest as the bytes the chunk holds; an item
        whose leaf sizes do not add up is all null.  Arrow rows come back as they are."""
        chunk = _Chunk(path, options)
        if chunk.items.rows is not None:
            yield 0, chunk.items.rows
            return
        layout = chunk.layout
        tokens = layout.loader == "TokensLoader"
        split: list[list[bytes] | None] = []
        for item in chunk.items:
            try:
                split.append([item] if tokens else _leaves(item, len(layout.formats)))
            except ValueError:
                split.append(None)
        arrays = {
            name: _arrow(fmt, [None if v is None else v[i] for v in split])
            for i, (name, fmt) in enumerate(zip(layout.names, layout.formats, strict=True))
            if columns is None or name in columns
        }
        yield 0, pa.table(arrays) if arrays else pa.table({"item": [bytes(i) for i in chunk.items]})


register(LitdataFormat())
