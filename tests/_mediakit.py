"""Writers of media dataset folders for the format tests: MDS datasets by MosaicML Streaming's
own ``MDSWriter``; Hugging Face ``save_to_disk`` splits in the shape ``datasets`` writes them
(``tests/formats/producers/`` writes them with ``datasets`` itself)."""

from __future__ import annotations

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


# --- MosaicML Streaming (MDS): written by streaming's own MDSWriter ------------------------


def streaming_module() -> Any:
    """``import streaming``, the real package, where torchvision is missing too: the stand-in
    for its vision datasets goes in first (``tests/_shims/README.md``; the test process has it
    from conftest, the fuzzer and scripts get it here)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("torchvision") is None and "streaming" not in sys.modules:
        shim = Path(__file__).parent / "_shims" / "sitecustomize.py"
        spec = importlib.util.spec_from_file_location("_datacheck_test_shims", shim)
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    import streaming

    return streaming


def streaming_samples(local: str) -> list[dict[str, Any]]:
    """Every sample of the MDS dataset in ``local`` as ``StreamingDataset`` reads it.  Run it in
    a worker process (``tests/formats/producers/test_mds.py``): each StreamingDataset keeps ~190
    file descriptors (its shared memory) for the life of the process, del and gc notwithstanding,
    and ~60 of them exhausted the test process's descriptors."""
    streaming_module()
    from streaming import StreamingDataset

    ds = StreamingDataset(local=local, batch_size=1, allow_unsafe_types=True)
    return [ds[i] for i in range(len(ds))]


def compress(codec: str, data: bytes, checksum: bool = False) -> bytes:
    """What streaming's own ``compress`` writes for a codec (``"zstd"``, ``"br:5"``, ...);
    ``checksum``: a zstd frame with its content checksum, which streaming never writes (a
    hostile case made by hand)."""
    if checksum:
        import zstandard

        return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data)
    streaming_module()
    from streaming.base.compression import compress as streaming_compress

    return bytes(streaming_compress(codec, data))


MDS_COLUMNS = {"image": "jpeg", "label": "int", "score": "float32"}


def mds_samples(n: int = 20, side: int = 16) -> list[dict[str, Any]]:
    """``n`` samples of :data:`MDS_COLUMNS` (JPEG bytes, label, score); sample 11's score is
    NaN."""
    return [
        {"image": jpeg(i % 3, side), "label": i, "score": np.float32(np.nan if i == 11 else i / 2)}
        for i in range(n)
    ]


def write_mds(
    folder: Path,
    n: int = 20,
    compression: str | None = None,
    hashes: tuple[str, ...] = ("sha1",),
    columns: dict[str, str] | None = None,
    samples: list[dict[str, Any]] | None = None,
    side: int = 16,
    size_limit: int | None = None,
) -> Path:
    """A dataset written by ``streaming.MDSWriter`` itself: shards + ``index.json``.

    By default :func:`mds_samples` (``n`` of them, JPEGs of ``side`` pixels) in one shard;
    ``columns`` (name -> MDS encoding) and ``samples`` (dicts) write anything else;
    ``size_limit`` splits the samples over several shards.  With ``compression`` (``"zstd:7"``,
    ``"gz"``, ...) only the compressed shards are written, as MDSWriter does.
    """
    writer = streaming_module().MDSWriter
    columns = columns or MDS_COLUMNS
    samples = mds_samples(n, side) if samples is None else samples
    limit = size_limit or 1 << 26
    with writer(
        out=str(folder),
        columns=columns,
        compression=compression,
        hashes=list(hashes),
        size_limit=limit,
    ) as out:
        for sample in samples:
            out.write(sample)
    return folder


def mds_index(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "index.json").read_text())


def mds_raw(folder: Path, shard: int = 0) -> bytes:
    """The bytes of a shard as MDSWriter laid them out, before its compression (if any)."""
    entry = mds_index(folder)["shards"][shard]
    if not entry["compression"]:
        return (folder / entry["raw_data"]["basename"]).read_bytes()
    streaming_module()
    from streaming.base.compression import decompress

    data = (folder / entry["zip_data"]["basename"]).read_bytes()
    return bytes(decompress(entry["compression"], data))


def replace_mds_shard(folder: Path, raw: bytes, shard: int = 0) -> None:
    """Put ``raw`` (shard bytes made or damaged by hand) in the place of a written shard,
    compressed as its index says, its index entry's byte counts and hashes made to match (as
    if MDSWriter had written those bytes): for hostile cases the writer cannot make."""
    streaming_module()
    from streaming.base.compression import compress as streaming_compress
    from streaming.base.hashing import get_hash

    index = mds_index(folder)
    entry = index["shards"][shard]
    infos = [(entry["raw_data"], raw)]
    if entry["compression"]:
        zipped = bytes(streaming_compress(entry["compression"], raw))
        infos.append((entry["zip_data"], zipped))
    for info, data in infos:
        info["bytes"] = len(data)
        info["hashes"] = {algo: get_hash(algo, data) for algo in info["hashes"]}
    (folder / infos[-1][0]["basename"]).write_bytes(infos[-1][1])
    (folder / "index.json").write_text(json.dumps(index, sort_keys=True))


def mds_sample_span(raw: bytes, row: int) -> tuple[int, int]:
    """Where sample ``row`` lies in a shard's bytes (its offset table's two entries)."""
    begin, end = np.frombuffer(raw, "<u4", 2, 4 + 4 * row).tolist()
    return int(begin), int(end)


def mds_value_span(raw: bytes, entry: dict[str, Any], row: int, column: str) -> tuple[int, int]:
    """Where one column value of one sample lies in a shard's bytes (``entry``: its index
    entry, for the column names and fixed sizes)."""
    start, _ = mds_sample_span(raw, row)
    sizes = entry["column_sizes"]
    n_var = sum(size is None for size in sizes)
    var = iter(np.frombuffer(raw, "<u4", n_var, start).tolist())
    pos = start + 4 * n_var
    for name, size in zip(entry["column_names"], sizes, strict=True):
        n = next(var) if size is None else size
        if name == column:
            return pos, pos + n
        pos += n
    raise KeyError(column)


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
