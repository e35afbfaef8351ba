"""Feather v1 metadata is checked before pyarrow reads it (pyarrow trusts the flatbuffer: a
damaged one segfaulted it, the commonest native crash under tests/fuzz)."""

from __future__ import annotations

import io
import random
import struct
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pytest

import datacheck
from datacheck.formats._feather_v1 import FeatherV1Error, _Table, check_feather_v1


def v1_bytes() -> bytes:
    """A Feather v1 file of every type its metadata describes differently."""
    n = 15
    table = pa.table(
        {
            "a": [1, 2, None] * (n // 3),
            "s": ["x", None, "zz"] * (n // 3),
            "c": pa.array(["u", "v", "u"] * (n // 3)).dictionary_encode(),
            "ts": pa.array([1, 2, 3] * (n // 3), pa.timestamp("ms", tz="UTC")),
            "d": pa.array([1, 2, 3] * (n // 3), pa.date32()),
            "t": pa.array([1, 2, 3] * (n // 3), pa.time32("s")),
            "b": [True, False, None] * (n // 3),
            "f": [1.5, float("nan"), 2.0] * (n // 3),
        }
    )
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        feather.write_feather(table, buf, version=1)
    return buf.getvalue()


def scan(folder: Path) -> dict[str, dict]:
    report = datacheck.scan(str(folder), executor="inprocess", workers=1)
    return {Path(f["path"]).name: f for f in report.data["files"]}


def _num_rows_at(data: bytes) -> int:
    """Where the CTable's num_rows sits in the file."""
    (length,) = struct.unpack_from("<I", data, len(data) - 8)
    start = len(data) - 8 - length
    meta = data[start : len(data) - 8]
    table = _Table(meta, struct.unpack_from("<I", meta, 0)[0], "table")
    at = table._at(1, 8)
    assert at is not None
    return start + at


def test_a_valid_v1_file_passes_and_reads() -> None:
    check_feather_v1(pa.BufferReader(v1_bytes()))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: b"FEA1\0\0\0\0FEA1", "metadata of 0 bytes"),
        (lambda d: d[:-4], "no FEA1 at the end"),
        (lambda d: d[:-8] + struct.pack("<I", 1 << 20) + b"FEA1", "metadata of 1048576 bytes"),
        (lambda d: d[:4] + d[68:], "outside the data"),  # buffers shifted, offsets kept
    ],
)
def test_damaged_metadata_is_refused(damage, message: str) -> None:
    with pytest.raises(FeatherV1Error, match=message):
        check_feather_v1(pa.BufferReader(damage(v1_bytes())))


def test_row_count_that_disagrees_with_the_columns(tmp_path: Path) -> None:
    """pyarrow builds the table with the declared row count; to_batches then read past the
    columns' end and segfaulted."""
    data = bytearray(v1_bytes())
    struct.pack_into("<q", data, _num_rows_at(bytes(data)), 2**31 - 1)
    (tmp_path / "rows.feather").write_bytes(bytes(data))
    entry = scan(tmp_path)["rows.feather"]
    assert entry["status"] == "corrupt"
    assert "column 0 holds 15 values, the table says 2147483647 rows" in entry["error"]


def test_seeded_mutants_never_crash_the_reader(tmp_path: Path) -> None:
    """300 mutants (bit flips, 8-byte fields, duplicated runs): before the check many
    segfaulted pyarrow; each now ends as a finding, none as a crash."""
    seed = v1_bytes()
    rng = random.Random(0)
    for i in range(300):
        data = bytearray(seed)
        at = rng.randrange(len(data) - 8)
        op = i % 3
        if op == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            value = rng.choice([2**31 - 1, 2**32 - 1, 2**40, -1, 0])
            data[at : at + 8] = (value % (1 << 64)).to_bytes(8, "little")
        else:
            data[at:at] = data[at : at + rng.randint(1, 128)]
        (tmp_path / f"m{i:03d}.feather").write_bytes(bytes(data))
    files = scan(tmp_path)
    crashed = [n for n, f in files.items() if (f.get("error") or "").startswith("the reader")]
    assert len(files) == 300 and crashed == []
