"""Writers of media dataset folders for the format tests, in the shapes the real libraries
write (MosaicML Streaming's MDSWriter, Hugging Face ``save_to_disk``), without those libraries."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image


def varint(n: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def length_delimited(num: int, body: bytes) -> bytes:
    """A protobuf length-delimited field ``num`` holding ``body``."""
    return varint(num << 3 | 2) + varint(len(body)) + body


def tf_example(floats: dict[str, list[float]], blobs: dict[str, bytes]) -> bytes:
    """A serialized ``tf.train.Example`` (protobuf wire format written by hand)."""
    ld = length_delimited
    entries = b""
    for name, values in floats.items():
        feature = ld(2, ld(1, np.asarray(values, "<f4").tobytes()))  # FloatList, packed
        entries += ld(1, ld(1, name.encode()) + ld(2, feature))
    for name, blob in blobs.items():
        feature = ld(1, ld(1, blob))  # BytesList
        entries += ld(1, ld(1, name.encode()) + ld(2, feature))
    return ld(1, entries)


def jpeg(seed: int = 0, side: int = 16) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


# --- MosaicML Streaming (MDS) ---------------------------------------------------------------


def compress(codec: str, data: bytes, checksum: bool = False) -> bytes:
    """What streaming's ``compression.compress`` writes for a codec family (levels aside);
    ``checksum``: a zstd frame with its content checksum (streaming's frames have none)."""
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=3, write_checksum=checksum).compress(data)
    if codec == "gz":
        return gzip.compress(data, 9, mtime=0)
    if codec == "bz2":
        return bz2.compress(data, 9)
    if codec == "br":
        import brotli

        return brotli.compress(data, quality=5)
    if codec == "snappy":  # python-snappy's compress: cramjam's raw format
        import cramjam

        return bytes(cramjam.snappy.compress_raw(data))
    raise ValueError(codec)


def mds_shard_bytes(n: int = 20, side: int = 16) -> bytes:
    """An MDS shard of ``n`` samples (image, label, score); sample 11's score is NaN."""
    samples = []
    for i in range(n):
        img = jpeg(i % 3, side)
        score = np.float32(np.nan if i == 11 else i / 2)
        head = np.array([len(img)], np.uint32).tobytes()
        samples.append(head + img + np.int64(i).tobytes() + score.tobytes())
    offsets = np.array([0, *map(len, samples)]).cumsum().astype(np.uint32)
    offsets += 4 + 4 * (n + 1)
    return np.uint32(n).tobytes() + offsets.tobytes() + b"".join(samples)


_NDARRAY_CODES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18}
_NDARRAY_CODES |= {"uint32": 32, "int32": 33, "float32": 34, "uint64": 64, "int64": 65}
_NDARRAY_CODES |= {"float64": 66}


def mds_value(enc: str, obj: Any) -> bytes:
    """What streaming's ``mds_encode(enc, obj)`` writes, for the encodings the tests use."""
    name, _, config = enc.partition(":")
    if name in ("str", "str_int", "str_float", "str_decimal"):
        return str(obj).encode()
    if name == "json":
        return json.dumps(obj).encode()
    if name == "pkl":
        import pickle

        return pickle.dumps(obj)
    if name == "pil":
        mode = obj.mode.encode()
        head = np.array([obj.size[0], obj.size[1], len(mode)], np.uint32).tobytes()
        return head + mode + obj.tobytes()
    if name == "ndarray":  # [dtype code] [ndim << 2 | shape width] [shape], when not fixed
        args = config.split(":") if config else []
        arr = np.asarray(obj)
        out = b"" if args else bytes([_NDARRAY_CODES[arr.dtype.name]])
        if len(args) < 2:
            width = next(k for k in range(4) if max(arr.shape) < 1 << (8 << k))
            out += bytes([arr.ndim << 2 | width])
            out += np.array(arr.shape, f"<u{1 << width}").tobytes()
        return out + arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    if name == "bytes":
        return bytes(obj)
    return np.array(obj, "<i8" if name == "int" else name).tobytes()


def mds_shard(columns: list[tuple[str, str, int | None]], rows: list[list[bytes]]) -> bytes:
    """A shard of encoded ``rows`` (a value per column; ``columns``: name, encoding, fixed
    size or None), laid out as MDSWriter writes it."""
    samples = []
    for values in rows:
        sizes = [len(v) for (_, _, size), v in zip(columns, values, strict=True) if size is None]
        samples.append(np.array(sizes, np.uint32).tobytes() + b"".join(values))
    offsets = np.array([0, *map(len, samples)]).cumsum().astype(np.uint32)
    offsets += 4 + 4 * (len(rows) + 1)
    return np.uint32(len(rows)).tobytes() + offsets.tobytes() + b"".join(samples)


