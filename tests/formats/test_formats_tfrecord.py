"""TFRecord: both checksums of every record, Example features checked, gzip too."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pytest
from _mediakit import tf_example as example
from PIL import Image
from tensorboard.summary.writer.record_writer import RecordWriter

import datacheck
from datacheck._tfrecord import crc32c
from datacheck.formats._tfrecord import parse_example


def jpeg() -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def records(n: int = 12) -> list[bytes]:
    good = jpeg()
    out = []
    for i in range(n):
        x = [float(i), 0.5]
        if i == 4:
            x[1] = float("nan")
        if i == 6:
            x[0] = float("-inf")
        out.append(example({"x": x}, {"image": good[:200] if i == 8 else good}))
    return out


def write(path: Path, recs: list[bytes], gz: bool = False) -> Path:
    buf = io.BytesIO()
    writer = RecordWriter(buf)  # tensorboard's writer: an independent framing/CRC oracle
    for r in recs:
        writer.write(r)
    data = buf.getvalue()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def scan(path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1)


def sites(report: datacheck.Report) -> set[tuple[int, str, str]]:
    f = report.findings
    return {(int(r.row), r.column, r.check) for r in f[f["row"].notna()].itertuples()}


def test_crc32c_known_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_parse_example() -> None:
    feats = parse_example(example({"x": [1.0, 2.0]}, {"b": b"zz"}))
    assert feats is not None
    assert feats["x"][0] == "float" and feats["x"][1].tolist() == [1.0, 2.0]
    assert feats["b"] == ("bytes", [b"zz"])


@pytest.mark.parametrize("gz", [False, True])
def test_features_checked(gz: bool, tmp_path: Path) -> None:
    report = scan(write(tmp_path / "train.tfrecord", records(), gz))
    entry = report.data["files"][0]
    assert entry["format"] == "tfrecord" and entry["rows"] == 12
    assert sites(report) == {(4, "x", "nan"), (6, "x", "inf"), (8, "image", "corrupt")}


def test_flipped_byte_in_a_record(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord", records())
    data = bytearray(path.read_bytes())
    lengths = [len(r) for r in records()]
    at = sum(16 + n for n in lengths[:3]) + 12 + 5  # inside record 3's data
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    report = scan(path)
    assert (3, "record", "corrupt") in sites(report)
    assert report.data["files"][0]["rows"] == 12  # the rest is still read


def test_flipped_length_loses_the_framing(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord", records())
    data = bytearray(path.read_bytes())
    data[16 + len(records()[0])] ^= 0x01  # record 1's length
    path.write_bytes(bytes(data))
    entry = scan(path).data["files"][0]
    assert entry["status"] == "corrupt" and "record 1" in entry["error"]


@pytest.mark.parametrize("gz", [False, True])
def test_truncated(gz: bool, tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord", records(), gz)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])
    entry = scan(path).data["files"][0]
    assert entry["status"] == "corrupt", entry


def test_a_record_over_the_memory_budget_is_refused_before_reading(tmp_path: Path) -> None:
    """A gzip TFRecord of 80 KB whose one record inflates to 80 MiB (found by tests/fuzz: a
    768 MiB record took 850 MB): past a quarter of --unit-memory-mb it is corrupt, unread."""
    import struct
    import zlib

    from datacheck._tfrecord import masked_crc

    n = 80 << 20
    head = struct.pack("<Q", n)
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: a gzip container
    parts = [z.compress(head + struct.pack("<I", masked_crc(head)))]
    parts += [z.compress(bytes(1 << 20)) for _ in range(n >> 20)]
    parts += [z.compress(struct.pack("<I", masked_crc(bytes(n)))), z.flush()]
    path = tmp_path / "bomb.tfrecord"
    path.write_bytes(b"".join(parts))
    report = datacheck.scan(str(path), executor="inprocess", workers=1, unit_memory_mb=256)
    entry = report.data["files"][0]
    assert entry["status"] == "corrupt"
    assert "record 0: 83886080 bytes, over the 64 MiB a unit may decode" in entry["error"]
    assert datacheck.scan(str(path), executor="inprocess", workers=1).data["files"][0][
        "status"
    ] in ("ok", "flagged")  # under the default bound the record is read and checked
