"""HDF5 as h5py and PyTables write it, read back by the writer as the oracle: h5py datasets
(gzip, lzf, shuffle, fletcher32, chunked, compound, attributes) and PyTables Tables (compound
rows, nested columns), EArrays and CArrays behind every filter PyTables has (zlib, bzip2,
blosc, blosc2: the last three are filters h5py does not build in, read through hdf5plugin)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

h5py = pytest.importorskip("h5py")
tables = pytest.importorskip("tables")

ROWS = 40
H5PY_FILTERS: dict[str, dict] = {
    "contiguous": {},
    "chunked": {"chunks": (8, 3)},
    "gzip": {"compression": "gzip", "compression_opts": 4},
    "lzf": {"compression": "lzf"},
    "shuffle_gzip": {"compression": "gzip", "shuffle": True},
    "fletcher32": {"fletcher32": True, "chunks": (8, 3)},
    "scaleoffset": {"scaleoffset": 0, "chunks": (8, 3)},  # on the integers (lossy on floats)
}
COMPOUND = np.dtype([("x", "<f4"), ("n", "<i8"), ("tag", "S6"), ("p", [("a", ">f8")])])
PT_FILTERS = {
    "zlib": tables.Filters(complevel=5, complib="zlib"),
    "bzip2": tables.Filters(complevel=5, complib="bzip2"),
    "blosc_lz4": tables.Filters(complevel=5, complib="blosc:lz4", shuffle=True),
    "blosc2_zstd": tables.Filters(complevel=5, complib="blosc2:zstd", bitshuffle=True),
}


def h5py_file(path: Path, opts: dict, plant: float | None = None) -> Path:
    """A float dataset, an int one, a compound one and attributes, as a training set has."""
    x = np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)
    rec = np.zeros(ROWS, COMPOUND)
    rec["x"], rec["n"], rec["tag"] = np.arange(ROWS), np.arange(ROWS), b"ok"
    if plant is not None:
        x[11, 2] = plant
        rec["p"]["a"][23] = plant
    with h5py.File(path, "w") as f:
        f.attrs["producer"] = "h5py"
        g = f.create_group("train")
        ds = g.create_dataset("x", data=x, **{k: v for k, v in opts.items() if k != "scaleoffset"})
        ds.attrs["units"] = "m"
        one_d = {k: (8,) if k == "chunks" else v for k, v in opts.items()}
        g.create_dataset("y", data=np.arange(ROWS) % 5, **one_d)
        rec_opts = {k: v for k, v in one_d.items() if k != "scaleoffset"}  # not for compounds
        f.create_dataset("records", data=rec, **rec_opts)
    return path


class Row(tables.IsDescription):
    x = tables.Float32Col()
    label = tables.Int64Col()
    name = tables.StringCol(8)

    class pos(tables.IsDescription):  # noqa: N801 - PyTables' nested-column idiom
        lat = tables.Float64Col()


def pytables_file(
    path: Path, filters: tables.Filters, plant: float | None = None, small_chunks: bool = True
) -> Path:
    """A Table (compound rows, a nested column), an EArray and a CArray behind ``filters``.

    ``small_chunks``: chunks of 16 rows, as a writer passing ``chunkshape`` gets; PyTables'
    own choice for blosc2 is ~500 MB decoded per chunk whatever the size of the data (the
    library takes 4 s and 0.5 GB to read 40 rows back), which one test below keeps."""
    shape = {"chunkshape": (16,)} if small_chunks else {}
    shape2 = {"chunkshape": (16, 4)} if small_chunks else {}
    with tables.open_file(str(path), "w") as f:
        t = f.create_table("/", "samples", Row, filters=filters, expectedrows=ROWS, **shape)
        row = t.row
        for i in range(ROWS):
            row["x"], row["label"], row["name"] = i, i % 3, b"s"
            row["pos/lat"] = 48.0 if plant is None or i != 17 else plant
            row.append()
        t.flush()
        e = f.create_earray("/", "emb", tables.Float32Atom(), (0, 4), filters=filters, **shape2)
        emb = np.zeros((ROWS, 4), np.float32)
        if plant is not None:
            emb[29, 1] = plant
        e.append(emb)
        small = {"chunkshape": (16, 2)} if small_chunks else {}
        c = f.create_carray("/", "mask", tables.Int8Atom(), (ROWS, 2), filters=filters, **small)
        c[:] = 1
    return path


def h5py_reads(path: Path) -> bool:
    """h5py (with hdf5plugin's filters) reads every dataset whole."""
    import hdf5plugin  # noqa: F401 - registers blosc, blosc2, bzip2, ...

    try:
        with h5py.File(path, "r") as f:
            names: list[str] = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            for n in names:
                f[n][()]
    except Exception:  # noqa: BLE001
        return False
    return True


def pytables_reads(path: Path) -> bool:
    """PyTables opens the file and reads every leaf whole."""
    try:
        with tables.open_file(str(path), "r") as f:
            for leaf in f.walk_nodes("/", classname="Leaf"):
                leaf.read()
    except Exception:  # noqa: BLE001
        return False
    return True


def agrees(path: Path, reads: Callable[[Path], bool]) -> dict:
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not reads(path)), entry
    return entry


