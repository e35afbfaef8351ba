"""The fuzzer's seeds: a small valid file (or dataset folder) of every format datacheck reads.

All are generated here, deterministically, in the shapes the real writers produce (the media
and dataset ones through ``tests/_mediakit.py``).  Single files are keyed by their extension;
multi-file datasets (a Megatron ``.idx``/``.bin`` pair, MDS ``index.json`` + shard, a Hugging
Face ``save_to_disk`` split) by a name, as ``{relative path: bytes}``: the fuzzer damages one
of their files at a time and keeps its siblings intact, so the reader gets past detection.
The tensor seeds are left out when their library is not installed.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import struct
import sys
import tarfile
import tempfile
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: _mediakit

NAN = float("nan")
SCHEMA = "tokens:\n  dtype: uint16\n  vocab_size: 1000\nimages:\n  constant: true\n"
"""The schema every fuzz scan uses: flat token files need their dtype declared."""


def _table(rows: int = 64) -> pa.Table:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rows)
    x[[3, 17]] = [NAN, np.inf]
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(x),
            "f": pa.array(rng.standard_normal(rows).astype(np.float32)),
            "s": pa.array([f"r{i}" for i in range(rows)]),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 4).astype(np.float32)), 4
            ),
            "tags": pa.array([[float(i), NAN] if i % 9 == 0 else [1.0] for i in range(rows)]),
        }
    )


def _ipc(table: pa.Table, stream: bool) -> bytes:
    sink = io.BytesIO()
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=16)
    return sink.getvalue()


def _to_bytes(write: Callable[[io.BytesIO], None]) -> bytes:
    buf = io.BytesIO()
    write(buf)
    return buf.getvalue()


def _feather_v1(table: pa.Table) -> bytes:
    """Feather v1 (deprecated for writing, still read: files of that age exist)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _to_bytes(lambda b: feather.write_feather(table, b, version=1))


def _npy(x: np.ndarray) -> bytes:
    return _to_bytes(lambda b: np.save(b, x))


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tensor_seeds(x: np.ndarray) -> dict[str, bytes]:
    seeds = {
        "npy": _npy(x),
        "npz": _to_bytes(lambda b: np.savez_compressed(b, x=x, y=x[:, :1])),
        "tar": _tar([(f"s{i:03d}.x.npy", _npy(sample)) for i, sample in enumerate(x[:8])]),
    }
    try:
        from safetensors.numpy import save as st_save

        seeds["safetensors"] = st_save({"x": x})
    except ImportError:
        pass
    try:
        import torch

        seeds["pt"] = _to_bytes(lambda b: torch.save({"x": torch.from_numpy(x)}, b))
    except ImportError:
        pass
    try:
        import h5py

        with tempfile.TemporaryDirectory() as d:
            with h5py.File(f"{d}/s.h5", "w") as h:
                h.create_dataset("x", data=x, chunks=(8, 4), compression="gzip")
            seeds["h5"] = Path(f"{d}/s.h5").read_bytes()
    except ImportError:
        pass
    return seeds


def _image(fmt: str, frames: int = 1, seed: int = 0, **kw: object) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    imgs = [
        Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)) for _ in range(frames)
    ]
    extra = {"save_all": True, "append_images": imgs[1:]} if frames > 1 else {}
    return _to_bytes(lambda b: imgs[0].save(b, fmt, **extra, **kw))


