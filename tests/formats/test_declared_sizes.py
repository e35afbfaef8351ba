"""Files that declare more than they hold, or more than a unit may decode: each is refused by
its reader, before allocating, with the reason (not by the worker's memory limit), and files
that are only large stream through in bounded memory with exact findings."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _mediakit import varint

import datacheck
from datacheck.formats._parquet_meta import encrypted_columns

NAN = float("nan")
SMALL_MB = 64
"""The unit memory bound of these scans: far below what the hostile files claim."""


def _scan(path: Path, tmp_path: Path, **kw: Any) -> dict[str, Any]:
    """The report entry of ``path`` scanned in an isolated worker under :data:`SMALL_MB`."""
    kw.setdefault("unit_memory_mb", SMALL_MB)
    report = datacheck.scan(str(path), out=tmp_path / "out", workers=1, **kw)
    (entry,) = report.data["files"]
    return entry


def _refused(entry: dict[str, Any], reason: str) -> None:
    assert entry["status"] == "corrupt", entry
    assert reason in entry["error"], entry["error"]
    assert "the reader needed more than" not in entry["error"]


# -- Parquet: a footer that lies -------------------------------------------------------------


def _i64_field(n: int) -> bytes:
    """A Thrift compact i64 field one id after the previous one, holding ``n``."""
    return b"\x16" + varint((n << 1) ^ (n >> 63))


def _lying_parquet(path: Path, claims: int, which: list[int]) -> Path:
    """A 64-row Parquet file whose footer says ``claims`` at the ``which``-th i64 fields
    holding 64 (0: the file's rows, 1: the column chunk's values, 2: the row group's rows)."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": np.arange(64, dtype=np.float64)}), buf, compression="none")
    data = buf.getvalue()
    n = struct.unpack("<i", data[-8:-4])[0]
    footer = data[-8 - n : -8]
    old = _i64_field(64)
    at = [i for i in range(len(footer)) if footer.startswith(old, i)]
    assert len(at) == 3, at
    for i in sorted((at[w] for w in which), reverse=True):
        footer = footer[:i] + _i64_field(claims) + footer[i + len(old) :]
    path.write_bytes(data[: -8 - n] + footer + struct.pack("<i", len(footer)) + b"PAR1")
    assert pq.ParquetFile(path).metadata.row_group(0).num_rows in (64, claims)
    return path


def test_a_row_group_claiming_2_40_rows_is_refused_by_its_row_count(tmp_path: Path) -> None:
    path = _lying_parquet(tmp_path / "rows.parquet", 2**40, [2])
    entry = _scan(path, tmp_path)
    _refused(entry, "the row group claims 1099511627776 rows, the column holds 64 values")


def test_2_40_values_in_650_bytes_are_refused_by_the_pages_they_need(tmp_path: Path) -> None:
    path = _lying_parquet(tmp_path / "values.parquet", 2**40, [0, 1, 2])
    assert path.stat().st_size < 2048
    entry = _scan(path, tmp_path)
    _refused(entry, "1099511627776 values claimed in")
    assert "512 data pages" in entry["error"]


def test_a_value_that_inflates_past_the_bound_is_refused(tmp_path: Path) -> None:
    """A few KB of zstd that decode to one string past the unit's budget (16 MiB)."""
    path = tmp_path / "bomb.parquet"
    big = "a" * (20 << 20)
    pq.write_table(pa.table({"s": [big], "x": [1.0]}), path, compression="zstd")
    assert path.stat().st_size < 64 << 10
    entry = _scan(path, tmp_path)
    _refused(entry, "a value over the 16 MiB a unit may decode at once")


def test_a_large_row_group_streams_with_exact_findings(tmp_path: Path) -> None:
    """A row group past the budget decoded is read in batches: every NaN still listed."""
    n = 1 << 21  # 16 MiB of float64: past the 4 MiB budget of a 16 MiB unit
    x = np.zeros(n)
    x[::3] = NAN
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"x": x}), path, row_group_size=n)
    # In this process (no worker memory limit to race): the reader's own budget streams it.
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False, unit_memory_mb=16)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == n, entry["error"]
    assert entry["counts"] == {"nan": len(x[::3])}
    rows = pq.read_table(report.manifest_path, columns=["row"])["row"].to_numpy()
    assert np.array_equal(np.sort(rows), np.arange(0, n, 3))


