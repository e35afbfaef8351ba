"""Compressed MDS shards (``shard.NNNNN.mds.zstd``, ``.gz``, ``.bz2``, ``.br``, ``.snappy``),
written by streaming's own ``MDSWriter`` with ``compression`` set: decompressed bounded,
hash-checked, then read as usual."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _mediakit import compress, mds_raw, write_mds

import datacheck
from datacheck.formats import WorkUnit, get_format
from datacheck.formats._tensor_common import TensorFileError

CODECS = ["zstd:7", "gz", "bz2", "br:5", "snappy"]


def scan(path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1)


def only_file(folder: Path) -> dict[str, Any]:
    (entry,) = scan(folder).data["files"]
    return entry


def edit_index(folder: Path, **changes: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    shard = index["shards"][0]
    for key, value in changes.items():
        part, _, field = key.partition("__")
        if field:
            shard[part][field] = value
        else:
            shard[part] = value
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("compression", CODECS)
def test_compressed_shard_read_like_a_plain_one(compression: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression=compression)
    codec = compression.split(":")[0]
    report = scan(folder)
    (entry,) = report.data["files"]
    assert Path(entry["path"]).name == f"shard.00000.mds.{codec}"
    assert entry["format"] == "mds" and entry["rows"] == 20 and entry["status"] != "corrupt"
    assert [Path(p).name for p in report.data["ignored"]] == ["index.json"]
    f = report.findings
    assert {(int(r.row), r.column, r.check) for r in f.itertuples()} == {(11, "score", "nan")}


@pytest.mark.parametrize("compression", CODECS)
def test_shard_that_inflates_in_many_steps(compression: str, tmp_path: Path) -> None:
    """Megabyte-sized samples: the decoders hand their output back a bounded step at a time,
    and the last step of every codec must still arrive."""
    folder = write_mds(tmp_path / "mds", n=12, compression=compression, side=800)
    assert len(mds_raw(folder)) > 4 << 20
    entry = only_file(folder)
    assert entry["status"] == "flagged" and entry["rows"] == 12, entry
    assert entry["counts"] == {"nan": 1}


@pytest.mark.parametrize("compression", CODECS)
def test_flipped_byte_named_by_the_compressed_hash(compression: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression=compression, hashes=("md5", "sha1"))
    (shard,) = folder.glob("shard.*")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    entry = only_file(folder)
    assert entry["status"] == "corrupt"
    assert "md5 of the compressed shard" in entry["error"], entry["error"]


@pytest.mark.parametrize("compression", ["zstd:7", "gz", "bz2"])
def test_flipped_byte_without_hashes_is_corrupt(compression: str, tmp_path: Path) -> None:
    """Without index hashes the stream's own check finds it: gzip's CRC-32, bzip2's block CRC,
    a zstd frame's checksum when it has one (streaming's frames have none, nor have brotli
    and raw snappy: there a flipped byte shows only in the sample it lands in).  The zstd frame
    with a checksum is made by hand: MDSWriter never writes one."""
    codec = compression.split(":")[0]
    folder = write_mds(tmp_path / "mds", compression=compression, hashes=())
    (shard,) = folder.glob("shard.*")
    data = bytearray(compress(compression, mds_raw(folder), checksum=codec == "zstd"))
    data[len(data) // 3] ^= 0x01
    shard.write_bytes(bytes(data))
    edit_index(folder, zip_data__bytes=len(data))
    entry = only_file(folder)
    assert entry["status"] == "corrupt", entry
    assert entry["error"].startswith(f"TensorFileError: {codec}: "), entry["error"]


@pytest.mark.parametrize("compression", CODECS)
def test_truncated_compressed_shard(compression: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression=compression, hashes=())
    (shard,) = folder.glob("shard.*")
    shard.write_bytes(shard.read_bytes()[:-40])
    entry = only_file(folder)
    assert entry["status"] == "corrupt" and "the file holds" in entry["error"]
    edit_index(folder, zip_data__bytes=None)  # no size to compare: the decoder must notice
    entry = only_file(folder)
    assert entry["status"] == "corrupt", entry
    assert compression.split(":")[0] in entry["error"], entry["error"]


@pytest.mark.parametrize("compression", ["zstd", "gz", "br", "snappy"])
def test_decompression_bomb_stops_at_the_index_size(compression: str, tmp_path: Path) -> None:
    # 64 MiB of zeros after a real shard, compressed to a few KiB; the index says 4,000 bytes
    # (made by hand: no writer appends them)
    folder = write_mds(tmp_path / "mds", n=4, compression=compression, hashes=())
    (shard,) = folder.glob("shard.*")
    zeros = 64 << (10 if compression == "snappy" else 20)  # snappy inflates 21x at most
    shard.write_bytes(compress(compression, mds_raw(folder) + bytes(zeros)))
    edit_index(folder, raw_data__bytes=4000, zip_data__bytes=shard.stat().st_size)
    entry = only_file(folder)
    assert entry["status"] == "corrupt"
    assert "past 4000" in entry["error"] and "bomb" in entry["error"], entry["error"]


def test_shorter_than_the_index_says(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression="zstd", hashes=())
    edit_index(folder, raw_data__bytes=10**6)
    entry = only_file(folder)
    assert entry["status"] == "corrupt" and "index.json says 1000000" in entry["error"]


def test_raw_hash_checked_after_decompression(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression="gz", hashes=("sha256",))
    edit_index(folder, zip_data__hashes={}, raw_data__hashes={"sha256": "0" * 64})
    entry = only_file(folder)
    assert entry["status"] == "corrupt"
    assert "sha256 of the decompressed shard" in entry["error"]


def test_without_index_still_read(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression="bz2")
    (folder / "index.json").unlink()
    entry = only_file(folder)
    assert entry["status"] != "corrupt" and entry["rows"] == 20


def test_index_and_file_name_disagree(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", compression="zstd")
    edit_index(folder, compression="gz:9")
    entry = only_file(folder)
    assert entry["status"] == "corrupt" and "compression 'gz:9'" in entry["error"]


@pytest.mark.parametrize(
    "codec, module", [("zstd", "zstandard"), ("br", "brotli"), ("snappy", "cramjam")]
)
def test_codec_without_its_package_names_the_extra(
    codec: str, module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_mds(tmp_path / "mds", compression=codec)
    path = str(folder / f"shard.00000.mds.{codec}")
    fmt = get_format("mds")
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    hint = r'pip install -e "\.\[media\]" in a clone, or pip install "datacheck-ml\[media\]"'
    with pytest.raises(TensorFileError, match=hint):
        fmt.open(WorkUnit(path, "mds", 0, 0.0), {})


def test_keep_zip_cache_is_read_once_from_the_raw_shard(tmp_path: Path) -> None:
    """Streaming's local cache with ``keep_zip=True`` holds both files of a shard."""
    folder = write_mds(tmp_path / "mds", compression="zstd")
    (folder / "shard.00000.mds").write_bytes(mds_raw(folder))
    report = scan(folder)
    (entry,) = report.data["files"]
    assert Path(entry["path"]).name == "shard.00000.mds" and entry["rows"] == 20
    assert sorted(Path(p).name for p in report.data["ignored"]) == [
        "index.json",
        "shard.00000.mds.zstd",
    ]
    reasons = {Path(p).name: why for p, why in report.data["ignored_why"].items()}
    assert reasons == {
        "index.json": "the metadata of the dataset beside it, read with its data files",
        "shard.00000.mds.zstd": "the compressed copy of shard.00000.mds, which is read",
    }
