"""litdata ``optimize`` output (litdata 0.2.76): ``chunk-*.bin`` + ``index.json``, written by
``litdata.optimize`` itself, read back by ``litdata.StreamingDataset``: the oracle.

Pytree items of every serializer datacheck reads, zstd in each of litdata's three wrappings
(whole chunk, batches, samples), text rows (stored as an Arrow trailer), nested JSON leaves,
``TokensLoader`` chunks; serializers datacheck cannot decode are listed under ``ignored``.
Each ``optimize`` call runs one worker process (fork), once per module.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datacheck

from ._kit import copy_of, entries, flip, scan, sites, truncate

litdata = pytest.importorskip("litdata")
torch = pytest.importorskip("torch")

N = 8


def jpeg_image(i: int) -> Any:
    """A JPEG litdata stores with its ``jpeg`` serializer, as it keeps a JPEG file's bytes."""
    from litdata.types import Jpeg
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i * 20, 3, 3)).save(buf, "JPEG")
    return Jpeg(bytes=buf.getvalue())


def rich(i: int) -> dict[str, Any]:
    """One leaf of each serializer datacheck reads; a NaN at item 3, an Inf at item 5."""
    from PIL import Image

    x = np.linspace(0, 1, 4, dtype=np.float32)
    if i == 3:
        x[1] = np.nan
    return {
        "i": i,
        "f": float("inf") if i == 5 else i / 2,
        "s": f"héllo {i}",
        "b": bool(i % 2),
        "raw": b"ab",
        "x": x,
        "m": np.ones((2, 3), np.float64),
        "t": torch.arange(3, dtype=torch.float16),
        "t2": torch.ones(2, 2),
        "pil": Image.new("L", (4, 4), i),
        "jpg": jpeg_image(i),
    }


def text(i: int) -> dict[str, Any]:
    return {"text": f"hello {i}", "label": i, "score": float("nan") if i == 2 else 0.5}


def nested(i: int) -> dict[str, Any]:
    w = [0.5, float("nan") if i == 1 else 1.0]
    return {"conv": [{"role": "u", "c": f"q{i}"}], "ids": [1, 2, i], "w": w, "t": np.ones(2)}


def tokens(i: int) -> Any:
    return torch.arange(i * 10, i * 10 + 7, dtype=torch.int32)


def pair(i: int) -> tuple[Any, ...]:
    """A tuple item with a nested dict: leaves named by position and key.  litdata pickles a
    NumPy scalar (``y``): its NaN is read from the pickle's opcodes, never unpickled."""
    return (i, {"y": np.float32(np.nan if i == 6 else 1.0), "z": [i]})


def wide(i: int) -> dict[str, Any]:
    """Values past float16 (``extreme``, a warning) in an array, a JSON-like list and a float;
    an id out of a schema's range in an integer array."""
    x = np.full((2, 3), 0.5, np.float32)
    if i == 2:
        x[1, 2] = 1e30
    ids = np.arange(4, dtype=np.int64) + i
    if i == 5:
        ids[3] = 99
    return {"x": x, "ids": ids, "w": [0.5, 1e6 if i == 4 else 1.0], "f": 7e10 if i == 6 else 0.5}


def pdf(i: int) -> dict[str, Any]:
    return {"i": i, "doc": b"%PDF-1.4 not decoded"}


KINDS: dict[str, tuple[Callable[[int], Any], dict[str, Any]]] = {
    "rich": (rich, {}),
    "rich-zstd-batch": (rich, {"compression": "zstd"}),
    "rich-zstd-chunk": (rich, {"compression": "zstd", "compression_level": "chunk"}),
    "rich-zstd-sample": (rich, {"compression": "zstd", "compression_level": "sample"}),
    "text": (text, {}),
    "text-zstd": (text, {"compression": "zstd"}),
    "nested": (nested, {}),
    "pair": (pair, {}),
    "wide": (wide, {}),
}
"""Name -> (the function optimize maps over ``range(N)``, optimize's options)."""
PLANTED = {
    "rich": {(3, "x", "nan"), (5, "f", "inf")},
    "text": {(2, "score", "nan")},
    "nested": {(1, "w", "nan")},
    "pair": {(6, "1.y", "nan")},
    "wide": {(2, "x", "extreme"), (4, "w", "extreme"), (6, "f", "extreme")},
}