def damaged_copies(clean: Path, tmp_path: Path) -> list[Path]:
    size = clean.stat().st_size
    return [
        truncate(copy_of(clean, tmp_path / "cut" / clean.name), size // 2),
        flip(copy_of(clean, tmp_path / "sig" / clean.name), 1),  # the superblock signature
        flip(copy_of(clean, tmp_path / "mid" / clean.name), size // 2),
        flip(copy_of(clean, tmp_path / "end" / clean.name), -40),
    ]


@pytest.mark.parametrize("name", sorted(H5PY_FILTERS))
def test_h5py_datasets(name: str, tmp_path: Path) -> None:
    clean = h5py_file(tmp_path / f"{name}.h5", H5PY_FILTERS[name])
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["rows"] == ROWS, entry
    assert entry["columns"] == {
        "records.n": "int64",
        "records.p.a": "float64",
        "records.x": "float32",
        "train/x": "float32",
        "train/y": "int64",
    }
    path = h5py_file(tmp_path / "nan.h5", H5PY_FILTERS[name], np.nan)
    assert sites(scan(path)) == {
        ("nan.h5", 11, "train/x", "nan"),
        ("nan.h5", 23, "records.p.a", "nan"),
    }
    cut, sig, *others = damaged_copies(clean, tmp_path)
    assert not h5py_reads(cut) and not h5py_reads(sig)
    for bad in (cut, sig, *others):
        agrees(bad, h5py_reads)


@pytest.mark.parametrize("name", sorted(PT_FILTERS))
def test_pytables_tables_and_arrays(name: str, tmp_path: Path) -> None:
    clean = pytables_file(tmp_path / f"{name}.h5", PT_FILTERS[name])
    assert pytables_reads(clean) and h5py_reads(clean)
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["rows"] == ROWS, entry
    assert entry["columns"] == {
        "emb": "float32",
        "mask": "int8",
        "samples.label": "int64",
        "samples.pos.lat": "float64",
        "samples.x": "float32",
    }
    path = pytables_file(tmp_path / "inf.h5", PT_FILTERS[name], -np.inf)
    assert sites(scan(path)) == {
        ("inf.h5", 17, "samples.pos.lat", "inf"),
        ("inf.h5", 29, "emb", "inf"),
    }
    for bad in damaged_copies(clean, tmp_path):
        agrees(bad, pytables_reads)


def test_a_dataset_behind_a_filter_h5py_cannot_run_is_corrupt_with_its_reason(
    tmp_path: Path,
) -> None:
    """PyTables' blosc2 and bzip2, scanned where hdf5plugin cannot be imported (so h5py has
    neither filter, as on a machine without it): the file is corrupt with h5py's reason and
    the fix, after its other datasets were checked; with hdf5plugin it reads (test above).
    PyTables here cannot write LZO (it has no LZO library), which the libraries' own corpora
    hold: a filter missing here stands in for it."""
    path = tmp_path / "mixed.h5"
    with tables.open_file(str(path), "w") as f:
        f.create_carray(
            "/", "blosc2", obj=np.zeros((8, 2), "f4"), filters=PT_FILTERS["blosc2_zstd"]
        )
        f.create_carray("/", "bz", obj=np.zeros((8, 2), "f4"), filters=PT_FILTERS["bzip2"])
        f.create_array("/", "plain", obj=np.array([1.0, np.nan]))
    code = (
        "import sys, json; sys.modules['hdf5plugin'] = None\n"  # import hdf5plugin -> ImportError
        "import datacheck\n"
        f"r = datacheck.scan({str(path)!r}, out={str(tmp_path / 'out')!r}, executor='inprocess')\n"
        "f = r.findings\n"
        "found = sorted((x.column if isinstance(x.column, str) else '', x.check)\n"
        "               for x in f.itertuples())\n"
        "print(json.dumps([r.data['files'][0], found]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    entry, found = json.loads(proc.stdout)
    assert entry["status"] == "corrupt"
    assert entry["error"].startswith(
        "TensorFileError: 2 dataset(s) ('blosc2', 'bz') compressed with HDF5 filter blosc2 "
        "(32026), bzip2 (307), which h5py cannot decode here (pip install hdf5plugin"
    ), entry["error"]
    assert "h5py: Can't synchronously read data" in entry["error"]
    assert found == [["", "corrupt"], ["plain", "nan"]]  # the rest was checked


def test_pytables_time_columns_and_h5py_complex(tmp_path: Path) -> None:
    """Types h5py has no NumPy type for (PyTables' Time64Col) do not make the file corrupt:
    the numeric columns beside them are checked; complex values by both parts."""

    class Stamped(tables.IsDescription):
        t = tables.Time64Col()
        v = tables.Float64Col()

    path = tmp_path / "times.h5"
    with tables.open_file(str(path), "w") as f:
        t = f.create_table("/", "log", Stamped)
        t.append([(1.7e9 + i, float("nan") if i == 4 else i) for i in range(8)])
    cpath = tmp_path / "c.h5"
    with h5py.File(cpath, "w") as f:
        f["z"] = np.array([1 + 1j, complex(0, np.inf), 2j], np.complex64)
    assert pytables_reads(path) and h5py_reads(cpath)
    assert sites(scan(path)) == {("times.h5", 4, "log.v", "nan")}
    assert sites(scan(cpath)) == {("c.h5", 1, "z", "inf")}


@pytest.mark.slow
def test_pytables_own_blosc2_chunks_are_decoded_once_in_bounded_memory(tmp_path: Path) -> None:
    """PyTables' default blosc2 layout: ~500 MB decoded per chunk of a 40-row table.  Each
    chunk is decoded once, with HDF5's default cache (no cache sized for a chunk beside HDF5's
    own buffer: 1.5 GB peak before; 0.56-0.93 GB now, as HDF5 keeps freed chunk buffers for
    reuse; PyTables itself peaks at 0.53 GB)."""
    from datacheck.formats._tensor_hdf5 import _chunk_cached

    path = pytables_file(tmp_path / "b2.h5", PT_FILTERS["blosc2_zstd"], np.nan, small_chunks=False)
    with h5py.File(path) as f:
        for name in ("samples", "emb", "mask"):
            ds = f[name]
            assert math.prod(ds.chunks) * ds.id.get_type().get_size() > 256 << 20
            default = ds.id.get_access_plist().get_chunk_cache()  # HDF5's own
            assert (
                _chunk_cached(f, name, 1 << 30).id.get_access_plist().get_chunk_cache() == default
            )
    # read in the measured process itself (isolate=False), its own peak: VmHWM, since Linux
    # carries ru_maxrss across exec (a child of a big pytest process inherits its peak)
    code = (
        "import datacheck, json, re\n"
        f"r = datacheck.scan({str(path)!r}, out={str(tmp_path / 'out')!r},\n"
        "                  executor='inprocess', isolate=False)\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print(json.dumps([r.data['files'][0]['counts'], int(hwm) // 1024]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    counts, peak_mb = json.loads(proc.stdout)
    assert counts == {"nan": 2}
    assert peak_mb < 1200, peak_mb


def test_every_kind_of_h5py_dataset_is_read_or_listed_with_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "kinds.h5"
    with h5py.File(path, "w") as f:
        f["empty"] = h5py.Empty("f4")
        f.create_dataset("zero", shape=(0, 3), dtype="f4")
        f["one_record"] = np.array((np.inf, 2), dtype=[("a", "f8"), ("b", "i4")])
        f["enum"] = np.array([0, 1, 1], dtype=h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1"))
        f["flags"] = np.array([True, False, True])
        f["names"] = np.array(["a", "bb", "c"], dtype=h5py.string_dtype())
        f["ref"] = np.array([f["flags"].ref], dtype=h5py.ref_dtype)
        rows = [np.zeros(2), np.array([1.0, np.nan, np.nan]), np.zeros(0), np.zeros(1)]
        ragged = f.create_dataset("ragged", (4,), dtype=h5py.vlen_dtype("f8"))
        for i, row in enumerate(rows):
            ragged[i] = row
    assert h5py_reads(path)
    entry = only_entry(path)
    assert entry["status"] == "flagged" and entry["rows"] == 4, entry
    assert entry["columns"] == {
        "empty": "empty (a null dataspace: no values)",
        "enum": "int8",
        "flags": "bool",
        "names": "string",
        "one_record.a": "float64",
        "one_record.b": "int32",
        "ragged": "vlen float64",
        "ref": "reference",
        "zero": "float32",
    }
    report = scan(path)
    assert sites(report) == {
        ("kinds.h5", 0, "one_record.a", "inf"),
        ("kinds.h5", 1, "ragged", "nan"),
    }
    f = report.findings
    assert f[f["column"] == "ragged"]["count"].tolist() == [2]  # two of row 1's values


def test_pytables_vlarrays_are_checked_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "vl.h5"
    with tables.open_file(str(path), "w") as f:
        vl = f.create_vlarray("/", "seqs", tables.Float32Atom(), filters=PT_FILTERS["zlib"])
        big = f.create_vlarray("/", "big", tables.Int32Atom(), byteorder="big")
        for i in range(30):
            big.append(np.arange(i % 3, dtype=">i4"))
            row = np.arange(i % 7, dtype=np.float32)
            if i == 20:  # 6 values
                row[3] = np.inf
            vl.append(row)
    assert pytables_reads(path) and h5py_reads(path)
    entry = only_entry(path)
    assert entry["rows"] == 30, entry
    assert entry["columns"] == {"big": "vlen int32", "seqs": "vlen float32"}, entry
    assert sites(scan(path)) == {("vl.h5", 20, "seqs", "inf")}
    for bad in damaged_copies(path, tmp_path):
        agrees(bad, pytables_reads)
