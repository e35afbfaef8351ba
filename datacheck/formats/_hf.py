"""Hugging Face ``datasets`` folders (``save_to_disk``), read without the ``datasets`` package.

A split folder holds ``state.json`` (which names its ``data-*.arrow`` files),
``dataset_info.json`` and the data as Arrow IPC streams; a ``DatasetDict`` adds
``dataset_dict.json`` above one folder per split.  Each split is one dataset: its data files are
read by this format (the JSON files are metadata, not data).  Numeric and list columns are
checked as in any Arrow file; ``Image`` and ``Audio`` feature columns (``{bytes, path}``
structs, found in the features the file's own schema metadata stores, else in
``dataset_info.json``) are decoded: an image or clip that does not decode, or whose ``path``
does not exist, is ``corrupt`` at its row (column: the feature).  Folders on object stores
(``s3://``, ``gs://``, ... through fsspec) are recognised and read the same way: their JSON
files are fetched once per folder, the Arrow streams read through the storage.  Parquet files
``datasets`` wrote (``Dataset.to_parquet``, the ``push_to_hub`` layout ``data/train-00000-of-
00002.parquet``) carry the same features in their schema metadata: the Parquet reader decodes
their media columns the same way (:func:`media_chunks`).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Chunk, Format, Opened, WorkUnit, _storage, register
from datacheck.formats._audio import check_audio
from datacheck.formats._image import DecodeError, Problem, check_image, read_bytes
from datacheck.schema._media import ImageRules, media_rules

__all__ = ["HfArrowFormat", "hf_features", "media_chunks", "media_labels"]

MAX_META_BYTES = 16 << 20
_MEDIA = ("Image", "Audio")


def _source(path: str) -> pa.NativeFile:
    """The Arrow stream of a local path (memory-mapped) or a URL (through the storage)."""
    return pa.PythonFile(_storage.source(path)) if _storage.is_url(path) else pa.memory_map(path)


def _json(path: str) -> Any:
    return _storage.json_document(path, MAX_META_BYTES)


def _split(path: str) -> tuple[str, str]:
    """(folder, name) of a local path or a URL."""
    return posixpath.split(path) if _storage.is_url(path) else os.path.split(path)


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if _storage.is_url(folder) else os.path.join(folder, name)


def _data_files(folder: str) -> set[str]:
    state = _json(_join(folder, "state.json"))
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list):
        return set()
    names = (f.get("filename") if isinstance(f, dict) else None for f in files)
    return {n for n in names if isinstance(n, str)}


def is_hf_data(path: str) -> bool:
    """True for a ``data-*.arrow`` file its folder's ``state.json`` lists."""
    if not path.endswith(".arrow"):
        return False
    folder, name = _split(path)
    return name in _data_files(folder)


def is_hf_metadata(path: str) -> bool:
    """``state.json``/``dataset_info.json`` of a split folder, or a ``dataset_dict.json``."""
    folder, name = _split(path)
    if name == "dataset_dict.json":
        return isinstance(_json(path), dict) and "splits" in _json(path)
    return name in ("state.json", "dataset_info.json") and bool(_data_files(folder))


def hf_features(schema: pa.Schema, folder: str | None) -> dict[str, Any]:
    """Columns holding ``Image``/``Audio`` features anywhere in them (top-level, in a struct, in
    a ``List``/``Sequence``, nested): name -> the column's feature, from the features the
    file's schema metadata stores (``datasets`` writes them into every Arrow and Parquet file),
    else from the ``dataset_info.json`` in ``folder`` (None: the metadata only)."""
    features: Any = None
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta:
        try:
            features = json.loads(meta).get("info", {}).get("features")
        except (ValueError, AttributeError, RecursionError):
            features = None
    if not isinstance(features, dict) and folder is not None:
        info = _json(_join(folder, "dataset_info.json"))
        features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict):
        return {}
    return {name: f for name, f in features.items() if name in schema.names and _holds_media(f, 0)}