CHUNK_BYTES = {k: 2000 if k.startswith("rich") else 4096 for k in KINDS} | {"pdf": 4096}
"""``chunk_bytes``: 2 rich items a chunk (one past the target makes litdata warn)."""


def planted(kind: str) -> set[tuple[int, str, str]]:
    return PLANTED[kind.split("-")[0]]


CACHES = ("DATA_OPTIMIZER_CACHE_FOLDER", "DATA_OPTIMIZER_DATA_CACHE_FOLDER")
"""Where optimize stages its chunks: a folder of its own per call (a shared one mixes the
calls' chunks and index files up)."""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """``kind -> folder``: what ``litdata.optimize`` writes, once per kind in this module."""
    root = tmp_path_factory.mktemp("litdata")
    saved = {k: os.environ.get(k) for k in CACHES}
    done: dict[str, Path] = {}

    def write(kind: str) -> Path:
        if kind not in done:
            fn, options = KINDS[kind]
            out = root / kind
            os.environ.update({k: str(root / f"{kind}.{k}") for k in CACHES})
            size = {"chunk_size": 16} if kind == "tokens" else {"chunk_bytes": CHUNK_BYTES[kind]}
            with warnings.catch_warnings():  # the forked worker inherits the filters
                warnings.simplefilter("default")
                litdata.optimize(
                    fn=fn,
                    inputs=list(range(N)),
                    output_dir=str(out),
                    num_workers=1,
                    start_method="fork",
                    verbose=False,
                    **size,
                    **options,
                )
            index = json.loads((out / "index.json").read_text())
            assert sum(c["chunk_size"] for c in index["chunks"]) == N, index  # it wrote them
            done[kind] = out
        return done[kind]

    yield write
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def streaming_reads(folder: Path) -> list[Any]:
    """Every item as litdata's StreamingDataset reads it back, from a copy (it may delete a
    local chunk it decompressed).  litdata decodes JPEGs with torchvision, which has no build
    for the CPU torch the tests pin: where it is missing, a full Pillow decode stands in for
    ``torchvision.io.decode_jpeg`` (litdata's own choice for JPEGs with EXIF).  torch warns that
    the buffers litdata wraps are read-only: litdata's doing."""
    import importlib.util

    from litdata.streaming import serializers

    local = copy_of(folder, folder.parent / f"{folder.name}-oracle-{next(_COPIES)}")
    decode = serializers._decode_image_tensor
    if importlib.util.find_spec("torchvision") is None:
        serializers._decode_image_tensor = _pillow_decode
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            ds = litdata.StreamingDataset(str(local))
            return [ds[i] for i in range(len(ds))]
    finally:
        serializers._decode_image_tensor = decode


def _pillow_decode(data: Any) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(bytes(data)))
    image.load()
    return torch.from_numpy(np.asarray(image.convert("RGB"))).permute(2, 0, 1)


_COPIES = itertools.count()


def chunk_files(folder: Path) -> list[str]:
    return [c["filename"] for c in json.loads((folder / "index.json").read_text())["chunks"]]


