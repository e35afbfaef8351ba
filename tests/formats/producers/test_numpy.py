"""numpy's own writers (``np.save``, ``np.savez``, ``np.savez_compressed``) and ``np.load``
(``allow_pickle=False``) as the oracle: C and Fortran order, records (structured dtypes, nested,
with subarrays and strings), big-endian, complex, 0-d."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

RECORD = np.dtype(
    [
        ("x", "<f4"),
        ("label", "<i8"),
        ("name", "S8"),
        ("pos", [("lat", ">f8"), ("lon", ">f8")]),
        ("v", "<f4", (3,)),
    ]
)
RECORD_KEYS = ("x", "label", "pos.lat", "pos.lon", "v")


def records(n: int = 50) -> np.ndarray:
    a = np.zeros(n, dtype=RECORD)
    a["x"] = np.arange(n)
    a["label"] = np.arange(n) % 7
    a["name"] = b"sample"
    a["pos"]["lat"], a["pos"]["lon"] = 48.1, 11.5
    a["v"] = 0.5
    return a


ARRAYS: dict[str, Callable[[], np.ndarray]] = {
    "c_order": lambda: np.arange(600, dtype=np.float32).reshape(50, 12),
    "fortran": lambda: np.asfortranarray(np.arange(600, dtype=np.float64).reshape(50, 12)),
    "big_endian": lambda: np.arange(50, dtype=">f8"),
    "complex": lambda: np.arange(100, dtype=np.complex64).reshape(50, 2),
    "records": records,
}


def plant(a: np.ndarray, row: int, value: float) -> tuple[np.ndarray, str]:
    """``a`` with ``value`` at ``row`` (in its first float field for records): (array, key)."""
    a = a.copy(order="K")
    if a.dtype.names:
        a["pos"]["lon"][row] = value
        return a, "pos.lon"
    if a.dtype.kind == "c":
        a[row, 1] = complex(0, value)
        return a, "tensor"
    a[row, ...] = value  # every element of the sample
    return a, "tensor"


def np_reads(path: Path) -> bool:
    """The oracle: numpy loads every array of the file without unpickling."""
    try:
        with open(path, "rb") as fh:
            obj = np.load(fh, allow_pickle=False)
            if hasattr(obj, "files"):
                for key in obj.files:
                    obj[key]
            else:
                np.asarray(obj).tobytes()
    except Exception:  # noqa: BLE001 - anything numpy raises: it cannot read the file
        return False
    return True


def agrees(path: Path) -> dict:
    """The scan's verdict on ``path``, which must be ``corrupt`` exactly when numpy cannot
    load it."""
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not np_reads(path)), entry
    return entry


@pytest.mark.parametrize("kind", sorted(ARRAYS))
def test_np_save_clean_planted_and_damaged(kind: str, tmp_path: Path) -> None:
    clean = tmp_path / f"{kind}.npy"
    np.save(clean, ARRAYS[kind]())
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["rows"] == 50, entry
    if kind == "records":
        assert sorted(entry["columns"]) == sorted(RECORD_KEYS)  # name: a string, not read
    for value, check in ((np.nan, "nan"), (np.inf, "inf")):
        path = tmp_path / f"{kind}-{check}.npy"
        arr, key = plant(ARRAYS[kind](), 17, value)
        np.save(path, arr)
        assert sites(scan(path)) == {(path.name, 17, key, check)}
    cut = truncate(copy_of(clean, tmp_path / "cut" / clean.name), -7)
    assert not np_reads(cut) and "truncated" in agrees(cut)["error"]
    head = flip(copy_of(clean, tmp_path / "head" / clean.name), 2)  # the magic string
    assert not np_reads(head) and agrees(head)["status"] == "corrupt"
    agrees(flip(copy_of(clean, tmp_path / "data" / clean.name), -3))  # a value changes


def test_a_0d_array(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", np.float64(np.nan))
    assert sites(scan(tmp_path / "one.npy")) == {("one.npy", 0, "tensor", "nan")}


@pytest.mark.parametrize("writer", ["savez", "savez_compressed"])
def test_npz_members_of_every_kind(writer: str, tmp_path: Path) -> None:
    save = getattr(np, writer)
    clean = tmp_path / "clean.npz"
    save(clean, **{k: make() for k, make in ARRAYS.items()})
    entry = only_entry(clean)
    assert entry["status"] == "ok", entry
    assert "records.pos.lon" in entry["columns"] and "fortran" in entry["columns"]
    members = {k: make() for k, make in ARRAYS.items()}
    members["fortran"], _ = plant(members["fortran"], 3, np.nan)
    members["records"], _ = plant(members["records"], 9, np.inf)
    planted = tmp_path / "planted.npz"
    save(planted, **members)
    assert sites(scan(planted)) == {
        ("planted.npz", 3, "fortran", "nan"),
        ("planted.npz", 9, "records.pos.lon", "inf"),
    }
    cut = truncate(copy_of(clean, tmp_path / "cut" / "clean.npz"), len(clean.read_bytes()) // 2)
    assert not np_reads(cut) and agrees(cut)["status"] == "corrupt"
    middle = len(clean.read_bytes()) // 2  # inside a member: zip's CRC (or inflate) fails
    bad = flip(copy_of(clean, tmp_path / "flip" / "clean.npz"), middle)
    assert not np_reads(bad) and agrees(bad)["status"] == "corrupt"


def test_positional_savez_members_keep_numpys_names(tmp_path: Path) -> None:
    np.savez(tmp_path / "pos.npz", np.zeros(4), np.array([1.0, np.nan]))
    assert sites(scan(tmp_path / "pos.npz")) == {("pos.npz", 1, "arr_1", "nan")}
