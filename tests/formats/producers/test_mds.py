"""MosaicML MDS as ``streaming.MDSWriter`` writes it (mosaicml-streaming 0.13), read back by
``streaming.StreamingDataset``: the oracle.  Every compression MDSWriter offers, with and without
``hashes``, ``size_limit`` splitting the samples over several shards, every column encoding.

Where StreamingDataset reads a dataset back fine, datacheck must not call a shard ``corrupt``;
where a damaged copy makes it fail, datacheck names the shard (and the sample, where the damage
lies in one value).
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _mediakit import (
    jpeg,
    mds_index,
    mds_raw,
    mds_sample_span,
    mds_value_span,
    streaming_module,
    streaming_samples,
    write_mds,
)

from ._kit import copy_of, entries, flip, scan, sites, truncate

COMPRESSIONS = [None, "zstd", "zstd:19", "gz", "gz:1", "bz2", "br", "br:5", "snappy"]
"""Every compression family MDSWriter offers (``streaming.base.compression``), at its default
level and at another."""
COLUMNS = {"image": "jpeg", "label": "int", "score": "float32", "vec": "ndarray:float32"}
N = 24
LIMIT = 3000
"""``size_limit``: about 4 samples a shard."""


def samples(nan_at: int | None = 7, inf_at: int | None = 13) -> list[dict[str, Any]]:
    """``N`` samples; a NaN score at ``nan_at`` and an Inf in the vector at ``inf_at``."""
    out = []
    for i in range(N):
        vec = np.linspace(0, 1, 5, dtype=np.float32)
        if i == inf_at:
            vec[2] = np.inf
        score = np.float32(np.nan if i == nan_at else i / 4)
        out.append({"image": jpeg(i % 4), "label": i, "score": score, "vec": vec})
    return out


def write(folder: Path, compression: str | None, hashes: tuple[str, ...] = (), **kw: Any) -> Path:
    return write_mds(
        folder,
        compression=compression,
        hashes=hashes,
        columns=kw.pop("columns", COLUMNS),
        size_limit=kw.pop("size_limit", LIMIT),
        samples=kw.pop("samples", None) or samples(**kw),
    )


_ORACLE: list[ProcessPoolExecutor] = []


@pytest.fixture(scope="module", autouse=True)
def _oracle_process() -> Iterator[None]:
    """StreamingDataset runs in a process of its own (``_mediakit.streaming_samples``: it keeps
    file descriptors), started on first use and afresh every few datasets."""
    yield
    while _ORACLE:
        _ORACLE.pop().shutdown(cancel_futures=True)


def streaming_reads(folder: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Every sample as StreamingDataset reads it, from a copy (it writes decompressed shards
    beside the compressed ones)."""
    local = copy_of(folder, tmp_path / f"oracle-{folder.name}")
    if not _ORACLE:
        spawn = multiprocessing.get_context("spawn")
        _ORACLE.append(ProcessPoolExecutor(1, mp_context=spawn, max_tasks_per_child=16))
    try:
        return _ORACLE[0].submit(streaming_samples, str(local)).result(timeout=240)
    except BrokenProcessPool:  # it died reading a damaged shard: the next read gets another
        _ORACLE.pop().shutdown(cancel_futures=True)
        raise


def where(folder: Path, sample: int) -> tuple[str, int]:
    """(shard file name, row in that shard) of a dataset-wide sample index."""
    for entry in mds_index(folder)["shards"]:
        if sample < entry["samples"]:
            info = entry["zip_data"] or entry["raw_data"]
            return info["basename"], sample
        sample -= entry["samples"]
    raise IndexError(sample)


def shard_files(folder: Path) -> list[str]:
    return [(e["zip_data"] or e["raw_data"])["basename"] for e in mds_index(folder)["shards"]]


# --- clean, and planted values --------------------------------------------------------------


@pytest.mark.parametrize("hashes", [(), ("sha1", "xxh64")])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_clean_dataset_is_ok(
    compression: str | None, hashes: tuple[str, ...], tmp_path: Path
) -> None:
    folder = write(tmp_path / "mds", compression, hashes, nan_at=None, inf_at=None)
    assert len(shard_files(folder)) >= 3
    report = scan(folder)
    files = entries(report)
    assert sorted(files) == sorted(shard_files(folder))
    assert {e["status"] for e in files.values()} == {"ok"}, report.data["files"]
    assert sum(e["rows"] for e in files.values()) == N
    assert [Path(p).name for p in report.data["ignored"]] == ["index.json"]
    assert [s["label"] for s in streaming_reads(folder, tmp_path)] == list(range(N))


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_planted_nan_and_inf_found_at_their_samples(
    compression: str | None, tmp_path: Path
) -> None:
    folder = write(tmp_path / "mds", compression)
    assert sites(scan(folder)) == {
        (*where(folder, 7), "score", "nan"),
        (*where(folder, 13), "vec", "inf"),
    }
    read = streaming_reads(folder, tmp_path)
    assert np.isnan(read[7]["score"]) and np.isinf(read[13]["vec"]).any()


