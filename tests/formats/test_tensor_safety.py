"""Tensor files come from strangers: pickles never run, lying sizes never drive allocation."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import textwrap
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import datacheck
from datacheck.formats._tensor_common import PICKLE_MSG

HERE = Path(__file__).parent


class Payload:
    """Unpickling this writes ``marker``: proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def npy_bytes(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def object_array(marker: Path) -> np.ndarray:
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = Payload(marker), 1.0
    return arr


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def scan_one(path: Path) -> dict:
    report = datacheck.scan(str(path), executor="inprocess", workers=1)
    return report.data["files"][0]


def test_the_payload_is_live(tmp_path: Path) -> None:
    """Guard against a test that cannot fail: unpickling the payload does write the marker."""
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.read_text() == "pwned"


def _pickled_files(d: Path, marker: Path) -> dict[str, Path]:
    files = {}
    np.save(d / "obj.npy", object_array(marker), allow_pickle=True)
    files["npy"] = d / "obj.npy"
    np.savez(d / "obj.npz", ok=np.zeros(3), bad=object_array(marker))
    files["npz"] = d / "obj.npz"
    torch.save({"x": torch.zeros(2), "evil": Payload(marker)}, d / "zip.pt")
    files["pt_zip"] = d / "zip.pt"
    torch.save({"evil": Payload(marker)}, d / "legacy.pt", _use_new_zipfile_serialization=False)
    files["pt_legacy"] = d / "legacy.pt"
    (d / "raw.pth").write_bytes(pickle.dumps(Payload(marker)))
    files["pt_raw_pickle"] = d / "raw.pth"
    buf = io.BytesIO()
    torch.save(Payload(marker), buf)
    files["tar_pt"] = write_tar(
        d / "pt.tar", [("k0.npy", npy_bytes(np.zeros(2))), ("k1.x.pt", buf.getvalue())]
    )
    files["tar_pyd"] = write_tar(d / "pyd.tar", [("k0.pyd", pickle.dumps(Payload(marker)))])
    files["tar_npy"] = write_tar(
        d / "npy.tar", [("k0.npy", npy_bytes(object_array(marker), allow_pickle=True))]
    )
    return files


@pytest.mark.parametrize(
    "kind", ["npy", "npz", "pt_zip", "pt_legacy", "pt_raw_pickle", "tar_pt", "tar_pyd", "tar_npy"]
)
def test_pickle_payload_never_runs(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    data = tmp_path / "data"
    data.mkdir()
    path = _pickled_files(data, marker)[kind]
    entry = scan_one(path)
    assert not marker.exists(), "a pickle payload ran"
    assert entry["status"] == "corrupt"
    assert "requires unpickling arbitrary code" in entry["error"]
    assert PICKLE_MSG in entry["error"]


def test_whole_directory_of_pickles_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    data = tmp_path / "data"
    data.mkdir()
    _pickled_files(data, marker)
    report = datacheck.scan(str(data), workers=2)
    assert not marker.exists()
    assert set(report.files["status"]) == {"corrupt"}


# --- zip (npz) bombs and lies ----------------------------------------------------------------


def _patch_central_directory(
    path: Path, name: str, *, usize: int | None = None, crc: int | None = None
) -> None:
    data = bytearray(path.read_bytes())
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        n = struct.unpack_from("<H", data, pos + 28)[0]
        if data[pos + 46 : pos + 46 + n].decode() == name:
            if usize is not None:
                struct.pack_into("<I", data, pos + 24, usize)
            if crc is not None:
                struct.pack_into("<I", data, pos + 16, crc)
            path.write_bytes(bytes(data))
            return
        pos = data.find(b"PK\x01\x02", pos + 4)
    raise AssertionError(f"{name} not in the central directory")


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    full = npy_bytes(np.zeros((0,) * len(shape), dtype=dtype))
    header = full.replace(str((0,) * len(shape)).encode(), str(shape).encode())
    # keep numpy's 64-byte alignment valid: the header length field is re-derived below
    magic, body = header[:10], header[10:]
    body = body.rstrip(b"\n").rstrip(b" ")
    pad = 64 - (10 + len(body) + 1) % 64
    body = body + b" " * (pad % 64) + b"\n"
    return magic[:8] + struct.pack("<H", len(body)) + body


def test_npy_header_helper_is_valid() -> None:
    raw = _npy_header((3, 2)) + np.arange(6, dtype="<f4").tobytes()
    assert np.load(io.BytesIO(raw)).shape == (3, 2)


def test_member_claiming_huge_inflated_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros(1000, dtype=np.float32))
    _patch_central_directory(path, "x.npy", usize=0xF0000000)  # ~4 GB from a few hundred bytes
    entry = scan_one(path)
    assert entry["status"] == "corrupt"
    assert "zip bomb" in entry["error"]


def test_member_inflating_beyond_its_declared_size_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "over.npz"
    honest = _npy_header((10,)) + np.zeros(10, dtype="<f4").tobytes()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", honest + b"\0" * (50 << 20))  # 50 MB more than it will claim
    _patch_central_directory(path, "x.npy", usize=len(honest))
    entry = scan_one(path)
    assert entry["status"] == "corrupt"
    assert "CRC" in entry["error"] or "bytes after" in entry["error"]


def test_member_header_lying_about_shape_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", _npy_header((10**6, 10**6)) + b"\0" * 64)
    entry = scan_one(path)
    assert entry["status"] == "corrupt"
    assert "header describes shape (1000000, 1000000)" in entry["error"]


def test_npy_header_lying_about_shape_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / "lie.npy").write_bytes(_npy_header((10**9, 10**3)) + b"\0" * 400)
    entry = scan_one(tmp_path / "lie.npy")
    assert entry["status"] == "corrupt" and "truncated" in entry["error"]


