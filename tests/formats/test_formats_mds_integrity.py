"""MDS integrity: every hash streaming's ``hashes`` setting can list is checked (hashlib's and
xxhash's), and what a flipped byte does to a shard whose index lists none."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _mediakit import (
    compress,
    mds_index,
    mds_raw,
    mds_sample_span,
    mds_value_span,
    replace_mds_shard,
    write_mds,
)

import datacheck
from datacheck.formats import WorkUnit, get_format
from datacheck.formats._tensor_common import TensorFileError

HASHLIB = ["md5", "sha1", "sha224", "sha256", "sha384", "sha512", "blake2b", "blake2s", "sha3_256"]
XXHASH = ["xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128"]


def jpeg_byte(folder: Path) -> int:
    """A byte inside sample 0's JPEG entropy data: flipped, the image still decodes."""
    begin, _ = mds_sample_span(mds_raw(folder), 0)
    return begin + 4 + 300  # past the sample's one size (the image's)


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
    flip(folder / "shard.00000.mds", jpeg_byte(folder))
    entry = only_file(folder)
    assert entry["status"] == "flagged" and entry["counts"] == {"nan": 1}, entry


@pytest.mark.parametrize("algo", HASHLIB + XXHASH)
def test_every_streaming_hash_is_checked(algo: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", hashes=(algo,))
    assert only_file(folder)["status"] == "flagged"  # the planted NaN, nothing else
    flip(folder / "shard.00000.mds", jpeg_byte(folder))
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
        "index.json lists a xxh64 hash: checking it needs xxhash (the media extra): "
        'pip install -e ".[media]" in a clone, or pip install "datacheck-ml[media]"'
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


# --- a flipped byte without hashes: every value read as streaming decodes it ---------------

COLUMNS = {  # name -> encoding: one of each MDS encoding the value checks read
    "blob": "bytes",
    "dec": "str_decimal",
    "f": "str_float",
    "i": "str_int",
    "js": "json",
    "n": "int",
    "nd": "ndarray",
    "ndf": "ndarray:float32",
    "ndfix": "ndarray:float32:2,3",
    "pic": "pil",
    "pk": "pkl",
    "text": "str",
}
ROWS = 8


def every_encoding_samples() -> list[dict[str, Any]]:
    """A sample per row with a column of each encoding; row 3's ``str_float`` is NaN."""
    from PIL import Image

    return [
        {
            "blob": bytes(range(i, i + 10)),
            "dec": Decimal("1.25"),
            "f": float("nan") if i == 3 else 0.5,
            "i": 12345,
            "js": {"a": [1, 2], "i": i},
            "n": i,
            "nd": np.arange(6, dtype=np.int16).reshape(2, 3),
            "ndf": np.ones(4, np.float32),
            "ndfix": np.ones((2, 3), np.float32),
            "pic": Image.new("L", (4, 3), i),
            "pk": {"k": [i, "v"]},
            "text": f"héllo wörld {i}",
        }
        for i in range(ROWS)
    ]


def write_every_encoding(folder: Path, compression: str | None = None) -> Path:
    """The shard MDSWriter writes of :func:`every_encoding_samples`, without index hashes."""
    return write_mds(
        folder,
        compression=compression,
        hashes=(),
        columns=COLUMNS,
        samples=every_encoding_samples(),
    )


def every_encoding_shard(tmp_path: Path, compression: str | None = None) -> tuple[Path, bytes]:
    """The folder :func:`write_every_encoding` writes, and its shard's (decompressed) bytes
    (the config block inside names the compression: the bytes differ between codecs)."""
    folder = write_every_encoding(tmp_path / "clean", compression)
    return folder, mds_raw(folder)


def value_span(folder: Path, raw: bytes, row: int, column: str) -> tuple[int, int]:
    """Where one column value of one sample lies in the shard."""
    return mds_value_span(raw, mds_index(folder)["shards"][0], row, column)


def damaged_copy(tmp_path: Path, raw: bytes) -> Path:
    """The every-encoding dataset with its shard's bytes replaced by ``raw`` (damaged by
    hand: the writer cannot make these bytes)."""
    folder = write_every_encoding(tmp_path / "m")
    replace_mds_shard(folder, raw)
    return folder


def scan_sites(folder: Path) -> tuple[dict[str, Any], set[tuple[int, str, str]]]:
    report = datacheck.scan(str(folder), executor="inprocess", workers=1)
    (entry,) = report.data["files"]
    f = report.findings
    return entry, {(int(r.row), r.column, r.check) for r in f[f["row"].notna()].itertuples()}


PLANTED = (3, "f", "nan")


def test_every_encoding_of_a_clean_shard_reads(tmp_path: Path) -> None:
    folder = write_every_encoding(tmp_path / "m")
    entry, sites = scan_sites(folder)
    assert entry["columns"] == COLUMNS
    assert sites == {PLANTED}, sites


@pytest.mark.parametrize(
    "column, at, bit, check",
    [
        ("text", 2, 0x80, "corrupt"),  # the second byte of 'é': no longer UTF-8
        ("i", 2, 0x40, "corrupt"),  # '12345' -> '12s45'
        ("f", 1, 0x40, "corrupt"),  # '0.5' -> '0n5'
        ("dec", 1, 0x40, "corrupt"),  # '1.25' -> '1n25'
        ("js", 0, 0x01, "corrupt"),  # '{' -> 'z'
        ("nd", 0, 0x40, "corrupt"),  # the dtype code: 17 (int16) -> 81, no dtype
        ("ndf", 0, 0x08, "corrupt"),  # ndim 1 -> 3: the shape header runs into the values
        ("ndfix", 3, 0x40, "inf"),  # 1.0f (0x3f800000) -> 0x7f800000: +Inf
        ("pic", 0, 0x10, "corrupt"),  # width 4 -> 20: more pixels than the raw bytes
        ("pic", 12, 0x02, "corrupt"),  # mode 'L' -> 'N': not a mode
        ("pk", -1, 0x01, "corrupt"),  # STOP '.' -> '/': the pickle never ends
    ],
)
def test_flipped_byte_found_in_the_value_it_lands_in(
    column: str, at: int, bit: int, check: str, tmp_path: Path
) -> None:
    clean, data = every_encoding_shard(tmp_path)
    raw = bytearray(data)
    start, end = value_span(clean, data, 5, column)
    raw[(start if at >= 0 else end) + at] ^= bit
    entry, sites = scan_sites(damaged_copy(tmp_path, bytes(raw)))
    assert entry["status"] == "flagged", entry
    assert sites == {PLANTED, (5, column, check)}, sites


@pytest.mark.parametrize("column, at", [("n", 0), ("blob", 3), ("text", 0), ("pic", 20)])
def test_flipped_byte_that_still_decodes_is_not_detectable(
    column: str, at: int, tmp_path: Path
) -> None:
    """An int, raw bytes, 'h' -> 'i' in a string, a pixel: streaming reads another value
    without error, and without an index hash nothing can tell (the README says so)."""
    clean, data = every_encoding_shard(tmp_path)
    raw = bytearray(data)
    raw[value_span(clean, data, 5, column)[0] + at] ^= 0x01
    assert scan_sites(damaged_copy(tmp_path, bytes(raw)))[1] == {PLANTED}


def decompress(codec: str, data: bytes) -> bytes | None:
    """The codec's own whole-buffer decoder (None: it refuses the stream)."""
    import brotli
    import cramjam
    import zstandard

    try:
        if codec == "zstd":
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
        if codec == "br":
            return bytes(brotli.decompress(data))
        return bytes(cramjam.snappy.decompress_raw(data))
    except (zstandard.ZstdError, brotli.error, cramjam.DecompressionError):
        return None


def first_flip(codec: str, raw: bytes, lands: Callable[[bytes | None], bool]) -> bytes:
    """The compressed shard with the first single-bit flip whose decoded bytes ``lands``."""
    data = compress(codec, raw)
    for pos in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            if lands(decompress(codec, bytes(damaged))):
                return bytes(damaged)
    raise AssertionError(f"no single-bit flip of the {codec} stream lands there")


def write_compressed(folder: Path, codec: str, data: bytes) -> Path:
    """The every-encoding shard compressed by MDSWriter (no checksum, no index hashes, as it
    writes by default), its compressed bytes then replaced by ``data`` (damaged by hand)."""
    write_every_encoding(folder, compression=codec)
    (folder / f"shard.00000.mds.{codec}").write_bytes(data)
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0]["zip_data"]["bytes"] = len(data)
    (folder / "index.json").write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize("codec", ["zstd", "br", "snappy"])
