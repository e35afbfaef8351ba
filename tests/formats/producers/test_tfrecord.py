"""TFRecord files as the ``tfrecord`` package's ``TFRecordWriter`` writes them (tfrecord 1.14,
``tf.train.Example`` records), read back by its ``tfrecord_loader``: the oracle.

That reader does not check the records' CRCs (TensorFlow's does, and fails with DataLossError):
where a flipped byte leaves a record parseable, the oracle shows it reads other bytes than were
written, and datacheck, which checks every CRC as TensorFlow does, calls the record corrupt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._kit import flip, scan, sites, truncate

tfrecord = pytest.importorskip("tfrecord")
N = 8


def records(planted: bool = True) -> list[dict[str, Any]]:
    """Float, int and bytes features; planted: NaN in ``x`` at record 3, Inf at 6."""
    out = []
    for i in range(N):
        x = [0.5, 1.0, 1.5]
        if planted and i == 3:
            x[1] = float("nan")
        if planted and i == 6:
            x[2] = float("inf")
        out.append({"x": (x, "float"), "label": (i, "int"), "text": (f"r{i}".encode(), "byte")})
    return out


def write(path: Path, planted: bool = True) -> Path:
    writer = tfrecord.TFRecordWriter(str(path))
    for rec in records(planted):
        writer.write(rec)
    writer.close()
    return path


def oracle(path: Path) -> list[dict[str, Any]]:
    from tfrecord.reader import tfrecord_loader

    return list(tfrecord_loader(str(path), None))


def record_offsets(path: Path) -> list[int]:
    """Where each record starts (its 8-byte length, 4-byte CRC, data, 4-byte CRC)."""
    data, at, out = path.read_bytes(), 0, []
    while at < len(data):
        out.append(at)
        at += 16 + int(np.frombuffer(data, "<u8", 1, at)[0])
    return out


def test_clean_file_is_ok(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord", planted=False)
    (entry,) = scan(path).data["files"]
    assert entry["status"] == "ok" and entry["rows"] == N, entry
    assert [int(r["label"][0]) for r in oracle(path)] == list(range(N))


def test_planted_values_found_at_their_records(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord")
    assert {(r, k) for _, r, _, k in sites(scan(path))} == {(3, "nan"), (6, "inf")}
    read = oracle(path)
    assert np.isnan(read[3]["x"][1]) and np.isinf(read[6]["x"][2])


def test_truncated_file_is_corrupt(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord")
    truncate(path, -5)
    (entry,) = scan(path).data["files"]
    assert entry["status"] == "corrupt", entry
    with pytest.raises(RuntimeError):  # "Failed to read the record."
        oracle(path)


def test_flipped_data_byte_is_corrupt_at_its_record(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord")
    clean = oracle(path)
    text_at = path.read_bytes().index(b"r5")  # record 5's bytes feature
    flip(path, text_at, 0x01)  # 'r5' -> 's5': still a valid Example
    found = sites(scan(path))
    assert ("a.tfrecord", 5, None, "corrupt") in {(f, r, None, k) for f, r, _, k in found}
    assert {(r, k) for _, r, _, k in found if k != "corrupt"} == {(3, "nan"), (6, "inf")}
    read = oracle(path)  # the oracle reads it without checking the CRC: other bytes
    assert bytes(read[5]["text"]) != bytes(clean[5]["text"])


def test_flipped_length_byte_loses_the_framing(tmp_path: Path) -> None:
    path = write(tmp_path / "a.tfrecord")
    flip(path, record_offsets(path)[4] + 1, 0x01)  # record 4's length, +256
    (entry,) = scan(path).data["files"]
    assert entry["status"] == "corrupt", entry
    with pytest.raises(Exception):  # noqa: B017 - the oracle loses the framing too
        oracle(path)