def media_labels(media: Mapping[str, Any]) -> dict[str, str]:
    """The type names of the columns that are one media feature each (``Image``, ``Audio``):
    those columns are decoded, then left out of the batch."""
    return {n: f["_type"] for n, f in media.items() if isinstance(f, dict) and _kind(f)}


_LISTS = ("List", "Sequence", "LargeList")
_DEPTH = 64  # features nested deeper are not walked (JSON metadata is untrusted)


def _kind(feature: Any) -> str | None:
    kind = feature.get("_type") if isinstance(feature, dict) else None
    return kind if kind in _MEDIA else None


def _holds_media(feature: Any, depth: int) -> bool:
    if depth > _DEPTH:
        return False
    if isinstance(feature, list):  # the legacy ``[feature]`` spelling of a list
        return len(feature) == 1 and _holds_media(feature[0], depth + 1)
    if not isinstance(feature, dict):
        return False
    if _kind(feature):
        return True
    if feature.get("_type") in _LISTS:
        return _holds_media(feature.get("feature"), depth + 1)
    return "_type" not in feature and any(_holds_media(f, depth + 1) for f in feature.values())


def _media_values(
    feature: Any, array: pa.Array, rows: np.ndarray, name: str, depth: int = 0
) -> Iterator[tuple[str, str, pa.Array, np.ndarray]]:
    """(column name, kind, the ``{bytes, path}`` structs, each one's row) of every media value
    under ``feature``, walking its Arrow storage: struct fields are named ``col.field``, list
    items keep the row holding their list."""
    if depth > _DEPTH:
        return
    if isinstance(feature, list) and len(feature) == 1:
        feature = {"_type": "List", "feature": feature[0]}
    if not isinstance(feature, dict):
        return
    kind, typ = _kind(feature), array.type
    if kind:
        if pa.types.is_struct(typ):
            yield name, kind, array, rows
    elif feature.get("_type") in _LISTS:
        sub = feature.get("feature")
        if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
            yield from _media_values(sub, pc.list_flatten(array), rows[parents], name, depth + 1)
        elif pa.types.is_struct(typ) and isinstance(
            sub, dict
        ):  # a list of dicts as a dict of lists
            for i in range(typ.num_fields):
                field = typ.field(i).name
                item = {"_type": "List", "feature": sub.get(field)}
                yield from _media_values(item, array.field(i), rows, f"{name}.{field}", depth + 1)
    elif "_type" not in feature and pa.types.is_struct(typ):
        children = array.flatten()
        for i in range(typ.num_fields):
            field = typ.field(i).name
            if field in feature:
                yield from _media_values(
                    feature[field], children[i], rows, f"{name}.{field}", depth + 1
                )


def _decode(kind: str, data: bytes, rules: ImageRules) -> list[Problem]:
    return check_image(data, rules) if kind == "Image" else check_audio(data)


def _read_by_path(folder: str, where: str, kind: str) -> bytes:
    """The bytes of a media value stored by path (relative paths: to the split's folder)."""
    full = where if os.path.isabs(where) or _storage.is_url(where) else _join(folder, where)
    try:
        return read_bytes(full)
    except FileNotFoundError:
        raise DecodeError(f"{kind.lower()} file {where!r} not found") from None
    except OSError as exc:
        raise DecodeError(f"{kind.lower()} file {where!r} cannot be read ({exc})") from None


def _media_findings(
    path: str, batch: pa.RecordBatch, offset: int, media: dict[str, Any], rules: ImageRules
) -> list[Finding]:
    folder = _split(path)[0]
    out: list[Finding] = []
    for column, feature in media.items():
        top = np.arange(offset, offset + batch.num_rows, dtype=np.int64)
        for name, kind, values, rows in _media_values(feature, batch.column(column), top, column):
            out += _decoded(path, folder, name, kind, values, rows, rules)
    return out


