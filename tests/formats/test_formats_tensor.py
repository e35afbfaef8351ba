"""Every tensor format: planted NaN/Inf/extreme found at the right file, sample and key."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as st_save
from safetensors.torch import save_file as st_save_torch

import datacheck
from datacheck.formats import _tensor_common

N = 40
PLANTED = {(5, "nan"), (7, "inf"), (9, "extreme")}


def planted(n: int = N, dtype: type = np.float32) -> np.ndarray:
    """[n, 3, 4, 4] with NaN in sample 5, -Inf in 7, 1e6 (beyond fp16) in 9."""
    x = np.random.default_rng(0).standard_normal((n, 3, 4, 4)).astype(dtype)
    x[5, 1, 2, 3] = np.nan
    x[7, 0, 0, 0] = -np.inf
    x[9, 2, 3, 1] = 1e6
    return x


def _tiny_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (10, 20, 30)).save(buf, "JPEG")
    return buf.getvalue()


TINY_JPEG = _tiny_jpeg()
"""A real (decodable) JPEG: tar shards' image members are decoded."""


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def pt_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _tar_npy(d: Path, x: np.ndarray, mode: str = "w", name: str = "shard.tar") -> Path:
    members = []
    for i, sample in enumerate(x):
        members.append((f"s{i:05d}.image.npy", npy_bytes(sample)))
        members.append((f"s{i:05d}.cls", str(i % 10).encode()))
        members.append((f"s{i:05d}.jpg", TINY_JPEG))
    return write_tar(d / name, members, mode)


# Each writer plants the faults of ``planted()`` and returns (path, key holding them).
WRITERS: dict[str, Callable[[Path, np.ndarray], tuple[Path, str]]] = {
    "npy": lambda d, x: (np.save(d / "x.npy", x), (d / "x.npy", "tensor"))[1],
    "npz": lambda d, x: (np.savez(d / "x.npz", img=x, y=np.arange(N)), (d / "x.npz", "img"))[1],
    "npz_compressed": lambda d, x: (
        np.savez_compressed(d / "x.npz", img=x, y=np.arange(N)),
        (d / "x.npz", "img"),
    )[1],
    "pt_tensor": lambda d, x: (torch.save(torch.from_numpy(x), d / "x.pt"), (d / "x.pt", "tensor"))[
        1
    ],
    "pt_dict": lambda d, x: (
        torch.save({"data": {"img": torch.from_numpy(x)}, "y": torch.arange(N)}, d / "x.pth"),
        (d / "x.pth", "data.img"),
    )[1],
    "pt_tuple": lambda d, x: (
        torch.save((torch.from_numpy(x), torch.arange(N)), d / "x.pt"),
        (d / "x.pt", "0"),
    )[1],
    "pt_samples": lambda d, x: (
        torch.save([{"img": torch.from_numpy(s), "y": i} for i, s in enumerate(x)], d / "x.pt"),
        (d / "x.pt", "img"),
    )[1],
    "pt_legacy": lambda d, x: (
        torch.save({"img": torch.from_numpy(x)}, d / "x.pt", _use_new_zipfile_serialization=False),
        (d / "x.pt", "img"),
    )[1],
    "safetensors": lambda d, x: (
        st_save({"img": x, "y": np.arange(N)}, str(d / "x.safetensors")),
        (d / "x.safetensors", "img"),
    )[1],
    "safetensors_bf16": lambda d, x: (
        st_save_torch({"img": torch.from_numpy(x).bfloat16()}, str(d / "x.safetensors")),
        (d / "x.safetensors", "img"),
    )[1],
    "hdf5": lambda d, x: (_h5(d / "x.h5", x), (d / "x.h5", "grp/img"))[1],
    "tar": lambda d, x: (_tar_npy(d, x), (d / "shard.tar", "image.npy"))[1],
    "tar_gz": lambda d, x: (
        _tar_npy(d, x, "w:gz", "shard.tar.gz"),
        (d / "shard.tar.gz", "image.npy"),
    )[1],
    "tar_pt": lambda d, x: (
        write_tar(
            d / "shard.tar",
            [(f"k{i}.input.pt", pt_bytes(torch.from_numpy(s))) for i, s in enumerate(x)],
        ),
        (d / "shard.tar", "input.pt"),
    )[1],
}


