"""GuardedLoader on Hugging Face ``datasets`` streams: ``load_dataset(..., streaming=True)`` on
local Parquet files (no network) and ``Dataset.to_iterable_dataset()``."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from datacheck.torch import GuardedLoader, read_quarantine
from datacheck.torch.stream import quarantined_keys
from tests.torch.stream._kit import (
    BAD,
    BATCH,
    CLEAN,
    UNREADABLE,
    N,
    assert_clean_once,
    assert_dropped_where_they_appear,
    assert_recorded,
    image,
    run_epoch,
)

datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torch on read-only buffers


def png(i: int, unreadable: bool = True) -> bytes:
    """A real PNG; the unreadable sample's is cut short (Image() cannot decode it)."""
    out = io.BytesIO()
    PIL.fromarray(np.full((4, 4, 3), i, np.uint8)).save(out, format="PNG")
    return out.getvalue()[:30] if i == UNREADABLE and unreadable else out.getvalue()


def table(ids: list[int], unreadable: bool = True):
    features = datasets.Features(
        {
            "x": datasets.Array3D((3, 4, 4), "float32"),
            "cls": datasets.Value("int64"),
            "id": datasets.Value("string"),
            "image": datasets.Image(),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "x": [image(i) for i in ids],
            "cls": ids,
            "id": [f"doc-{i}" for i in ids],
            "image": [{"bytes": png(i, unreadable), "path": None} for i in ids],
        },
        features=features,
    )


def write_parquet(
    folder: Path, ids: list[int], prefix: str = "part", unreadable: bool = True
) -> list[str]:
    """Parquet files of 10 rows each, written by ``datasets`` itself."""
    folder.mkdir(parents=True, exist_ok=True)
    full = table(ids, unreadable)
    n = len(ids) // 10
    for k in range(n):
        full.shard(n, k, contiguous=True).to_parquet(str(folder / f"{prefix}-{k}.parquet"))
    return [str(folder / f"{prefix}-{k}.parquet") for k in range(n)]


def _twice(cls: int) -> dict:
    return {"twice": 2 * cls}


def streaming(files: list[str]):
    return datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)


@pytest.mark.parametrize("workers", [0, 2])
def test_hf_streaming_bad_rows_dropped_in_their_batch_named_by_file_and_row(tmp_path, workers):
    files = write_parquet(tmp_path / "data", list(range(N)))
    q = tmp_path / "q"

    def loader(**kw):
        ds = streaming(files).with_format("torch")
        return GuardedLoader(
            DataLoader(ds, batch_size=BATCH, num_workers=workers), quarantine=q, **kw
        )

    first = loader(fits="fp16")
    epoch = run_epoch(first, image="x")
    assert_clean_once(epoch)
    rec = assert_recorded(q, {i: str(i % 10) for i in range(N)})
    assert sorted(zip(rec["source"], rec["sample"], strict=True)) == sorted(
        (files[i // 10], str(i % 10)) for i in BAD
    )
    value = rec.loc[rec["check"] == "load_error", "value"].tolist()
    assert value[0].startswith("UnidentifiedImageError")  # decoding failed, the stream went on
    if workers == 0:
        assert_dropped_where_they_appear(epoch, rec)
    again = loader()
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)
    assert len(read_quarantine(q)) == len(BAD)


@pytest.mark.parametrize("workers", [0, 2])
def test_to_iterable_dataset_bad_rows_named_by_shard_and_row(tmp_path, workers):
    q = tmp_path / "q"

    def loader(**kw):
        ds = table(list(range(N))).to_iterable_dataset(num_shards=4).with_format("torch")
        return GuardedLoader(
            DataLoader(ds, batch_size=BATCH, num_workers=workers), quarantine=q, **kw
        )

    epoch = run_epoch(loader(fits="fp16"), image="x")
    assert_clean_once(epoch)
    rec = assert_recorded(q, {i: str(i % 10) for i in range(N)})
    assert rec["source"].str.startswith("dataset ").all() and rec["source"].nunique() == 3
    again = loader()
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)


def test_hf_files_reordered_grown_and_shuffled_skip_no_clean_sample(tmp_path):
    files = write_parquet(tmp_path / "data", list(range(N)))
    q = tmp_path / "q"
    ds = streaming(files).with_format("torch")
    run_epoch(GuardedLoader(DataLoader(ds, batch_size=BATCH), quarantine=q, fits="fp16"), image="x")
    more = write_parquet(tmp_path / "more", list(range(N, N + 20)), prefix="extra")
    order = more[:1] + files[::-1] + more[1:]
    grown = streaming(order).shuffle(seed=5, buffer_size=16).with_format("torch")
    loader = GuardedLoader(DataLoader(grown, batch_size=BATCH), quarantine=q, fits="fp16")
    epoch = run_epoch(loader, image="x")
    assert_clean_once(epoch, clean=CLEAN + list(range(N, N + 20)))
    assert epoch.labels != sorted(epoch.labels)
    assert loader.stats.bad == 0 and loader.stats.excluded == len(BAD)


def test_hf_rows_after_a_map_are_named_by_key_fn_and_unnamed_without(tmp_path, caplog):
    """``map`` numbers its output rows afresh (its keys are counters), and decodes its input
    inside the chain, so this dataset's images are all fine. Without ``key_fn`` the NaN and
    1e30 rows are dropped and recorded unnamed, with one warning saying how to name them; with
    ``key_fn`` on an id field they are named through the map and a shuffle buffer."""
    files = write_parquet(tmp_path / "data", list(range(N)), unreadable=False)

    def mapped():
        ds = streaming(files).map(_twice, input_columns=["cls"]).shuffle(seed=2, buffer_size=16)
        return DataLoader(ds.with_format("torch"), batch_size=BATCH)

    clean = sorted(set(range(N)) - {5, 23})
    unnamed = GuardedLoader(mapped(), quarantine=tmp_path / "q0", fits="fp16")
    assert_clean_once(run_epoch(unnamed, image="x"), clean=clean)
    rec = read_quarantine(tmp_path / "q0")
    assert len(rec) == 2 and rec["sample"].isna().all()
    assert "pass key_fn=" in caplog.text
    named = GuardedLoader(
        mapped(), quarantine=tmp_path / "q1", fits="fp16", key_fn=lambda ex: ex["id"]
    )
    assert_clean_once(run_epoch(named, image="x"), clean=clean)
    assert sorted(read_quarantine(tmp_path / "q1")["sample"]) == ["doc-23", "doc-5"]


def test_hf_next_run_skips_them_by_key_before_decoding_and_a_filter_of_ones_own(tmp_path):
    files = write_parquet(tmp_path / "data", list(range(N)))
    q = tmp_path / "q"

    def by_id(ex):
        return ex["id"]

    def loader(ds, **kw):
        dl = DataLoader(ds.with_format("torch"), batch_size=BATCH)
        return GuardedLoader(dl, quarantine=q, key_fn=by_id, **kw)

    run_epoch(loader(streaming(files), fits="fp16"), image="x")
    bad = quarantined_keys(q)
    assert bad == {f"doc-{i}" for i in BAD}
    again = loader(streaming(files))  # read by key as stored: the bad image is never decoded
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.excluded == len(BAD) and again.stats.load_errors == 0
    # a map-style Dataset's filter reads only its input columns: nothing is decoded
    kept = table(list(range(N))).filter(lambda i: i not in bad, input_columns="id")
    own = loader(kept.to_iterable_dataset(num_shards=2))
    assert_clean_once(run_epoch(own, image="x"))
    assert own.stats.excluded == 0 and own.stats.checked == len(CLEAN)
