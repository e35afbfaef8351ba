"""MDS integrity: every hash streaming's ``hashes`` setting can list is checked (hashlib's and
xxhash's), and what a flipped byte does to a shard whose index lists none."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _mediakit import write_mds

import datacheck
from datacheck.formats import WorkUnit, get_format
from datacheck.formats._tensor_common import TensorFileError

HASHLIB = ["md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s", "sha3_256"]
XXHASH = ["xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128"]
JPEG_BYTE = 4 + 4 * 21 + 300
"""A byte inside sample 0's JPEG entropy data: flipped, the image still decodes."""


def only_file(folder: Path) -> dict[str, Any]:
    (entry,) = datacheck.scan(str(folder), executor="inprocess", workers=1).data["files"]
    return entry


def flip(path: Path, at: int, bit: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= bit
    path.write_bytes(bytes(data))


def edit_raw_hashes(folder: Path, hashes: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0]["raw_data"]["hashes"] = hashes
    (folder / "index.json").write_text(json.dumps(index))


def open_shard(folder: Path) -> None:
    (shard,) = folder.glob("shard.*")
    opened = get_format("mds").open(WorkUnit(str(shard), "mds", 0, 0.0), {})
    for _ in opened.chunks:
        pass


def test_payload_byte_flip_is_invisible_without_a_hash(tmp_path: Path) -> None:
    """The baseline the hashes are for: a JPEG that still decodes after the flip."""
    folder = write_mds(tmp_path / "mds", hashes=())
    flip(folder / "shard.00000.mds", JPEG_BYTE)
    entry = only_file(folder)
    assert entry["status"] == "flagged" and entry["counts"] == {"nan": 1}, entry


@pytest.mark.parametrize("algo", HASHLIB + XXHASH)
def test_every_streaming_hash_is_checked(algo: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", hashes=(algo,))
    assert only_file(folder)["status"] == "flagged"  # the planted NaN, nothing else
    flip(folder / "shard.00000.mds", JPEG_BYTE)
    entry = only_file(folder)
    assert entry["status"] == "corrupt", entry
    assert entry["error"].startswith(f"TensorFileError: {algo} of the shard is "), entry["error"]


@pytest.mark.parametrize("algo", XXHASH)
@pytest.mark.parametrize("compression", ["zstd", "br"])
def test_xxhash_of_compressed_and_decompressed_shard(
    algo: str, compression: str, tmp_path: Path
) -> None:
    folder = write_mds(tmp_path / "mds", compression=compression, hashes=(algo,))
    assert only_file(folder)["status"] == "flagged"
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0]["raw_data"]["hashes"][algo] = "0" * 8
    (folder / "index.json").write_text(json.dumps(index))
    entry = only_file(folder)
    assert entry["error"].startswith(f"TensorFileError: {algo} of the decompressed shard")
    (shard,) = folder.glob("shard.*")
    flip(shard, shard.stat().st_size // 2)
    entry = only_file(folder)
    assert entry["error"].startswith(f"TensorFileError: {algo} of the compressed shard"), entry


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_xxhash_missing_is_corrupt_naming_the_extra(
    compression: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never a silent pass: the rule of a codec whose package is missing."""
    folder = write_mds(tmp_path / "mds", compression=compression, hashes=("xxh64",))
    monkeypatch.setitem(sys.modules, "xxhash", None)  # as if not installed
    with pytest.raises(TensorFileError) as info:
        open_shard(folder)
    assert str(info.value) == (
        "index.json lists a xxh64 hash: checking it needs the xxhash package: "
        "pip install 'datacheck-ml[media]'"
    )


@pytest.mark.parametrize(
    "hashes, reason",
    [
        ({"crc99": "00"}, "index.json lists a hash 'crc99' that datacheck does not know"),
        ({"shake_128": "00"}, "index.json lists a hash 'shake_128' that datacheck does not know"),
        ({"sha1": 5}, "index.json: the shard's 'sha1' hash is 5, not a hex digest"),
        (["sha1"], "index.json: the shard's hashes are ['sha1']"),
    ],
)
def test_hashes_that_cannot_be_checked_are_corrupt(
    hashes: Any, reason: str, tmp_path: Path
) -> None:
    folder = write_mds(tmp_path / "mds")
    edit_raw_hashes(folder, hashes)
    entry = only_file(folder)
    assert entry["status"] == "corrupt" and reason in entry["error"], entry