def _h5(path: Path, x: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("grp/img", data=x, chunks=(4, 3, 4, 4), compression="gzip")
        f["labels"] = np.arange(N)
        f["name"] = "not numeric"
        f["scale"] = np.float32(2.0)


def sites(report: datacheck.Report) -> set[tuple[int, str, str]]:
    f = report.findings
    f = f[f["row"].notna()]
    return {(int(r.row), r.column, r.check) for r in f.itertuples()}


def columns(report: datacheck.Report) -> dict[str, str]:
    """The first file's columns (tensor key -> dtype) from report.json."""
    return report.data["files"][0]["columns"]


def scan(path: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1, **kw)


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_planted_faults_found(fmt: str, tmp_path: Path) -> None:
    path, key = WRITERS[fmt](tmp_path, planted())
    report = scan(path)
    entry = report.files.iloc[0]
    assert entry["status"] == "flagged", entry["error"]
    assert entry["rows"] == N
    assert sites(report) == {(row, key, check) for row, check in PLANTED}
    found = report.findings.set_index("check")
    assert found.loc["nan", "value"] == "nan"
    assert found.loc["inf", "value"] == "-inf"


@pytest.mark.parametrize(
    "fmt", ["npy", "npz_compressed", "safetensors", "hdf5", "tar", "pt_samples"]
)
def test_small_chunks_keep_sample_indices(fmt: str, tmp_path: Path, monkeypatch) -> None:
    """Chunk boundaries (a few samples per chunk) do not shift the reported sample index."""
    monkeypatch.setattr(_tensor_common, "CHUNK_BYTES", 3 * 48 * 4)  # 3 samples per chunk
    x = planted(n=200)
    x[199, 0, 0, 0] = np.nan
    x[100, 0, 0, 0] = np.inf
    path, key = WRITERS[fmt](tmp_path, x)
    report = scan(path, isolate=False)  # the monkeypatched chunk size holds in this process only
    expected = {(row, key, check) for row, check in PLANTED}
    expected |= {(199, key, "nan"), (100, key, "inf")}
    assert sites(report) == expected
    assert report.files.iloc[0]["rows"] == 200


def test_every_element_of_a_sample_is_counted(tmp_path: Path) -> None:
    x = np.zeros((10, 8), dtype=np.float32)
    x[3, [0, 2, 5]] = np.nan
    np.save(tmp_path / "x.npy", x)
    f = scan(tmp_path / "x.npy").findings
    assert f[["row", "check", "count"]].values.tolist() == [[3, "nan", 3]]


def test_scalar_and_1d_tensors(tmp_path: Path) -> None:
    np.savez(tmp_path / "x.npz", loss=np.float64(np.nan), w=np.array([1.0, np.inf, 2.0]))
    assert sites(scan(tmp_path / "x.npz")) == {(0, "loss", "nan"), (1, "w", "inf")}
    torch.save({"step": 3, "lr": float("inf")}, tmp_path / "s.pt")
    assert sites(scan(tmp_path / "s.pt")) == {(0, "lr", "inf")}


def test_integer_and_half_dtypes(tmp_path: Path) -> None:
    np.save(tmp_path / "i.npy", np.array([[1, 2], [3, 2**40]], dtype=np.int64))
    assert scan(tmp_path / "i.npy").files.iloc[0]["status"] == "ok"  # no fp16 bound on ints
    h = np.array([[1.0, np.nan], [np.inf, 2.0]], dtype=np.float16)
    np.save(tmp_path / "h.npy", h)
    assert sites(scan(tmp_path / "h.npy")) == {(0, "tensor", "nan"), (1, "tensor", "inf")}


def test_fortran_order_npy(tmp_path: Path) -> None:
    x = np.asfortranarray(planted())
    np.save(tmp_path / "f.npy", x)
    assert sites(scan(tmp_path / "f.npy")) == {(r, "tensor", c) for r, c in PLANTED}


def test_tar_json_and_numeric_text(tmp_path: Path) -> None:
    members = []
    for i in range(6):
        meta = {"label": i, "score": float("nan") if i == 2 else 0.5, "caption": "a cat"}
        members.append((f"d/k{i}.json", json.dumps(meta).encode()))
        members.append((f"d/k{i}.cls", b"inf" if i == 4 else str(i).encode()))
        members.append((f"d/k{i}.txt", b"a caption, not numbers"))
    path = write_tar(tmp_path / "s.tar", members)
    report = scan(path)
    # webdataset reads .cls with int(): "inf" fails there, so it is corrupt at its sample
    assert sites(report) == {(2, "json.score", "nan"), (4, "cls", "corrupt")}
    cols = columns(report)
    assert cols["json.label"] == "int64" and cols["txt"] == "text" and cols["cls"] == "int64"
    assert report.files.iloc[0]["rows"] == 6


def test_tar_samples_without_numeric_members_still_counted(tmp_path: Path) -> None:
    members = [(f"k{i}.txt", b"x") for i in range(3)]
    members += [("k3.npy", npy_bytes(np.array([np.nan])))]
    members += [(f"k{i}.txt", b"x") for i in range(4, 9)]
    report = scan(write_tar(tmp_path / "s.tar", members))
    assert sites(report) == {(3, "npy", "nan")}
    assert report.files.iloc[0]["rows"] == 9


def test_tar_variable_shapes_per_sample(tmp_path: Path) -> None:
    members = []
    for i, n in enumerate([3, 3, 5, 5, 2]):
        a = np.zeros(n, dtype=np.float32)
        if i == 3:
            a[4] = np.nan
        members.append((f"k{i}.tok.npy", npy_bytes(a)))
    assert sites(scan(write_tar(tmp_path / "s.tar", members))) == {(3, "tok.npy", "nan")}


def test_hdf5_lists_non_numeric_datasets(tmp_path: Path) -> None:
    path, _ = WRITERS["hdf5"](tmp_path, planted())
    cols = columns(scan(path))
    assert cols["grp/img"] == "float32" and cols["labels"] == "int64" and "name" in cols


def test_directory_of_mixed_tensor_and_tabular_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = planted()
    np.save(tmp_path / "a.npy", x)
    st_save({"img": x}, str(tmp_path / "b.safetensors"))
    pq.write_table(pa.table({"v": [1.0, float("nan")]}), tmp_path / "c.parquet")
    report = datacheck.scan(str(tmp_path), workers=1)
    files = report.files.set_index("format")
    assert set(files.index) == {"npy", "safetensors", "parquet"}
    assert (files["status"] == "flagged").all()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("bad.npy", b"\x93NUMPY\x01\x00garbage"),
        ("bad.npy", b"not numpy at all"),
        ("bad.npz", b"PK\x03\x04 not a zip"),
        ("bad.pt", b"\x80\x02 not torch"),
        ("bad.safetensors", b"\x05"),
        ("bad.h5", b"\x89HDF\r\n\x1a\n truncated"),
        ("bad.tar", b"x" * 700),
    ],
)
def test_malformed_files_are_corrupt(name: str, data: bytes, tmp_path: Path) -> None:
    (tmp_path / name).write_bytes(data)
    report = scan(tmp_path / name)
    entry = report.files.iloc[0]
    assert entry["status"] == "corrupt"
    assert entry["error"]
    assert report.findings["check"].tolist() == ["corrupt"]


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors", "hdf5", "pt_dict", "tar"])
def test_truncated_files_are_corrupt(fmt: str, tmp_path: Path) -> None:
    path, _ = WRITERS[fmt](tmp_path, planted(n=400))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    entry = scan(path).files.iloc[0]
    assert entry["status"] == "corrupt", entry