def test_a_plaintext_footer_with_encrypted_columns_is_told_apart(tmp_path: Path) -> None:
    """pyarrow aborts the process on an encrypted column's metadata: such a footer ends with a
    28-byte signature after its Thrift metadata, and plain files end with the metadata."""
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1.0]}), path)
    assert not encrypted_columns(str(path), pq.read_metadata(path))
    data = path.read_bytes()
    n = struct.unpack("<i", data[-8:-4])[0]
    footer = data[-8 - n : -8] + bytes(28)  # as the signature (nonce, tag) follows it
    path.write_bytes(data[: -8 - n] + footer + struct.pack("<i", len(footer)) + b"PAR1")
    assert encrypted_columns(str(path), pq.read_metadata(path))


# -- tensors: members and fill values ---------------------------------------------------------


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_a_tar_gz_member_declaring_more_than_the_budget_is_refused(tmp_path: Path) -> None:
    import tarfile

    path = tmp_path / "shard.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, arr in [("s0.x.npy", np.zeros(4)), ("s1.x.npy", np.zeros(SMALL_MB << 17))]:
            data = _npy_bytes(arr)  # the second: 64 MiB of zeros, a few KB compressed
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    assert path.stat().st_size < 1 << 20
    entry = _scan(path, tmp_path)
    _refused(entry, "s1.x.npy")
    assert "over the 16 MiB a unit may decode at once" in entry["error"]


def test_fortran_order_npz_members_stream_through_a_file_with_exact_findings(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300_000, 8)).astype(np.float32)  # 9.6 MB: past a chunk
    a[::7, 3] = NAN
    a[5] = np.inf
    b = rng.standard_normal((100_000, 2, 3))
    b[::11, 1, 2] = NAN
    fortran, c_order = tmp_path / "f.npz", tmp_path / "c.npz"
    np.savez(fortran, a=np.asfortranarray(a), b=np.asfortranarray(b))
    np.savez_compressed(c_order, a=a, b=b)  # the oracle: C order, deflated
    got = _scan(fortran, tmp_path / "f")
    want = _scan(c_order, tmp_path / "c")
    assert got["status"] == "flagged" and got["counts"] == want["counts"]
    assert got["counts"] == {"inf": 8, "nan": int(np.isnan(a).sum() + np.isnan(b).sum())}


@pytest.mark.parametrize("block", [1 << 20, 64 << 20])
def test_fortran_members_of_any_rank_transpose_in_blocks_to_the_c_order_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """3-D and 4-D Fortran members past a chunk, transposed a block at a time (1 MiB: a
    dozen blocks, the trailing indices mapped back to C order), give the manifest rows,
    columns, counts and values that the same arrays in C order give."""
    from datacheck.formats import _tensor_numpy

    monkeypatch.setattr(_tensor_numpy, "FORTRAN_BLOCK", block)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((20_000, 7, 11))  # 12.3 MB
    a[::13, 2, 5] = NAN
    a[[4, 19_999], 6, 10] = np.inf
    a[77, 0, 0] = -1e6  # past the fp16 bound: the first bad value of its row in C order
    a[77, 5, 1] = 7e4
    b = rng.standard_normal((4_000, 3, 5, 9)).astype(np.float32)  # 2.2 MB: read whole
    b[::9, 2, 4, 8] = NAN
    fortran, c_order = tmp_path / "f.npz", tmp_path / "c.npz"
    np.savez(fortran, a=np.asfortranarray(a), b=np.asfortranarray(b))
    np.savez(c_order, a=a, b=b)
    got = datacheck.scan(fortran, out=tmp_path / "f", executor="inprocess", isolate=False).findings
    want = datacheck.scan(c_order, out=tmp_path / "c", executor="inprocess", isolate=False).findings
    cols = ["row", "column", "check", "severity", "value", "count"]
    assert len(got) > 1500
    assert got[cols].equals(want[cols])