# --- tar shards ------------------------------------------------------------------------------


def _set_tar_size(path: Path, size: int) -> None:
    data = bytearray(path.read_bytes())
    data[124:136] = b"%011o\0" % size
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    path.write_bytes(bytes(data))


def test_tar_member_claiming_bytes_past_the_end_is_corrupt(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "s.tar", [("k0.npy", npy_bytes(np.zeros(4)))])
    _set_tar_size(path, 0o77777777777)  # 8 GiB in a 10 KiB file
    entry = scan_one(path)
    assert entry["status"] == "corrupt"
    assert "past the end" in entry["error"]


def test_tar_member_npy_header_lying_about_shape(tmp_path: Path) -> None:
    path = write_tar(tmp_path / "s.tar", [("k0.npy", _npy_header((10**9,)) + b"\0" * 16)])
    report = datacheck.scan(str(path), executor="inprocess", workers=1)
    (finding,) = report.findings.itertuples()  # corrupt at its sample, not allocated
    assert (finding.row, finding.column, finding.check) == (0, "npy", "corrupt")
    assert "header says shape (1000000000,)" in finding.value


def test_tar_member_names_are_never_paths(tmp_path: Path) -> None:
    shard = tmp_path / "in"
    shard.mkdir()
    members = [
        ("../../escape.npy", npy_bytes(np.array([np.nan]))),
        ("/abs/escape.npy", npy_bytes(np.zeros(1))),
        ("k2.npy", npy_bytes(np.zeros(1))),
    ]
    path = write_tar(shard / "s.tar", members)
    before = sorted(p for p in tmp_path.parent.rglob("*escape*"))
    report = datacheck.scan(str(path), executor="inprocess", out=tmp_path / "out")
    after = sorted(p for p in tmp_path.parent.rglob("*escape*"))
    assert before == after == []
    f = report.findings
    assert f[["row", "column", "check"]].values.tolist() == [[0, "npy", "nan"]]


def test_tar_links_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.npy"
    np.save(secret, np.array([np.nan]))
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo("k0.npy")
        info.type, info.linkname = tarfile.SYMTYPE, str(secret)
        tf.addfile(info)
    entry = scan_one(path)
    # The link is skipped; the secret's NaN is never read (no sample left: an `empty` warning).
    assert entry["counts"] == {"empty": 1}


# --- safetensors -----------------------------------------------------------------------------