def item_sites(folder: Path, found: set[tuple[str, int | None, str | None, str]]) -> set[Any]:
    """Findings at dataset-wide item indices (chunk files in index order)."""
    starts, at = {}, 0
    for c in json.loads((folder / "index.json").read_text())["chunks"]:
        starts[c["filename"]] = at
        at += c["chunk_size"]
    return {(starts[f] + (r or 0), c, k) for f, r, c, k in found}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_planted_values_found_at_their_items(kind: str, written: Callable[[str], Path]) -> None:
    folder = written(kind)
    report = scan(folder)
    files = entries(report)
    assert sorted(files) == sorted(chunk_files(folder))
    assert "corrupt" not in {e["status"] for e in files.values()}, report.data["files"]
    assert sum(e["rows"] for e in files.values()) == N
    assert [Path(p).name for p in report.data["ignored"]] == ["index.json"]  # not JSON Lines
    assert item_sites(folder, sites(report)) == planted(kind)
    assert len(streaming_reads(folder)) == N


def test_leaf_values_reach_the_tensor_schema(
    written: Callable[[str], Path], tmp_path: Path
) -> None:
    """Array leaves go on as the item's tensors in their shape: a ``tensors:`` schema's range
    and declared shape run on them by leaf name, as on any tensor file."""
    folder = written("wide")
    schema = tmp_path / "s.yaml"
    schema.write_text("tensors:\n  keys:\n    ids: {range: [0, 20]}\n    x: {shape: [*, 3, 2]}\n")
    found = item_sites(folder, sites(scan(folder, schema=str(schema))))
    assert found == planted("wide") | {(5, "ids", "out_of_range")} | {
        (i, "x", "schema") for i in range(N)
    }
    read = streaming_reads(folder)  # the values litdata hands on
    assert read[2]["x"][1, 2] == np.float32(1e30) and read[5]["ids"][3] == 99
    assert read[4]["w"][1] == 1e6 and read[6]["f"] == 7e10


def test_values_as_streaming_dataset_reads_them(written: Callable[[str], Path]) -> None:
    read = streaming_reads(written("rich"))
    assert np.isnan(read[3]["x"][1]) and read[5]["f"] == float("inf")
    assert read[4]["s"] == "héllo 4" and read[2]["t"].dtype == torch.float16


def test_flagged_items_read_back(written: Callable[[str], Path]) -> None:
    """flagged_rows on a chunk: numbers as numbers, text as text, the rest as its bytes."""
    report = scan(written("rich"))
    rows = report.flagged_rows("chunk-0-1.bin")  # items 2 and 3: the NaN is item 3
    assert list(rows.index) == [1] and rows.loc[1, "_checks"] == "x: nan"
    assert rows.loc[1, "i"] == 3 and rows.loc[1, "s"] == "héllo 3" and rows.loc[1, "b"]
    assert np.isnan(np.frombuffer(rows.loc[1, "x"], "<f4")[1])