def _file_info(basename: str, data: bytes, hashes: list[str]) -> dict[str, Any]:
    """Streaming's ``Writer._hash``: basename, bytes and the listed hashes of a file."""
    return {
        "basename": basename,
        "bytes": len(data),
        "hashes": {algo: _digest(algo, data) for algo in hashes},
    }


def _digest(algo: str, data: bytes) -> str:
    """Streaming's ``get_hash``: hashlib's algorithms, then xxhash's (``xxh64``, ...)."""
    if algo.startswith("xxh"):
        import xxhash

        return str(getattr(xxhash, algo)(data).hexdigest())
    return hashlib.new(algo, data).hexdigest()


def write_mds(
    folder: Path,
    n: int = 20,
    compression: str | None = None,
    hashes: tuple[str, ...] = ("sha1",),
    data: bytes | None = None,
    columns: list[tuple[str, str, int | None]] | None = None,
) -> Path:
    """One shard + index.json laid out as streaming's MDSWriter writes them.

    With ``compression`` (``"zstd:7"``, ``"gz"``, ...) only ``shard.00000.mds.<codec>`` is
    written and the entry carries ``zip_data`` beside ``raw_data``, as ``JointWriter`` does.
    ``columns`` (name, encoding, fixed size or None) describe ``data`` (see :func:`mds_shard`);
    by default it is :func:`mds_shard_bytes`'s image, label and score.
    """
    columns = columns or [("image", "jpeg", None), ("label", "int", 8), ("score", "float32", 4)]
    folder.mkdir(parents=True)
    raw = mds_shard_bytes(n) if data is None else data
    raw_info = _file_info("shard.00000.mds", raw, list(hashes))
    zip_info = None
    written, name = raw, "shard.00000.mds"
    if compression:
        codec = compression.split(":")[0]
        name = f"shard.00000.mds.{codec}"
        written = compress(codec, raw)
        zip_info = _file_info(name, written, list(hashes))
    (folder / name).write_bytes(written)
    shard = {
        "column_encodings": [enc for _, enc, _ in columns],
        "column_names": [name for name, _, _ in columns],  # MDSWriter sorts column names
        "column_sizes": [size for _, _, size in columns],
        "compression": compression,
        "format": "mds",
        "hashes": list(hashes),
        "raw_data": raw_info,
        "samples": n,
        "size_limit": 1 << 26,
        "version": 2,
        "zip_data": zip_info,
    }
    index = {"shards": [shard], "version": 2}
    (folder / "index.json").write_text(json.dumps(index, sort_keys=True))
    return folder


# --- Hugging Face save_to_disk ------------------------------------------------------------

FEATURES = {
    "image": {"_type": "Image"},
    "label": {"dtype": "int64", "_type": "Value"},
    "x": {"dtype": "float32", "_type": "Value"},
}


def hf_split_files(name: str, n: int = 10, files: int = 2) -> dict[str, bytes]:
    """The files of a split as ``Dataset.save_to_disk`` writes them: Arrow streams +
    state/info JSON; file 1 has a truncated JPEG at row 3, a missing image file at row 5 and
    a NaN at row 7."""
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    meta = {b"huggingface": json.dumps({"info": {"features": FEATURES}}).encode()}
    schema = pa.schema(
        [("image", image_type), ("label", pa.int64()), ("x", pa.float32())], metadata=meta
    )
    out: dict[str, bytes] = {}
    for k in range(files):
        good = jpeg(k)
        images = [{"bytes": good, "path": None} for _ in range(n)]
        x = np.linspace(0, 1, n, dtype=np.float32)
        if k == 1:
            images[3] = {"bytes": good[: len(good) // 2], "path": None}  # truncated JPEG
            images[5] = {"bytes": None, "path": "missing.jpg"}
            x[7] = np.nan
        table = pa.table(
            [pa.array(images, image_type), pa.array(range(n)), pa.array(x)], schema=schema
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as w:
            w.write_table(table, max_chunksize=4)
        out[f"data-{k:05d}-of-{files:05d}.arrow"] = sink.getvalue().to_pybytes()
    state = {"_data_files": [{"filename": n} for n in out], "_split": name}
    out["state.json"] = json.dumps(state, indent=2).encode()
    out["dataset_info.json"] = json.dumps({"features": FEATURES}, indent=2).encode()
    return out


def write_hf_split(folder: Path, n: int = 10, files: int = 2) -> Path:
    """A split folder on disk (see :func:`hf_split_files`)."""
    folder.mkdir(parents=True)
    for name, data in hf_split_files(folder.name, n, files).items():
        (folder / name).write_bytes(data)
    return folder