def _decoded(
    path: str,
    folder: str,
    name: str,
    kind: str,
    values: pa.Array,
    rows: np.ndarray,
    rules: ImageRules,
) -> list[Finding]:
    """The findings of decoding each ``{bytes, path}`` value, at its row."""
    fields = {values.type.field(i).name: i for i in range(values.type.num_fields)}
    children = values.flatten()
    blobs = children[fields["bytes"]] if "bytes" in fields else None
    paths = children[fields["path"]] if "path" in fields else None
    out: list[Finding] = []
    for i in range(len(values)):
        data = blobs[i].as_py() if blobs is not None else None
        where = paths[i].as_py() if paths is not None else None
        row = int(rows[i])
        try:
            if data is None and where:
                data = _read_by_path(folder, where, kind)
            if data is None:
                continue  # a null value: the null checks see the column
            problems = _decode(kind, data, rules)
        except DecodeError as exc:
            out.append(Finding(path, "corrupt", Severity.ERROR, str(exc), name, row))
            continue
        out += [Finding(path, p.check, p.severity, p.message, name, row) for p in problems]
    return out


def media_chunks(
    chunks: Iterator[Chunk], path: str, media: dict[str, Any], rules: ImageRules
) -> Iterator[Chunk]:
    """Chunks of a file whose ``media`` columns are decoded (findings at their rows) and then
    left out of the batch, as in a ``save_to_disk`` split (a Parquet file ``datasets`` wrote)."""
    for chunk in chunks:
        table = chunk.batch
        if table is None:
            yield chunk
            continue
        batches = [table] if isinstance(table, pa.RecordBatch) else table.to_batches()
        found, offset = list(chunk.findings), chunk.row_offset
        for batch in batches:
            found += _media_findings(path, batch, offset, media, rules)
            offset += batch.num_rows
        yield Chunk(chunk.row_offset, table.drop_columns(list(media_labels(media))), findings=found)


def _chunks(
    reader: pa.ipc.RecordBatchStreamReader, path: str, media: dict[str, Any], rules: ImageRules
) -> Iterator[Chunk]:
    offset, decoded = 0, list(media_labels(media))
    for batch in reader:
        batch.validate(full=True)  # damaged offsets would read out of bounds: corrupt, not a crash
        found = _media_findings(path, batch, offset, media, rules)
        rest = batch.drop_columns(decoded) if decoded else batch
        yield Chunk(row_offset=offset, batch=rest, findings=found)
        offset += batch.num_rows


class HfArrowFormat(Format):
    """A ``data-*.arrow`` stream of a ``save_to_disk`` split, media columns decoded."""

    name = "hf"
    tabular = True

    def owns(self, path: str) -> bool:
        return is_hf_data(path)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        reader = pa.ipc.open_stream(_source(unit.path))
        schema = reader.schema
        media = hf_features(schema, _split(unit.path)[0])
        labels = media_labels(media)
        columns = {f.name: labels.get(f.name) or str(f.type) for f in schema}
        rules = media_rules(options).images
        chunks = _chunks(reader, unit.path, media, rules)
        return Opened(columns, chunks, arrow_schema=schema)

    def tables(
        self,
        path: str,
        options: Mapping[str, Any],
        *,
        rows: np.ndarray | None = None,
        columns: list[str] | None = None,
    ) -> Iterator[tuple[int, pa.Table]]:
        """The stream's batches as they are (media columns as their ``{bytes, path}`` structs,
        not decoded), local or through the storage; stops after the last of ``rows``."""
        last = None if rows is None else (int(rows[-1]) if len(rows) else -1)
        start = 0
        with _source(path) as source:
            for batch in pa.ipc.open_stream(source):
                if last is not None and start > last:
                    return
                batch.validate(full=True)
                names = batch.schema.names if columns is None else columns
                table = pa.Table.from_batches([batch]).select(
                    [c for c in names if c in batch.schema.names]
                )
                yield start, table
                start += batch.num_rows


register(HfArrowFormat())