def test_compressed_flip_that_breaks_the_stream(codec: str, tmp_path: Path) -> None:
    _, raw = every_encoding_shard(tmp_path, codec)
    data = first_flip(codec, raw, lambda out: out is None)
    entry, sites = scan_sites(write_compressed(tmp_path / "m", codec, data))
    assert entry["status"] == "corrupt" and not sites
    assert entry["error"].startswith(f"TensorFileError: {codec}"), entry["error"]


@pytest.mark.parametrize("codec", ["zstd", "br", "snappy"])
def test_compressed_flip_into_the_offset_table(codec: str, tmp_path: Path) -> None:
    _, raw = every_encoding_shard(tmp_path, codec)
    table = 4 + 4 * (ROWS + 1)

    def lands(out: bytes | None) -> bool:
        return out is not None and len(out) == len(raw) and out[:table] != raw[:table]

    data = first_flip(codec, raw, lands)
    entry, sites = scan_sites(write_compressed(tmp_path / "m", codec, data))
    assert entry["status"] == "corrupt" and not sites
    assert (
        "sample" in entry["error"]
        and "index.json" in entry["error"]
        or ("offset table is damaged" in entry["error"])
    ), entry["error"]


def reader_sites(shard: Path) -> set[tuple[int | None, str | None, str]]:
    """(row, column, check) of what the MDS reader finds in a shard (no scan around it)."""
    opened = get_format("mds").open(WorkUnit(str(shard), "mds", 0, 0.0), {})
    return {(f.row, f.column, f.check) for chunk in opened.chunks for f in chunk.findings}