def _image_seeds() -> dict[str, bytes]:
    return {
        "jpg": _image("JPEG"),
        "png": _image("PNG"),
        "gif": _image("GIF", frames=3, duration=10, loop=0),
        "tiff": _image("TIFF", frames=2, compression="tiff_deflate"),
        "webp": _image("WEBP", quality=50),
        "bmp": _image("BMP"),
    }


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = (crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1
        crc &= 0xFFFFFFFF
    return crc


def _fixed_ogg_serial(data: bytes) -> bytes:
    """libsndfile picks a random Ogg stream serial: set it to 1 (page checksums redone)."""
    out, pos = bytearray(data), 0
    while pos + 27 <= len(out) and out[pos : pos + 4] == b"OggS":
        segments = out[pos + 26]
        end = pos + 27 + segments + sum(out[pos + 27 : pos + 27 + segments])
        struct.pack_into("<I", out, pos + 14, 1)
        struct.pack_into("<I", out, pos + 22, 0)
        struct.pack_into("<I", out, pos + 22, _ogg_crc(bytes(out[pos:end])))
        pos = end
    return bytes(out)


def _without_peak(wav: bytes) -> bytes:
    """libsndfile's float WAVs carry a PEAK chunk with a timestamp: dropped."""
    out, pos = bytearray(wav[:12]), 12
    while pos + 8 <= len(wav):
        (size,) = struct.unpack_from("<I", wav, pos + 4)
        chunk = wav[pos : pos + 8 + size + (size & 1)]
        if chunk[:4] != b"PEAK":
            out += chunk
        pos += len(chunk)
    struct.pack_into("<I", out, 4, len(out) - 8)
    return bytes(out)


def _audio(fmt: str, subtype: str, nan: bool = False) -> bytes:
    import soundfile as sf

    x = np.random.default_rng(0).uniform(-0.5, 0.5, (400, 2)).astype(np.float32)
    if nan:
        x[100, 1] = np.nan
    data = _to_bytes(lambda b: sf.write(b, x, 8000, format=fmt, subtype=subtype))
    if fmt == "WAV":
        return _without_peak(data)
    return _fixed_ogg_serial(data) if fmt == "OGG" else data


def _audio_seeds() -> dict[str, bytes]:
    return {
        "wav": _audio("WAV", "FLOAT", nan=True),
        "flac": _audio("FLAC", "PCM_16"),
        "ogg": _audio("OGG", "VORBIS"),
    }


def _example(x: list[float], blob: bytes) -> bytes:
    """A ``tf.train.Example`` with a packed FloatList ``x`` and a BytesList ``image``."""
    from _mediakit import tf_example

    return tf_example({"x": x}, {"image": blob})


def _tfrecord(records: list[bytes]) -> bytes:
    from datacheck._tfrecord import masked_crc

    out = b""
    for r in records:
        head = struct.pack("<Q", len(r))
        out += head + struct.pack("<I", masked_crc(head)) + r + struct.pack("<I", masked_crc(r))
    return out


def _record_seeds() -> dict[str, bytes]:
    jpg = _image("JPEG")
    records = [_example([float(i), NAN if i == 2 else 0.5], jpg) for i in range(6)]
    data = _tfrecord(records)
    tokens = np.random.default_rng(2).integers(0, 1000, 300).astype("<u2")
    tokens[[7, 200]] = [1000, 65535]
    return {
        "tfrecord": data,
        "gz.tfrecord": gzip.compress(data, mtime=0),
        "bin": tokens.tobytes(),
        "wds.tar": _tar(
            [("a.jpg", jpg), ("a.cls", b"3"), ("b.png", _image("PNG", seed=1))]
            + [("b.cls", b"4"), ("c.wav", _audio("WAV", "FLOAT", nan=True))]
        ),
    }


@functools.cache
def seeds() -> dict[str, bytes]:
    """Extension -> the bytes of a small valid file with a few planted faults (shared: do not
    modify)."""
    table = _table()
    jsonl = "".join(
        json.dumps({"id": i, "x": v, "tags": [v, 1.0]}) + "\n"
        for i, v in enumerate(table["x"].to_pylist())
    )
    flat = table.select(["id", "x", "f", "s"])
    x = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
    x[5, 1] = np.nan
    out = {
        "parquet": _to_bytes(lambda b: pq.write_table(table, b, row_group_size=16)),
        "csv": _to_bytes(lambda b: pacsv.write_csv(flat, b)),
        "arrow": _ipc(table, stream=False),
        "arrows": _ipc(table, stream=True),
        "feather": _feather_v1(flat),
        "jsonl": jsonl.encode(),
    }
    out.update(_tensor_seeds(x))
    out.update(_image_seeds())
    out.update(_audio_seeds())
    out.update(_record_seeds())
    return out


def _megatron(n: int = 12) -> dict[str, bytes]:
    """A Megatron-LM indexed dataset (one sequence per document), as its builder writes it."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 1000, int(rng.integers(0, 9))).astype("<u2") for _ in range(n)]
    docs[4][:1] = 1000  # out of the schema's vocabulary
    lengths = np.array([len(d) for d in docs], dtype="<i4")
    pointers = np.zeros(n, dtype="<i8")
    np.cumsum(lengths[:-1].astype(np.int64) * 2, out=pointers[1:])
    header = struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, n, n + 1)
    idx = header + lengths.tobytes() + pointers.tobytes() + np.arange(n + 1, dtype="<i8").tobytes()
    return {"data.idx": idx, "data.bin": b"".join(d.tobytes() for d in docs)}


def _folder_files(write: Callable[[Path], object]) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "ds"
        write(root)
        return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@functools.cache
def datasets() -> dict[str, dict[str, bytes]]:
    """Name -> the files of a small valid multi-file dataset (one of them damaged at a time).

    A Hugging Face ``DatasetDict`` (``dataset_dict.json`` above its splits) too.  The MDS
    index carries no hashes, as ``MDSWriter(hashes=[])`` writes it, so a damaged
    shard is parsed rather than refused by its checksum.
    """
    from _mediakit import hf_split_files, write_mds

    hf = hf_split_files("train", n=8)
    out = {"megatron": _megatron(), "hf": hf}
    out["hf-dict"] = {
        "dataset_dict.json": json.dumps({"splits": ["train", "test"]}).encode(),
        **{f"train/{k}": v for k, v in hf.items()},
        **{f"test/{k}": v for k, v in hf_split_files("test", n=2, files=1).items()},
    }
    for codec in (None, "zstd", "gz"):
        name = f"mds-{codec}" if codec else "mds"
        out[name] = _folder_files(lambda p, c=codec: write_mds(p, n=6, compression=c, hashes=()))
    return out


def _gz_zeros(prefix: bytes, mib: int, suffix: bytes) -> bytes:
    """A gzip file of ``prefix``, ``mib`` MiB of zeros, ``suffix``: one member per MiB (a
    reader sees one stream), so a bomb of any size is built in milliseconds."""
    zeros = gzip.compress(bytes(1 << 20), mtime=0)
    return gzip.compress(prefix, mtime=0) + zeros * mib + gzip.compress(suffix, mtime=0)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def _bombs() -> dict[str, bytes | dict[str, bytes]]:
    """Decompression bombs and lying headers: small files that declare or inflate to GiBs."""
    from datacheck._tfrecord import masked_crc

    mib = 768
    head = struct.pack("<Q", mib << 20)
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        npy, {"descr": "<f4", "fortran_order": False, "shape": ((mib << 20) // 4,)}
    )
    info = tarfile.TarInfo("s000.x.npy")
    info.size = len(npy.getvalue()) + (mib << 20)
    tar_prefix = info.tobuf() + npy.getvalue()
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    png = _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"\0" * 1024))
    import zstandard

    zstd = zstandard.ZstdCompressor(level=3).compressobj()
    shard = b"".join(zstd.compress(bytes(1 << 20)) for _ in range(512)) + zstd.flush()
    mds = dict(datasets()["mds-zstd"])
    index = json.loads(mds["index.json"])
    index["shards"][0]["zip_data"]["bytes"] = len(shard)  # raw_data still says 1 KB: a lie
    mds.update({"shard.00000.mds.zstd": shard, "index.json": json.dumps(index).encode()})
    return {
        "bomb.gz.tfrecord": _gz_zeros(head + struct.pack("<I", masked_crc(head)), mib, b"\0" * 4),
        "bomb.tgz": _gz_zeros(tar_prefix, mib, bytes(-len(tar_prefix) % 512 + 1024)),
        "bomb.png": b"\x89PNG\r\n\x1a\n" + png + _png_chunk(b"IEND", b""),
        "bomb.mds-zstd": mds,
    }


def hostile() -> dict[str, bytes | dict[str, bytes]]:
    """Hand-made hostile files and datasets, in every batch of the first round."""
    return {
        "deep.jsonl": b'{"a": ' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}\n",
        "deeper.jsonl": b'{"a": ' + b"[" * 10000 + b"1" + b"]" * 10000 + b"}\n",
        "tiny.feather": b"FEA1\0\0\0\0FEA1",
        "wide.jsonl": (json.dumps({f"k{i}": i for i in range(5000)}) + "\n").encode(),
        **_bombs(),
    }