def test_tokens_loader_chunks(written: Callable[[str], Path], tmp_path: Path) -> None:
    from litdata.streaming.item_loader import TokensLoader

    KINDS["tokens"] = (tokens, {"item_loader": TokensLoader()})
    folder = written("tokens")
    files = entries(scan(folder))
    assert {e["status"] for e in files.values()} == {"ok"} and len(files) == N // 2
    assert {e["rows"] for e in files.values()} == {2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ds = litdata.StreamingDataset(str(folder), item_loader=TokensLoader(block_size=7))
        assert ds[3].tolist() == list(range(30, 37))
    damaged = copy_of(folder, tmp_path / "cut")
    truncate(damaged / chunk_files(folder)[1], -3)
    assert entries(scan(damaged))[chunk_files(folder)[1]]["status"] == "corrupt"


# --- damaged copies: corrupt where the oracle fails ------------------------------------------


@pytest.mark.parametrize(
    "kind", ["rich", "rich-zstd-batch", "rich-zstd-chunk", "rich-zstd-sample", "text"]
)
def test_truncated_chunk_is_corrupt(
    kind: str, written: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = copy_of(written(kind), tmp_path / "cut")
    victim = chunk_files(folder)[0]
    truncate(folder / victim, -7)
    files = entries(scan(folder))
    assert files[victim]["status"] == "corrupt", files[victim]
    assert {e["status"] for n, e in files.items() if n != victim} <= {"ok", "flagged"}
    with pytest.raises(Exception):  # noqa: B017 - whatever litdata raises
        streaming_reads(folder)


def test_flipped_leaf_size_is_corrupt_at_its_item(
    written: Callable[[str], Path], tmp_path: Path
) -> None:
    """The size header of item 0's first leaf: the leaves no longer add up to the item."""
    folder = copy_of(written("rich"), tmp_path / "flip")
    victim = chunk_files(folder)[0]
    data = (folder / victim).read_bytes()
    start = int(np.frombuffer(data, "<u4", 1, 4)[0])
    flip(folder / victim, start, 0x01)  # the int leaf's size: 8 -> 9
    found = sites(scan(folder))
    assert (victim, 0, None, "corrupt") in found, found
    with pytest.raises(Exception):  # noqa: B017
        streaming_reads(folder)


def test_flipped_string_byte_is_corrupt_at_its_item_and_leaf(
    written: Callable[[str], Path], tmp_path: Path
) -> None:
    folder = copy_of(written("rich"), tmp_path / "flip")
    victim = chunk_files(folder)[2]  # items 4 and 5
    data = bytearray((folder / victim).read_bytes())
    at = data.index("héllo".encode()) + 1  # the first byte of 'é'
    data[at] ^= 0x40  # no longer a UTF-8 lead byte
    (folder / victim).write_bytes(bytes(data))
    assert (victim, 0, "s", "corrupt") in sites(scan(folder))
    with pytest.raises(UnicodeDecodeError):
        streaming_reads(folder)


def test_flipped_byte_in_the_offset_table(written: Callable[[str], Path], tmp_path: Path) -> None:
    folder = copy_of(written("text"), tmp_path / "flip")
    (victim,) = chunk_files(folder)
    flip(folder / victim, 4 + 4 * 3 + 2, 0x01)  # offsets[3]
    entry = entries(scan(folder))[victim]
    assert entry["status"] == "corrupt" and "offset table is damaged" in entry["error"], entry


def test_unsupported_serializer_is_ignored_with_the_reason(
    written: Callable[[str], Path],
) -> None:
    """A dataset with a leaf datacheck does not decode (a PDF here) is listed, every chunk,
    under ``ignored`` with the reason: never passed unread, never called corrupt."""
    KINDS["pdf"] = (pdf, {})
    folder, other = written("pdf"), written("text")
    report = datacheck.scan([str(folder), str(other)], executor="inprocess", workers=1)
    assert {Path(e["path"]).parent for e in report.data["files"]} == {other}
    reasons = {
        Path(p).name: why
        for p, why in report.data["ignored_why"].items()
        if Path(p).parent == folder and Path(p).name != "index.json"  # the index: metadata
    }
    assert set(reasons) == set(chunk_files(folder))
    assert all("'pdf' leaves are PDFs" in why for why in reasons.values()), reasons


@pytest.mark.parametrize("kind", ["rich-zstd-batch", "rich-zstd-sample", "text", "nested"])
def test_cuts_and_flips_never_crash(
    kind: str, written: Callable[[str], Path], tmp_path: Path
) -> None:
    """Hostile copies (random cuts and flipped bytes, made by hand): every chunk still gets
    one entry, and nothing escapes the reader (a traceback would fail the scan)."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    for trial in range(8):
        folder = copy_of(written(kind), tmp_path / f"t{trial}")
        victim = folder / chunk_files(folder)[0]
        data = bytearray(victim.read_bytes())
        if trial < 3:
            data = data[: int(rng.integers(0, len(data)))]
        else:
            for at in rng.integers(0, len(data), 3):
                data[at] ^= 1 << int(rng.integers(0, 8))
        victim.write_bytes(bytes(data))
        files = entries(scan(folder))
        assert sorted(files) == sorted(chunk_files(folder))