@pytest.mark.parametrize("codec", ["zstd", "br", "snappy"])
def test_compressed_flips_that_break_one_value(codec: str, tmp_path: Path) -> None:
    """Every single-bit flip of the compressed stream that still inflates to the shard's size,
    changes bytes inside one value only, and makes streaming's own ``mds_decode`` raise (the
    oracle; pickles left out: that decoder would unpickle them) is found at that sample's row
    and column."""
    from _mediakit import streaming_module

    streaming_module()
    from streaming.base.format.mds.encodings import mds_decode

    clean, raw = every_encoding_shard(tmp_path, codec)
    entry = mds_index(clean)["shards"][0]
    encodings = dict(zip(entry["column_names"], entry["column_encodings"], strict=True))
    spans = [(r, c, *value_span(clean, raw, r, c)) for r in range(ROWS) for c in COLUMNS]
    data = compress(codec, raw)
    shard = write_compressed(tmp_path / "m", codec, data) / f"shard.00000.mds.{codec}"
    clean_bytes = np.frombuffer(raw, np.uint8)
    broken, missed = 0, []
    for pos in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            out = decompress(codec, bytes(damaged))
            if out is None or len(out) != len(raw) or out == raw:
                continue
            diff = np.flatnonzero(np.frombuffer(out, np.uint8) != clean_bytes)
            inside = [s for s in spans if s[2] <= diff[0] and diff[-1] < s[3]]
            if not inside or encodings[inside[0][1]] == "pkl":
                continue
            row, column, start, end = inside[0]
            try:
                mds_decode(encodings[column], out[start:end])
                continue
            except Exception:  # noqa: BLE001 - whatever streaming's decoder raises
                broken += 1
            shard.write_bytes(bytes(damaged))
            if (row, column, "corrupt") not in reader_sites(shard):
                missed.append((pos, bit, row, column))
    assert broken > 0 and not missed, (broken, missed)


def test_flagged_samples_read_back(tmp_path: Path) -> None:
    """flagged_rows on a shard: numbers as numbers, text encodings as text, the rest as the
    bytes the shard holds; a sample whose sizes do not add up comes back all null."""
    raw = bytearray(every_encoding_shard(tmp_path)[1])
    start, _ = mds_sample_span(bytes(raw), 6)  # sample 6: its first size
    raw[start : start + 4] = np.uint32(3).tobytes()
    folder = damaged_copy(tmp_path, bytes(raw))
    report = datacheck.scan(str(folder), executor="inprocess", workers=1)
    rows = report.flagged_rows("shard.00000.mds")
    assert list(rows.index) == [3, 6]
    three = rows.loc[3]
    assert three["_checks"] == "f: nan" and three["f"] == "nan" and three["n"] == 3
    assert three["text"] == "héllo wörld 3" and three["js"] == '{"a": [1, 2], "i": 3}'
    assert three["blob"] == bytes(range(3, 13))
    assert rows.loc[6, "_checks"] == "corrupt" and rows.loc[6, ["n", "text"]].isna().all()


def test_zstd_content_checksum_catches_every_flip_that_changes_the_shard(tmp_path: Path) -> None:
    """A frame written with its checksum (by hand: streaming's have none): zstandard verifies
    it, so no single-bit flip that changes the decompressed shard goes unnoticed."""
    import io

    import zstandard

    from datacheck.formats._mds_zip import _chunks

    _, raw = every_encoding_shard(tmp_path)
    data = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw)
    unnoticed = []
    for pos in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            try:
                out = b"".join(_chunks("zstd", io.BytesIO(bytes(damaged)), len(raw)))
            except TensorFileError:
                continue
            if out != raw:
                unnoticed.append((pos, bit))
    assert not unnoticed