def test_a_fortran_member_past_the_unit_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.npz"
    np.savez(path, a=np.asfortranarray(np.zeros((1 << 18, 16))))  # 32 MiB, stored
    entry = _scan(path, tmp_path, isolate=False, unit_memory_mb=16)
    _refused(entry, "a Fortran-order array of 33554432 bytes, over the 16 MiB")


def test_an_hdf5_dataset_never_written_is_one_finding_from_its_fill_value(
    tmp_path: Path,
) -> None:
    h5py = __import__("pytest").importorskip("h5py")
    path = tmp_path / "fill.h5"
    with h5py.File(path, "w") as h:  # 4 TiB of NaN declared in a 2 KB file
        h.create_dataset("big", shape=(1 << 30, 1024), dtype="f4", chunks=(1024, 64), fillvalue=NAN)
        h.create_dataset("zeros", shape=(1 << 20,), dtype="f8", chunks=(4096,))
        h.create_dataset("x", data=np.array([1.0, np.inf, 3.0]))
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False, unit_memory_mb=SMALL_MB)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == 1 << 30
    assert entry["counts"] == {"inf": 1, "nan": 1 << 40}
    f = report.findings
    (big,) = f[f["column"] == "big"].itertuples()
    assert big.check == "nan" and big.value.startswith("never written: all 1099511627776 values")
    assert f[f["column"] == "x"]["row"].tolist() == [1]


def test_a_large_tar_gz_member_is_held_once_while_it_is_checked(tmp_path: Path) -> None:
    """Read in place a block at a time, its header parsed from a copy of the head only, and a
    sample alone not stacked: one copy of the member in memory, not three."""
    import os
    import tarfile
    import tracemalloc

    from datacheck.formats import WorkUnit, get_format

    size = 32 << 20
    path = tmp_path / "one.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        data = _npy_bytes(np.zeros(size // 4, np.float32))
        info = tarfile.TarInfo("s0.x.npy")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        del data
    st = os.stat(path)
    unit = WorkUnit(str(path), "tar", st.st_size, st.st_mtime)
    tracemalloc.start()
    try:
        chunks = list(get_format("tar").open(unit, {}).chunks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [c.num_rows for c in chunks] == [1]
    assert peak < size * 1.5, peak


def test_a_text_dictionary_that_decodes_past_the_bound_is_refused(tmp_path: Path) -> None:
    """831 bytes of Parquet repeating a 1 MiB string 4,096 times decode to 4 GiB: read as a
    dictionary, its decoded size is known before it is allocated (with the Arrow schema
    stored, pyarrow hands a dictionary; without, it would decode it itself)."""
    one = pa.array(["b" * (1 << 20)])
    s = pa.DictionaryArray.from_arrays(pa.array(np.zeros(4096, np.int32)), one)
    for stored in (True, False):
        path = tmp_path / f"dict-{stored}.parquet"
        table = pa.table({"s": s, "x": [1.0] * 4096})
        pq.write_table(table, path, store_schema=stored, compression="zstd")
        assert path.stat().st_size < 4096
        entry = _scan(path, tmp_path / str(stored))
        _refused(entry, "column 's': its dictionary decodes to 4294967296 bytes, over the 16 MiB")


def test_text_read_as_a_dictionary_comes_back_as_the_file_types_it(tmp_path: Path) -> None:
    words = pa.array(["a", None, "bb", "a", "ccc"] * 1000)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"w": words, "d": words.dictionary_encode()}), path)
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False)
    (entry,) = report.data["files"]
    assert entry["columns"] == {
        "w": "string",
        "d": "dictionary<values=string, indices=int32, ordered=0>",
    }
    assert entry["status"] == "ok" and entry["rows"] == 5000