def _st(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + data


_F32x4 = np.arange(4, dtype="<f4").tobytes()


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (
            _st(
                {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                _F32x4,
                length=10**15,
            ),
            "header claims",
        ),
        (
            _st({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, _F32x4, length=200),
            "header claims",
        ),
        (
            _st({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 40]}}, _F32x4),
            "outside",
        ),
        (_st({"x": {"dtype": "F32", "shape": [10**9], "data_offsets": [0, 16]}}, _F32x4), "needs"),
        (_st({"x": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, _F32x4), "outside"),
        (
            _st(
                {
                    "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
                },
                _F32x4,
            ),
            "overlaps",
        ),
        (_st({"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, _F32x4), "malformed"),
        (
            _st({"x": {"dtype": "X9", "shape": [4], "data_offsets": [0, 16]}}, _F32x4),
            "unknown dtype",
        ),
        (_st(b"{not json", _F32x4), "not valid JSON"),
        (_st(b"[1, 2]"), "not a JSON object"),
        (b"\x01\x02", "truncated"),
    ],
)
def test_safetensors_lying_headers_are_corrupt(blob: bytes, message: str, tmp_path: Path) -> None:
    (tmp_path / "x.safetensors").write_bytes(blob)
    entry = scan_one(tmp_path / "x.safetensors")
    assert entry["status"] == "corrupt"
    assert message in entry["error"]


def test_safetensors_valid_handmade_file_reads(tmp_path: Path) -> None:
    data = np.array([1.0, np.nan, 2.0, 3.0], dtype="<f4").tobytes()
    blob = _st(
        {"__metadata__": {"a": "b"}, "x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
        data,
    )
    (tmp_path / "x.safetensors").write_bytes(blob)
    report = datacheck.scan(str(tmp_path / "x.safetensors"), executor="inprocess")
    assert report.findings[["row", "column", "check"]].values.tolist() == [[1, "x", "nan"]]


# --- bounded memory --------------------------------------------------------------------------


def _peak_rss_mb(code: str) -> float:
    """Run ``code`` in a fresh interpreter; its peak RSS in MiB (printed by the child).

    ``VmHWM`` rather than ``ru_maxrss``: Linux carries ``ru_maxrss`` across exec, so a child
    started from this (large) pytest process would report the parent's peak.
    """
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                print(int(line.split()[1]) / 1024)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.strip().splitlines()[-1])


def test_bombs_and_lies_keep_memory_bounded(tmp_path: Path) -> None:
    d = tmp_path / "bombs"
    d.mkdir()
    np.savez_compressed(d / "bomb.npz", x=np.zeros(1000, dtype=np.float32))
    _patch_central_directory(d / "bomb.npz", "x.npy", usize=0xF0000000)
    honest = _npy_header((10,)) + np.zeros(10, dtype="<f4").tobytes()
    with zipfile.ZipFile(d / "over.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", honest + b"\0" * (200 << 20))
    _patch_central_directory(d / "over.npz", "x.npy", usize=len(honest), crc=zlib.crc32(honest))
    write_tar(d / "s.tar", [("k0.npy", npy_bytes(np.zeros(4)))])
    _set_tar_size(d / "s.tar", 0o77777777777)
    (d / "lie.npy").write_bytes(_npy_header((10**9, 10**3)) + b"\0" * 400)
    code = f"""
        import datacheck
        r = datacheck.scan({str(d)!r}, executor="inprocess")
        assert r.data["summary"]["files"] == 4, r.data["summary"]
    """
    baseline = _peak_rss_mb("import datacheck, datacheck.formats; datacheck.formats.formats()")
    peak = _peak_rss_mb(code)
    assert peak - baseline < 150, (peak, baseline)


@pytest.mark.slow
def test_large_npy_scan_keeps_rss_bounded(tmp_path: Path) -> None:
    """A 256 MiB memory-mapped .npy is checked in chunks; pages checked are dropped."""
    path = tmp_path / "big.npy"
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(4096, 16384))
    arr[:] = 1.0
    arr[4000, 7] = np.nan
    arr.flush()
    del arr
    code = f"""
        import datacheck
        r = datacheck.scan({str(path)!r}, executor="inprocess")
        assert r.findings["row"].tolist() == [4000]
    """
    baseline = _peak_rss_mb("import datacheck, datacheck.formats; datacheck.formats.formats()")
    peak = _peak_rss_mb(code)
    assert peak - baseline < 128, (peak, baseline)  # the file alone is 256 MiB
    assert os.path.getsize(path) > 256 << 20


# --- arrays without values: a zero in the shape costs no bytes, so no size check refuses it ---

_HUGE = 2**55  # rows a 128-byte header can claim when each row holds nothing


def _zero_width_files(d: Path) -> dict[str, Path]:
    import h5py

    files = {"npy": d / "zero.npy", "safetensors": d / "zero.safetensors"}
    files["npy"].write_bytes(_npy_header((_HUGE, 0)))
    files["safetensors"].write_bytes(
        _st({"x": {"dtype": "F32", "shape": [_HUGE, 0], "data_offsets": [0, 0]}})
    )
    files["npz"] = d / "zero.npz"
    with zipfile.ZipFile(files["npz"], "w") as zf:
        zf.writestr("x.npy", _npy_header((_HUGE, 0)))
    files["h5"] = d / "zero.h5"
    with h5py.File(files["h5"], "w") as fh:
        fh.create_dataset("x", shape=(_HUGE, 0), dtype="f4")
    files["pt"] = d / "zero.pt"
    torch.save({"x": torch.empty((_HUGE, 0))}, files["pt"])
    return files


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["npy", "safetensors", "npz", "h5", "pt"])
def test_huge_array_of_empty_rows_is_not_looped_over(kind: str, tmp_path: Path) -> None:
    """``(2**55, 0)`` once took ~4 billion empty chunks (a hang); now it is O(1)."""
    path = _zero_width_files(tmp_path)[kind]
    for profile in (False, True):
        report = datacheck.scan(str(path), executor="inprocess", workers=1, profile=profile)
        entry = report.data["files"][0]
        assert entry["status"] == "ok", entry
        assert entry["rows"] == _HUGE  # the header's rows, counted without reading them
        assert report.findings.empty


@pytest.mark.timeout(20)
def test_empty_rows_beside_real_data_do_not_set_the_chunking(tmp_path: Path) -> None:
    """A valued array is still checked row by row; the empty one adds rows in one last chunk."""
    data = np.zeros((10, 4), dtype="<f4")
    data[7, 2] = np.nan
    blob = _st(
        {
            "v": {"dtype": "F32", "shape": [10, 4], "data_offsets": [0, 160]},
            "e": {"dtype": "F32", "shape": [_HUGE, 0], "data_offsets": [160, 160]},
        },
        data.tobytes(),
    )
    (tmp_path / "mix.safetensors").write_bytes(blob)
    report = datacheck.scan(str(tmp_path / "mix.safetensors"), executor="inprocess", workers=1)
    assert report.data["files"][0]["rows"] == _HUGE
    assert report.findings[["row", "column", "check"]].values.tolist() == [[7, "v", "nan"]]


def test_whole_chunks_of_empty_rows_is_one_chunk() -> None:
    from datacheck.formats._tensor_common import Source, sample_view, whole_chunks

    empty = np.empty((_HUGE, 0), dtype=np.float32)
    valued = np.arange(30, dtype=np.float32).reshape(10, 3)
    alone = list(whole_chunks([Source("e", empty.shape, "float32", 4, sample_view(empty))]))
    assert [(c.row_offset, c.num_rows) for c in alone] == [(0, _HUGE)]
    sources = [
        Source("e", empty.shape, "float32", 4, sample_view(empty)),
        Source("v", valued.shape, "float32", 4, sample_view(valued)),
    ]
    chunks = list(whole_chunks(sources, chunk_bytes=48))  # 4 rows of `v` per chunk
    assert [(c.row_offset, c.num_rows) for c in chunks] == [
        (0, 4),
        (4, 4),
        (8, 2),
        (10, _HUGE - 10),
    ]
    assert np.array_equal(np.concatenate([c.tensors["v"] for c in chunks[:3]]), valued)
    assert sum(c.num_rows for c in chunks) == _HUGE


def test_int64_wrapping_shape_is_not_a_small_tensor(tmp_path: Path) -> None:
    """``2**62 * 4`` float32 elements wrap to 0 bytes in int64 arithmetic; exact sizes refuse it."""
    blob = _st({"x": {"dtype": "F32", "shape": [2**62, 4], "data_offsets": [0, 0]}})
    (tmp_path / "wrap.safetensors").write_bytes(blob)
    entry = scan_one(tmp_path / "wrap.safetensors")
    assert entry["status"] == "corrupt" and "needs" in entry["error"]


def _safetensors(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize(
    ("header", "data", "error"),
    [
        (
            {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
            bytes(12),
            "4 bytes at the end of the data are no tensor's",
        ),
        (
            {"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
            bytes(8),
            "4 bytes before tensor 'x' are no tensor's",
        ),
        (
            {
                "__metadata__": {"format": 1},
                "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
            },
            bytes(4),
            "__metadata__ is not a map of strings to strings",
        ),
    ],
)
def test_safetensors_the_library_rejects_are_corrupt(
    header: dict, data: bytes, error: str, tmp_path: Path
) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(_safetensors(header, data))
    report = datacheck.scan(str(path), out=tmp_path / "out", executor="inprocess")
    (entry,) = report.data["files"]
    assert entry["status"] == "corrupt" and entry["error"].endswith(error)


def test_a_sparse_coo_tensor_is_read_its_values_checked(tmp_path: Path) -> None:
    i = torch.tensor([[0, 1, 2], [2, 0, 1]])
    v = torch.tensor([3.0, float("nan"), 5.0])
    sparse = torch.sparse_coo_tensor(i, v, (3, 3), check_invariants=True)
    torch.save({"s": sparse, "d": torch.ones(3)}, tmp_path / "a.pt")
    bad = torch.sparse_coo_tensor(
        torch.tensor([[0, 9]]), torch.ones(2), (3,), check_invariants=False
    )
    torch.save({"s": bad}, tmp_path / "b.pt")
    report = datacheck.scan(str(tmp_path), out=tmp_path / "out", executor="inprocess")
    files = {Path(f["path"]).name: f for f in report.data["files"]}
    assert files["a.pt"]["status"] == "flagged"
    f = report.findings
    f = f[f["path"].str.endswith("a.pt")]
    assert f[["row", "column", "check"]].values.tolist() == [[1, "s.values", "nan"]]
    assert files["b.pt"]["status"] == "corrupt"
    assert "sparse" in files["b.pt"]["error"] or "index" in files["b.pt"]["error"]
