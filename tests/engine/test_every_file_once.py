"""Every input file is in the report exactly once, scanned or ignored with its reason, and
the shards compared for dtype drift are the files that belong together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck.errors import InputError


def scan(path: Path, tmp_path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), out=tmp_path / "out", executor="inprocess")


def every_file(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def listed(report: datacheck.Report) -> list[str]:
    return [e["path"] for e in report.data["files"]] + report.data["ignored"]


def test_underscore_files_and_folders_are_data_like_any_other(tmp_path: Path) -> None:
    """A Python project's ``_fakedata/`` folder and ``_x.npz`` (scipy's
    ``_sobol_direction_numbers.npz``) are data; only writers' bookkeeping is not."""
    data = tmp_path / "data"
    (data / "_fakedata" / "deep").mkdir(parents=True)
    np.savez(data / "_x.npz", a=np.array([1.0, np.nan]))
    np.save(data / "_fakedata" / "deep" / "t.npy", np.zeros(3))
    pq.write_table(pa.table({"v": [1.0]}), data / "part-0.parquet")
    (data / "_SUCCESS").write_bytes(b"")
    (data / "_common_metadata").write_bytes(b"PAR1")
    (data / ".part-0.parquet.crc").write_bytes(b"crc")
    (data / "_temporary" / "0").mkdir(parents=True)
    pq.write_table(pa.table({"v": [float("nan")]}), data / "_temporary" / "0" / "part-0.parquet")
    (data / "notes.txt").write_text("hello")
    report = scan(data, tmp_path)
    paths = listed(report)
    assert sorted(paths) == sorted(every_file(data)) and len(paths) == len(set(paths))
    scanned = {Path(e["path"]).name for e in report.data["files"]}
    assert scanned == {"_x.npz", "t.npy", "part-0.parquet"}
    why = {str(Path(p).relative_to(data)): r for p, r in report.data["ignored_why"].items()}
    assert why == {
        "_SUCCESS": "_SUCCESS: a Hadoop/Spark job's success marker, not data",
        "_common_metadata": "_common_metadata: a Parquet dataset's common schema, not data",
        ".part-0.parquet.crc": "a Hadoop checksum file, not data",
        "_temporary/0/part-0.parquet": (
            "inside _temporary/: a Hadoop/Spark job's uncommitted task output, which the "
            "dataset's readers skip"
        ),
        "notes.txt": "not a data file: no reader recognises its name or first bytes",
    }
    assert set(report.data["ignored"]) == set(report.data["ignored_why"])


def test_hidden_files_and_folders_are_listed_with_the_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / ".cache").mkdir(parents=True)
    np.save(data / ".cache" / "x.npy", np.zeros(2))
    np.save(data / ".hidden.npy", np.zeros(2))
    np.save(data / "x.npy", np.zeros(2))
    report = scan(data, tmp_path)
    assert [Path(e["path"]).name for e in report.data["files"]] == ["x.npy"]
    assert report.data["ignored_why"] == {
        str(data / ".cache" / "x.npy"): "inside the hidden folder .cache/ (name it to scan it)",
        str(data / ".hidden.npy"): "a hidden file (name it to scan it)",
    }
    named = scan(data / ".hidden.npy", tmp_path)  # named explicitly: read
    assert named.data["files"][0]["status"] == "ok"


def test_a_folder_of_only_bookkeeping_says_why_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "_SUCCESS").write_bytes(b"")
    with pytest.raises(InputError, match="no data files found .*_SUCCESS: a Hadoop/Spark"):
        scan(data, tmp_path)


def test_images_beside_labels_are_two_arrays_not_shards(tmp_path: Path) -> None:
    """The most common layout there is: no dtype drift between the two."""
    np.save(tmp_path / "images.npy", np.zeros((10, 8, 8), np.uint8))
    np.save(tmp_path / "labels.npy", np.zeros(10, np.int64))
    np.savez(tmp_path / "train.npz", x=np.zeros((10, 4), np.float32))
    np.savez(tmp_path / "test.npz", x=np.zeros((5, 4), np.float64))
    report = scan(tmp_path, tmp_path)
    assert report.data["summary"]["exit_code"] == 0, report.findings


def test_shards_of_one_array_are_named_alike_and_shaped_alike(tmp_path: Path) -> None:
    for i in range(4):
        dtype = np.float64 if i == 2 else np.float32
        shape = (100 if i < 3 else 7, 3, 4)  # each shard its own values (none a duplicate)
        np.save(tmp_path / f"part-{i:05d}.npy", np.full(shape, i, dtype))
    np.save(tmp_path / "part-00009.npy", np.zeros((5, 2), np.float64))  # another shape tail
    for width in ("i32", "i64"):  # a dtype in the name: files that differ there by design
        np.save(tmp_path / f"smpl_{width}be.npy", np.zeros(6, f">i{int(width[1:]) // 8}"))
    f = scan(tmp_path, tmp_path).findings
    assert f[["path", "column", "check"]].values.tolist() == [
        [str(tmp_path / "part-00002.npy"), "tensor", "schema"]
    ]
    assert f["value"].iloc[0] == "dtype float64, other shards have float32 (3 of 4)"