def test_an_hdf5_chunk_is_inflated_once_and_a_chunk_past_the_bound_is_refused(
    tmp_path: Path,
) -> None:
    """A 256 MiB gzip chunk was re-inflated for every 8 MiB slice of samples (18 s for a 1 MB
    file): each dataset gets a chunk cache holding a row of its chunks."""
    h5py = __import__("pytest").importorskip("h5py")
    from datacheck.formats._tensor_hdf5 import _chunk_cached

    path = tmp_path / "gz.h5"
    with h5py.File(path, "w") as h:
        x = np.zeros((1 << 16, 64), np.float32)  # one 16 MiB chunk, a few KB of gzip
        x[7, 3] = NAN
        h.create_dataset("x", data=x, chunks=x.shape, compression="gzip")
        h.create_dataset("small", data=np.arange(100.0), chunks=(10,))
    with h5py.File(path, "r") as fh:
        nslots, nbytes, _ = _chunk_cached(fh, "x", 64 << 20).id.get_access_plist().get_chunk_cache()
        assert nbytes > 16 << 20
        assert _chunk_cached(fh, "small", 64 << 20).chunks == (10,)
    entry = _scan(path, tmp_path / "big", isolate=False)  # a 16 MiB chunk fits a 64 MiB unit
    assert entry["status"] == "flagged" and entry["counts"] == {"nan": 1}
    _refused(_scan(path, tmp_path / "small", unit_memory_mb=32), "chunks of 16777216 bytes")


def test_a_pt_view_larger_than_its_storage_is_refused_past_the_budget(tmp_path: Path) -> None:
    """1.8 KB declaring 2**40 elements over one stored value (stride 0) read for minutes; an
    expanded view within the budget is still read."""
    torch = __import__("pytest").importorskip("torch")
    path = tmp_path / "view.pt"
    torch.save({"x": torch.zeros(1).expand(1 << 40), "ok": torch.ones(3).expand(4, 3)}, path)
    # In this process: importing torch alone passes a 64 MiB worker bound.
    entry = _scan(path, tmp_path, isolate=False)
    _refused(entry, "tensor 'x' views 4398046511104 bytes over a storage of 4")
    samples = tmp_path / "samples.pt"
    torch.save([{"x": torch.tensor([1.0, float("nan")]).expand(2**20, 2)}], samples)
    entry = _scan(samples, tmp_path / "s", unit_memory_mb=16, isolate=False)
    _refused(entry, "over a storage of 8")
    fine = tmp_path / "fine.pt"
    torch.save({"ok": torch.tensor([1.0, float("nan")]).expand(4, 2)}, fine)
    entry = _scan(fine, tmp_path / "fine", isolate=False)
    assert entry["status"] == "flagged" and entry["counts"] == {"nan": 4}


def test_an_hdf5_dataset_written_in_part_reads_its_written_rows_only(tmp_path: Path) -> None:
    """A preallocated dataset (4 TiB declared) with its first rows written: those are read,
    the rows past the last written chunk are one finding from the fill value."""
    h5py = __import__("pytest").importorskip("h5py")
    path = tmp_path / "part.h5"
    with h5py.File(path, "w") as h:
        d = h.create_dataset("x", shape=(1 << 30, 1024), dtype="f4", chunks=(64, 64), fillvalue=NAN)
        d[0:100] = 1.0
        d[5, 7] = np.inf
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False)
    (entry,) = report.data["files"]
    tail = ((1 << 30) - 128) * 1024
    assert entry["rows"] == 1 << 30
    assert entry["counts"] == {"inf": 1, "nan": 28 * 1024 + tail}  # rows 100..127 read
    f = report.findings
    assert sorted(f["row"].dropna().astype(int)) == [5, *range(100, 128)]
    (summary,) = f[f["row"].isna()].itertuples()
    assert summary.value == f"rows 128.. never written: all {tail} values are the fill value nan"


def test_the_fill_value_finding_follows_the_tensors_schema(tmp_path: Path) -> None:
    h5py = __import__("pytest").importorskip("h5py")
    path = tmp_path / "fill.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset("big", shape=(1 << 30, 8), dtype="f4", chunks=(1024, 8), fillvalue=5.0)
    schema = tmp_path / "s.yaml"
    schema.write_text("tensors:\n  keys:\n    big: {range: [0, 1]}\n")
    report = datacheck.scan(str(path), schema=str(schema), out=tmp_path / "out", isolate=False)
    (entry,) = report.data["files"]
    assert entry["counts"] == {"out_of_range": 1 << 33}
    plain = datacheck.scan(str(path), out=tmp_path / "plain", isolate=False)
    assert plain.data["files"][0]["status"] == "ok"
