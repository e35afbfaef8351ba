"""Hugging Face ``datasets`` (5.2): ``save_to_disk`` folders, ``Dataset.to_parquet`` files and
the ``push_to_hub`` parquet layout (``data/train-00000-of-00002.parquet``, written per shard
with ``to_parquet``, no network), features ``Image``, ``Audio``, ``Sequence``, ``Array2D``,
``ClassLabel``; ``datasets.load_from_disk`` / ``load_dataset("parquet", ...)`` are the oracle.

``datasets`` 5 encodes and decodes audio with torchcodec, which needs FFmpeg (not on the
test machines): the audio column is written as ``{bytes, path}`` structs and cast to the
``Audio`` feature (``Dataset.cast``: the same Arrow storage and metadata), and soundfile (what
``datasets`` decoded audio with before torchcodec) stands in as its oracle.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._kit import copy_of, entries, flip, scan, sites, truncate

datasets = pytest.importorskip("datasets")
N = 8
BAD_IMAGE = 3


def png(i: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(buf, "PNG")
    return buf.getvalue()


def wav(nan: bool) -> bytes:
    import soundfile as sf

    x = np.zeros((50, 1), np.float32)
    if nan:
        x[5] = np.nan
    buf = io.BytesIO()
    sf.write(buf, x, 8000, format="WAV", subtype="FLOAT")
    return buf.getvalue()


FEATURES = {
    "image": lambda: datasets.Image(),
    "audio": lambda: datasets.Audio(sampling_rate=8000),
    "seq": lambda: datasets.Sequence(datasets.Value("float32")),
    "arr": lambda: datasets.Array2D((2, 2), "float32"),
    "label": lambda: datasets.ClassLabel(names=["cat", "dog"]),
    "x": lambda: datasets.Value("float64"),
}


def dataset(planted: bool) -> Any:
    """``N`` examples of every feature; planted: a truncated PNG at row 3, a NaN in the
    sequence at 2, NaN audio at 5, an Inf in the 2-D array at 6, a NaN ``x`` at 7."""
    images = [{"bytes": png(i), "path": None} for i in range(N)]
    if planted:
        images[BAD_IMAGE] = {"bytes": png(BAD_IMAGE)[:40], "path": None}
    bad = lambda i, at: planted and i == at  # noqa: E731
    data = {
        "image": images,
        "audio": [{"bytes": wav(bad(i, 5)), "path": None} for i in range(N)],
        "seq": [[0.5, float("nan") if bad(i, 2) else 1.0] for i in range(N)],
        "arr": [np.full((2, 2), np.inf if bad(i, 6) else 1.0, np.float32) for i in range(N)],
        "label": [i % 2 for i in range(N)],
        "x": [float("nan") if bad(i, 7) else float(i) for i in range(N)],
    }
    features = datasets.Features({k: make() for k, make in FEATURES.items()})
    raw = features.copy()
    raw["audio"] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    return datasets.Dataset.from_dict(data, features=datasets.Features(raw)).cast(features)


PLANTED = {
    (BAD_IMAGE, "image", "corrupt"),
    (2, "seq", "nan"),
    (5, "audio", "nan"),
    (6, "arr", "inf"),
    (7, "x", "nan"),
}


def row_sites(report: Any, starts: dict[str, int]) -> set[tuple[int, str | None, str]]:
    """Findings at dataset-wide rows (``starts``: each file's first row)."""
    return {(starts[f] + (r or 0), c, k) for f, r, c, k in sites(report)}


def write(layout: str, folder: Path, planted: bool = True) -> tuple[Path, dict[str, int]]:
    """The dataset as ``layout`` writes it, and each data file's first row."""
    ds = dataset(planted)
    if layout == "save_to_disk":
        ds.save_to_disk(str(folder), num_shards=2)
        names = [f"data-0000{k}-of-00002.arrow" for k in range(2)]
    elif layout == "to_parquet":
        folder.mkdir()
        ds.to_parquet(str(folder / "train.parquet"))
        names = ["train.parquet"]
    else:  # push_to_hub's layout, a shard per file
        (folder / "data").mkdir(parents=True)
        names = [f"train-0000{k}-of-00002.parquet" for k in range(2)]
        for k, name in enumerate(names):
            ds.shard(2, k, contiguous=True).to_parquet(str(folder / "data" / name))
    starts = {name: (N // 2) * k for k, name in enumerate(names)}
    return folder, starts


LAYOUTS = ["save_to_disk", "to_parquet", "push_to_hub"]


def load(layout: str, folder: Path) -> Any:
    """The oracle: the dataset as ``datasets`` loads it back (audio left as its bytes, for
    soundfile: see the module docstring)."""
    if layout == "save_to_disk":
        loaded = datasets.load_from_disk(str(folder))
    else:
        files = sorted(str(p) for p in folder.rglob("*.parquet"))
        cache = str(folder.parent / f"{folder.name}-hf-cache")  # not the user's cache
        loaded = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)
    return loaded.cast_column("audio", datasets.Audio(decode=False))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_clean_dataset_is_ok(layout: str, tmp_path: Path) -> None:
    folder, starts = write(layout, tmp_path / "ds", planted=False)
    report = scan(folder)
    files = entries(report)
    assert sorted(files) == sorted(starts)
    assert {e["status"] for e in files.values()} == {"ok"}, report.data["files"]
    assert all(e["columns"]["image"] == "Image" for e in files.values())
    assert all(e["columns"]["audio"] == "Audio" for e in files.values())
    loaded = load(layout, folder)
    assert len(loaded) == N and all(loaded[i]["image"].size == (8, 8) for i in range(N))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_planted_values_found_at_their_rows(layout: str, tmp_path: Path) -> None:
    """The truncated PNG in a Parquet file is found at its row, as in a save_to_disk folder."""
    folder, starts = write(layout, tmp_path / "ds")
    assert row_sites(scan(folder), starts) == PLANTED
    loaded = load(layout, folder)
    with pytest.raises(Exception):  # noqa: B017 - what Pillow raises through datasets
        loaded[BAD_IMAGE]["image"]
    loaded[BAD_IMAGE + 1]["image"].load()
    assert np.isnan(loaded[2]["seq"][1]) and np.isinf(loaded[6]["arr"]).all()
    import soundfile as sf  # the audio oracle (see the module docstring)

    audio = loaded[5]["audio"]["bytes"]
    assert np.isnan(sf.read(io.BytesIO(audio))[0]).any()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_truncated_file_is_corrupt(layout: str, tmp_path: Path) -> None:
    clean, starts = write(layout, tmp_path / "clean", planted=False)
    folder = copy_of(clean, tmp_path / "cut")
    victim = sorted(starts)[-1]
    (path,) = folder.rglob(victim)
    truncate(path, -100)
    files = entries(scan(folder))
    assert files[victim]["status"] == "corrupt", files[victim]
    assert {e["status"] for n, e in files.items() if n != victim} <= {"ok"}
    with pytest.raises(Exception):  # noqa: B017 - whatever datasets / pyarrow raise
        loaded = load(layout, folder)
        [loaded[i] for i in range(len(loaded))]


def test_flipped_png_byte_is_corrupt_at_its_row(tmp_path: Path) -> None:
    """A byte inside one stored PNG of a save_to_disk stream (Arrow IPC holds the bytes as
    they are): its CRC no longer matches, found at that row and column; the oracle's decode
    (Pillow through datasets) fails there too."""
    folder, starts = write("save_to_disk", tmp_path / "ds", planted=False)
    path = folder / "data-00000-of-00002.arrow"
    at = path.read_bytes().index(png(1)) + len(png(1)) - 20  # row 1's PNG, in its IDAT
    flip(path, at, 0x01)
    assert row_sites(scan(folder), starts) == {(1, "image", "corrupt")}
    with pytest.raises(Exception):  # noqa: B017
        load("save_to_disk", folder)[1]["image"]


@pytest.mark.parametrize("layout", ["to_parquet", "push_to_hub"])
def test_flipped_footer_byte_is_corrupt(layout: str, tmp_path: Path) -> None:
    folder, starts = write(layout, tmp_path / "ds", planted=False)
    victim = sorted(starts)[0]
    (path,) = folder.rglob(victim)
    flip(path, -6, 0x40)  # the footer's length: the metadata no longer parses
    files = entries(scan(folder))
    assert files[victim]["status"] == "corrupt", files[victim]
    with pytest.raises(Exception):  # noqa: B017
        load(layout, folder)


def test_class_label_and_sequences_read_like_datasets(tmp_path: Path) -> None:
    """The feature types the oracle reads back, by column."""
    folder, _ = write("to_parquet", tmp_path / "ds", planted=False)
    (entry,) = scan(folder).data["files"]
    features = load("to_parquet", folder).features
    assert isinstance(features["label"], datasets.ClassLabel)
    assert entry["columns"]["label"] == "int64" and "list" in entry["columns"]["seq"]


def nested_media(bad: int) -> Any:
    """Images inside other features, as ``datasets`` stores them: a ``List(Image)``, an
    ``Image`` in a dict beside a number, and a ``Sequence`` of dicts (a dict of lists in
    Arrow); at row ``bad`` one image of each is a truncated PNG."""
    n = 7
    cut = lambda i, k: png(k)[:40] if i == bad else png(k)  # noqa: E731
    features = datasets.Features(
        {
            "imgs": datasets.List(datasets.Image()),
            "pair": {"img": datasets.Image(), "w": datasets.Value("float32")},
            "views": datasets.Sequence({"img": datasets.Image()}),
        }
    )
    data = {
        "imgs": [
            [{"bytes": png(0), "path": None}, {"bytes": cut(i, 1), "path": None}] for i in range(n)
        ],
        "pair": [{"img": {"bytes": cut(i, 2), "path": None}, "w": 1.0} for i in range(n)],
        "views": [
            {
                "img": [{"bytes": png(3), "path": None}] * (i % 2)
                + [{"bytes": cut(i, 4), "path": None}]
            }
            for i in range(n)
        ],
    }
    return datasets.Dataset.from_dict(data, features=features)


@pytest.mark.parametrize("layout", ["save_to_disk", "to_parquet"])
def test_images_nested_in_lists_and_dicts_are_decoded_at_their_rows(
    layout: str, tmp_path: Path
) -> None:
    """Every image ``datasets`` would decode is decoded, wherever the features put it; a row
    group of 3 rows (Parquet) keeps the rows of list items right across batches."""
    folder = tmp_path / "ds"
    ds = nested_media(bad=5)
    if layout == "save_to_disk":
        ds.save_to_disk(str(folder))
    else:
        folder.mkdir()
        ds.to_parquet(str(folder / "train.parquet"), batch_size=3)
    found = {(r, c, k) for _, r, c, k in sites(scan(folder))}
    assert found == {
        (5, "imgs", "corrupt"),
        (5, "pair.img", "corrupt"),
        (5, "views.img", "corrupt"),
    }
    loaded = load_images(layout, folder)

    def decode(i: int) -> None:
        row = loaded[i]  # datasets decodes the row's images here
        for image in row["imgs"] + [row["pair"]["img"]] + row["views"]["img"]:
            image.load()

    for i in range(len(loaded)):  # the oracle: datasets' own decode fails on row 5 only
        if i == 5:
            with pytest.raises(Exception):  # noqa: B017 - what Pillow raises through datasets
                decode(i)
        else:
            decode(i)
    clean = tmp_path / "clean"
    nested_media(bad=-1).save_to_disk(str(clean))
    assert {e["status"] for e in scan(clean).data["files"]} == {"ok"}


def load_images(layout: str, folder: Path) -> Any:
    if layout == "save_to_disk":
        return datasets.load_from_disk(str(folder))
    cache = str(folder.parent / f"{folder.name}-hf-cache")
    files = [str(folder / "train.parquet")]
    return datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)