# --- damaged copies ------------------------------------------------------------------------


@pytest.mark.parametrize("hashes", [(), ("sha1",)])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_truncated_shard_is_corrupt(
    compression: str | None, hashes: tuple[str, ...], tmp_path: Path
) -> None:
    clean = write(tmp_path / "clean", compression, hashes, nan_at=None, inf_at=None)
    folder = copy_of(clean, tmp_path / "cut")
    victim = shard_files(folder)[1]
    truncate(folder / victim, -30)
    files = entries(scan(folder))
    assert files[victim]["status"] == "corrupt", files[victim]
    assert {e["status"] for n, e in files.items() if n != victim} == {"ok"}
    with pytest.raises(Exception):  # noqa: B017 - whatever streaming's reader raises
        streaming_reads(folder, tmp_path)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_flipped_byte_named_by_the_hash(compression: str | None, tmp_path: Path) -> None:
    """With ``hashes``, any flipped byte of a shard: the listed hash disagrees (computed by
    streaming's own ``get_hash``), and the shard is corrupt, named by it."""
    streaming_module()
    from streaming.base.hashing import get_hash

    folder = write(tmp_path / "mds", compression, ("sha1",), nan_at=None, inf_at=None)
    victim = shard_files(folder)[2]
    flip(folder / victim, (folder / victim).stat().st_size // 2)
    entry = entries(scan(folder))[victim]
    assert entry["status"] == "corrupt" and "sha1 of the" in entry["error"], entry
    info = mds_index(folder)["shards"][2]
    info = info["zip_data"] or info["raw_data"]
    assert get_hash("sha1", (folder / victim).read_bytes()) != info["hashes"]["sha1"]


def test_flipped_offset_is_corrupt_as_streaming_fails(tmp_path: Path) -> None:
    """No hashes: the top byte of one sample's offset: the table no longer rises."""
    folder = write(tmp_path / "mds", None, nan_at=None, inf_at=None)
    victim = shard_files(folder)[1]
    flip(folder / victim, 4 + 4 * 2 + 3, 0x40)  # offsets[2]'s most significant byte
    entry = entries(scan(folder))[victim]
    assert entry["status"] == "corrupt" and "offset table is damaged" in entry["error"], entry
    with pytest.raises(Exception):  # noqa: B017
        streaming_reads(folder, tmp_path)


def test_flipped_size_header_is_corrupt_at_its_sample(tmp_path: Path) -> None:
    """No hashes: one sample's size header (its image's byte count) no longer adds up: that
    sample is corrupt at its row, the shard's other samples are read."""
    folder = write(tmp_path / "mds", None)
    name, row = where(folder, 6)
    raw = bytearray((folder / name).read_bytes())
    begin, _ = mds_sample_span(bytes(raw), row)
    raw[begin + 1] ^= 0x01  # the image size, +256
    (folder / name).write_bytes(bytes(raw))
    found = sites(scan(folder))
    assert found == {(name, row, None, "corrupt"), (*where(folder, 7), "score", "nan")} | {
        (*where(folder, 13), "vec", "inf")
    }, found
    with pytest.raises(Exception):  # noqa: B017
        streaming_reads(folder, tmp_path)


def test_flipped_config_block_is_a_warning_only(tmp_path: Path) -> None:
    """No hashes: a byte of the JSON config block MDSWriter writes between the offset table and
    the samples.  StreamingDataset never reads that block and reads every sample fine, so the
    shard is not corrupt: a warning names the block, and the samples are still checked."""
    folder = write(tmp_path / "mds", None, nan_at=None, inf_at=None)
    victim = shard_files(folder)[0]
    n = mds_index(folder)["shards"][0]["samples"]
    flip(folder / victim, 4 + 4 * (n + 1), 0x01)  # its opening brace
    report = scan(folder)
    entry = entries(report)[victim]
    assert entry["status"] == "flagged" and entry["counts"] == {"corrupt": 1}, entry
    (value,) = report.findings["value"]
    assert "config block" in value and "not the JSON MDSWriter writes" in value
    assert report.findings["severity"].tolist() == ["warning"]
    assert len(streaming_reads(folder, tmp_path)) == N


def test_without_index_the_config_block_names_the_columns(tmp_path: Path) -> None:
    """A shard whose index.json is gone is still read by the columns its config block names."""
    folder = write(tmp_path / "mds", "zstd")
    (folder / "index.json").unlink()
    report = scan(folder)
    assert {e["columns"]["vec"] for e in report.data["files"]} == {"ndarray:float32"}
    assert {(c, k) for _, _, c, k in sites(report)} == {("score", "nan"), ("vec", "inf")}


# --- every encoding -------------------------------------------------------------------------

SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
SCALARS += ("float16", "float32", "float64")
ENCODINGS = {
    "b": "bytes",
    "s": "str",
    "i": "int",
    **{n: n for n in SCALARS},
    "si": "str_int",
    "sf": "str_float",
    "sd": "str_decimal",
    "pil": "pil",
    "fpil": "pil",
    "jpg": "jpeg",
    "png": "png",
    "lpil": "list[pil]",
    "ljpg": "list[jpeg]",
    "lpng": "list[png]",
    "ja": "jpeg_array",
    "ja2": "jpegarray",
    "pk": "pkl",
    "pkf": "pkl",
    "js": "json",
    "nd": "ndarray",
    "ndf": "ndarray:float64",
    "nds": "ndarray:float32:2,3",
}
"""Every encoding ``streaming.base.format.mds.encodings`` offers, and each ndarray layout."""


def every_encoding(i: int, bad: bool) -> dict[str, Any]:
    from PIL import Image

    im = Image.new("RGB", (5, 4), (i, 20, 30))
    pixels = np.ones((3, 2), np.float32)
    if bad:
        pixels[1, 1] = np.nan
    out: dict[str, Any] = {"b": b"\x00\x01", "s": f"héllo {i}", "i": -i}
    out |= {n: np.dtype(n).type(i) for n in SCALARS}
    out["float64"] = np.inf if bad else 0.5
    out |= {"si": 12, "sf": float("nan") if bad else 1.5, "sd": Decimal("2.25")}
    out |= {"pil": im, "fpil": Image.fromarray(pixels, mode="F"), "jpg": im, "png": im}
    out |= {"lpil": [im, im], "ljpg": [im], "lpng": [im, im, im]}
    out |= {"ja": [jpeg(i), jpeg(i + 1)], "ja2": [jpeg(i)], "pk": {"k": [i]}, "js": {"q": i}}
    out["pkf"] = np.float32(np.nan if bad else 1)  # read from the pickle's opcodes
    nd = np.arange(6, dtype=np.int16).reshape(2, 3)
    out |= {"nd": nd, "ndf": np.full(4, np.nan if bad else 1.0), "nds": np.ones((2, 3), "f4")}
    return out


def test_every_encoding_read_as_streaming_decodes_it(tmp_path: Path) -> None:
    folder = write(
        tmp_path / "mds",
        "zstd",
        ("xxh64",),
        columns=ENCODINGS,
        samples=[every_encoding(i, bad=i == 2) for i in range(6)],
        size_limit=None,
    )
    report = scan(folder)
    (entry,) = report.data["files"]
    assert entry["columns"] == dict(sorted(ENCODINGS.items()))
    assert sites(report) == {
        ("shard.00000.mds.zstd", 2, column, check)
        for column, check in [
            ("fpil", "nan"),
            ("float64", "inf"),
            ("sf", "nan"),
            ("ndf", "nan"),
            ("pkf", "nan"),
        ]
    }
    read = streaming_reads(folder, tmp_path)
    assert np.isnan(np.asarray(read[2]["fpil"])).any() and len(read[4]["lpng"]) == 3


@pytest.mark.parametrize(
    "column, at, bit",
    [
        ("ljpg", 4, 0x01),  # the element count 1 -> 0: sizes no longer add up
        ("lpng", 8, 0x02),  # the first element's size: sizes no longer add up
        ("ja", 0, 0x02),  # the image count 2 -> 0: streaming refuses an empty jpeg_array
        ("ja", "second", 0x01),  # the second JPEG's first byte: no longer a JPEG
        ("lpil", 20, 0x10),  # the first element's width: more pixels than it holds
    ],
)
def test_flipped_byte_in_a_list_value_found_at_its_sample(
    column: str, at: int | str, bit: int, tmp_path: Path
) -> None:
    """No hashes: damage inside one list value that makes streaming's decoder (or Pillow, on
    the image it returns) fail: corrupt at the sample's row and column."""
    from PIL import Image

    folder = write(
        tmp_path / "mds",
        None,
        columns=ENCODINGS,
        samples=[every_encoding(i, bad=False) for i in range(6)],
        size_limit=None,
    )
    raw = bytearray(mds_raw(folder))
    entry = mds_index(folder)["shards"][0]
    start, end = mds_value_span(bytes(raw), entry, 4, column)
    raw[start + (12 + len(jpeg(4)) if at == "second" else int(at))] ^= bit
    (folder / "shard.00000.mds").write_bytes(bytes(raw))
    assert sites(scan(folder)) == {("shard.00000.mds", 4, column, "corrupt")}

    streaming_module()
    from streaming.base.format.mds.encodings import mds_decode

    try:  # the oracle: streaming's decode, then Pillow on the images it returns
        value = mds_decode(ENCODINGS[column], bytes(raw[start:end]))
        for image in value:
            assert isinstance(image, Image.Image)
            image.load()
    except Exception:  # noqa: BLE001 - whatever they raise
        return
    # streaming read it without an error, but not what was written: the element count went
    # 1 -> 0 and its decoder returns an empty list, ignoring the image bytes after the header
    assert len(value) != len(every_encoding(4, bad=False)[column]), value


def test_hand_built_shard_without_a_config_block_still_reads(tmp_path: Path) -> None:
    """Hostile (by hand: MDSWriter always writes the block): samples right after the offset
    table, as a writer that leaves the config out would lay them."""
    folder = write(tmp_path / "mds", None, nan_at=1, inf_at=None)
    entry = mds_index(folder)["shards"][0]
    raw = mds_raw(folder)
    n = entry["samples"]
    table = 4 + 4 * (n + 1)
    offsets = np.frombuffer(raw, "<u4", n + 1, 4).astype(np.int64)
    body = raw[int(offsets[0]) :]
    shifted = (offsets - offsets[0] + table).astype("<u4").tobytes()
    (folder / entry["raw_data"]["basename"]).write_bytes(raw[:4] + shifted + body)
    entry["raw_data"]["bytes"] = table + len(body)
    index = mds_index(folder)
    index["shards"][0] = entry
    (folder / "index.json").write_text(json.dumps(index))
    assert sites(scan(folder)) == {(*where(folder, 1), "score", "nan")}


def test_json_values_are_checked_for_their_numbers(tmp_path: Path) -> None:
    """A ``json`` column's NaN/Infinity, at any depth: json.loads (streaming's decode) reads
    them as floats a loader hands on."""
    docs = [{"loss": 0.5, "hist": [1.0, 2.0]} for _ in range(5)]
    docs[1]["loss"], docs[3]["hist"][1] = float("nan"), float("-inf")
    folder = write(
        tmp_path / "mds",
        None,
        columns={"meta": "json", "id": "int"},
        samples=[{"meta": d, "id": i} for i, d in enumerate(docs)],
        size_limit=None,
    )
    assert sites(scan(folder)) == {
        ("shard.00000.mds", 1, "meta", "nan"),
        ("shard.00000.mds", 3, "meta", "inf"),
    }
    read = streaming_reads(folder, tmp_path)
    assert np.isnan(read[1]["meta"]["loss"]) and np.isinf(read[3]["meta"]["hist"][1])


@pytest.mark.parametrize("sub_indexes", [True, False], ids=["with-sub-indexes", "root-only"])
def test_merged_index_over_subfolders_is_the_datasets_metadata(
    sub_indexes: bool, tmp_path: Path
) -> None:
    """``streaming.base.util.merge_index`` writes a root ``index.json`` naming the shards of
    sub-datasets by their paths (``p0/shard.00000.mds.zstd``): it is metadata (not JSON Lines
    data), and a shard whose own folder has no index is read with the root's entry (its hashes
    checked), as StreamingDataset reads the merged dataset."""
    streaming_module()
    from streaming.base.util import merge_index

    root = tmp_path / "merged"
    for k in range(2):  # two sub-datasets with their own labels (else their shards are copies)
        part = [s | {"label": s["label"] + 100 * k} for s in samples(5 if k else None, None)]
        write(root / f"p{k}", "zstd", ("sha1",), samples=part)
    merge_index([str(root / f"p{k}" / "index.json") for k in range(2)], str(root), keep_local=True)
    shard, row = where(root / "p1", 5)
    if not sub_indexes:
        for k in range(2):
            (root / f"p{k}" / "index.json").unlink()
    report = scan(root)
    assert str(root / "index.json") in report.data["ignored"]
    assert sites(report) == {(shard, row, "score", "nan")}
    assert len(streaming_reads(root, tmp_path)) == 2 * N
    if not sub_indexes:  # the root's hashes are the ones checked
        victim = root / "p0" / "shard.00000.mds.zstd"
        flip(victim, -3, 0x01)
        files = entries(scan(root), root)
        assert files["p0/shard.00000.mds.zstd"]["status"] == "corrupt"
        assert "sha1" in files["p0/shard.00000.mds.zstd"]["error"]


def test_scalar_columns_reach_every_check_and_the_tensor_schema(tmp_path: Path) -> None:
    """Fixed-size numeric columns are handed on as tensors: beyond NaN/Inf, a float16
    overflow (``extreme``) and the ``tensors:`` schema's rules (``range``) are checked on them
    as on any other format's values; a sample whose sizes do not add up keeps the rows after
    it in their places."""
    columns = {"loss": "float64", "label": "int", "name": "str"}
    rows = [{"loss": 0.5, "label": i % 3, "name": f"s{i}"} for i in range(9)]
    rows[2]["loss"], rows[6]["label"], rows[7]["loss"] = 1e30, 9, float("nan")
    folder = write(tmp_path / "mds", None, columns=columns, samples=rows, size_limit=None)
    schema = tmp_path / "s.yaml"
    schema.write_text("tensors:\n  keys:\n    label: {range: [0, 2]}\n")
    shard = "shard.00000.mds"
    expected = {
        (shard, 2, "loss", "extreme"),
        (shard, 6, "label", "out_of_range"),
        (shard, 7, "loss", "nan"),
    }
    assert sites(scan(folder, schema=str(schema))) == expected
    read = streaming_reads(folder, tmp_path)  # the oracle hands on the same values
    assert read[2]["loss"] == 1e30 and read[6]["label"] == 9 and np.isnan(read[7]["loss"])
    at = mds_sample_span((folder / shard).read_bytes(), 4)[0]  # sample 4: its size header
    flip(folder / shard, at + 1, 0x01)
    found = sites(scan(folder, schema=str(schema)))
    assert found == expected | {(shard, 4, None, "corrupt")}


def test_variable_values_reach_every_check_and_the_tensor_schema(tmp_path: Path) -> None:
    """The numbers of the other encodings a loader hands on (an ``ndarray`` in its shape, a
    ``json`` document's floats, ``str_float``) go on as the sample's tensors: a float16
    overflow (``extreme``) is found in them, and the ``tensors:`` schema's rules and declared
    shapes run on them by column name, as on any tensor file."""
    columns = {"vec": "ndarray:float32", "ids": "ndarray", "meta": "json", "t": "str_float"}
    rows = [
        {
            "vec": np.full((2, 3), 0.5, np.float32),
            "ids": np.arange(4, dtype=np.int64) + i,
            "meta": {"w": [0.1] * (2 + i % 3)},  # lengths differ: one ragged run
            "t": 0.25,
        }
        for i in range(8)
    ]
    rows[1]["vec"][1, 2] = 1e30
    rows[2]["meta"]["w"][1] = 1e6
    rows[3]["t"] = 7e10
    rows[5]["ids"][3] = 99
    rows[6]["vec"] = np.full((3, 2), 0.5, np.float32)  # the loader gets another shape
    folder = write(tmp_path / "mds", None, columns=columns, samples=rows, size_limit=None)
    shard = "shard.00000.mds"
    plain = {
        (shard, 1, "vec", "extreme"),
        (shard, 2, "meta", "extreme"),
        (shard, 3, "t", "extreme"),
    }
    assert sites(scan(folder)) == plain
    schema = tmp_path / "s.yaml"
    schema.write_text("tensors:\n  keys:\n    ids: {range: [0, 20]}\n    vec: {shape: [*, 2, 3]}\n")
    assert sites(scan(folder, schema=str(schema))) == plain | {
        (shard, 5, "ids", "out_of_range"),
        (shard, 6, "vec", "schema"),
    }
    read = streaming_reads(folder, tmp_path)  # the oracle hands on the same values
    assert read[1]["vec"][1, 2] == np.float32(1e30) and read[5]["ids"][3] == 99
    assert read[2]["meta"]["w"][1] == 1e6 and read[6]["vec"].shape == (3, 2)