def test_truncated_npy_message(tmp_path: Path) -> None:
    np.save(tmp_path / "t.npy", np.zeros((100, 10), np.float32))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-100])
    assert "truncated" in scan(tmp_path / "t.npy").files.iloc[0]["error"]


def test_bad_tar_member_keeps_the_rest_of_the_shard(tmp_path: Path) -> None:
    members = [
        ("k0.npy", npy_bytes(np.array([np.nan]))),
        ("k1.npy", b"\x93NUMPY broken"),
        ("k2.npy", npy_bytes(np.array([np.inf]))),
    ]
    report = scan(write_tar(tmp_path / "s.tar", members))
    assert sites(report) == {(0, "npy", "nan"), (1, "npy", "corrupt"), (2, "npy", "inf")}
    entry = report.files.iloc[0]
    assert entry["status"] == "flagged"  # the bad member is a finding at its sample, as an image
    f = report.findings
    assert "member 'k1.npy'" in f[f["check"] == "corrupt"]["value"].iloc[0]


def test_cli_scans_tensor_files(tmp_path: Path) -> None:
    WRITERS["safetensors"](tmp_path, planted())
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "datacheck",
            "scan",
            str(tmp_path / "x.safetensors"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert sites(datacheck.load_report(out)) == {(r, "img", c) for r, c in PLANTED}


def test_parquet_scan_never_imports_torch_or_h5py(tmp_path: Path) -> None:
    code = (
        "import sys, datacheck, pyarrow as pa, pyarrow.parquet as pq\n"
        f"pq.write_table(pa.table({{'a': [1.0]}}), {str(tmp_path / 'a.parquet')!r})\n"
        f"datacheck.scan({str(tmp_path / 'a.parquet')!r}, executor='inprocess')\n"
        "import numpy as np\n"
        f"np.save({str(tmp_path / 'b.npy')!r}, np.zeros(3))\n"
        f"datacheck.scan({str(tmp_path / 'b.npy')!r}, executor='inprocess')\n"
        "print(sorted(m for m in ('torch', 'h5py', 'safetensors') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_shard_with_another_dtype_is_flagged(tmp_path: Path) -> None:
    for i in range(3):
        dtype = np.float64 if i == 1 else np.float32  # (values of its own: no duplicate)
        np.save(tmp_path / f"s{i}.npy", np.full((4, 2), i, dtype))
    f = datacheck.scan(str(tmp_path), executor="inprocess").findings
    assert f[["path", "column", "check"]].values.tolist() == [
        [str(tmp_path / "s1.npy"), "tensor", "schema"]
    ]
    assert "other shards have float32" in f["value"].iloc[0]


def test_process_executor_on_every_format(tmp_path: Path) -> None:
    expected = set()
    for fmt in ("npy", "npz_compressed", "pt_samples", "safetensors", "hdf5", "tar"):
        d = tmp_path / fmt
        d.mkdir()
        path, key = WRITERS[fmt](d, planted())
        expected |= {(str(path), row, key, check) for row, check in PLANTED}
    report = datacheck.scan(str(tmp_path), executor="processes", workers=2)
    f = report.findings
    assert {(r.path, int(r.row), r.column, r.check) for r in f.itertuples()} == expected
