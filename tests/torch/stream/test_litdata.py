"""GuardedLoader on litdata: chunks written by litdata's BinaryWriter (what ``optimize`` runs),
read by ``StreamingDataset`` through a plain DataLoader and through ``StreamingDataLoader``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from datacheck.torch import GuardedLoader, read_quarantine
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

litdata = pytest.importorskip("litdata")


def write_chunks(folder: Path, ids: list[int]) -> Path:
    """Chunks of 10 items; the unreadable item's ``name`` is not UTF-8 any more (litdata
    decodes a window of items together: the whole window fails to decode)."""
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(folder), chunk_size=10)
    for at, i in enumerate(ids):
        writer[at] = {"x": image(i), "cls": i, "name": f"sample-{i:05d}"}
    writer.done()
    writer.merge()
    name = f"sample-{UNREADABLE:05d}".encode()
    for chunk in folder.glob("*.bin"):
        raw = chunk.read_bytes()
        if name in raw:
            chunk.write_bytes(raw.replace(name, b"\xff" * len(name)))
    return folder


def identities(folder: Path, ids: list[int]) -> dict[int, tuple[str, str]]:
    """(chunk file, row) of each item, from the index.json litdata wrote."""
    chunks = json.loads((folder / "index.json").read_text())["chunks"]
    out, at = {}, 0
    for chunk in chunks:
        for row in range(chunk["chunk_size"]):
            out[ids[at]] = (str(folder / chunk["filename"]), str(row))
            at += 1
    return out


@pytest.mark.parametrize("loader_cls", ["DataLoader", "StreamingDataLoader"])
@pytest.mark.parametrize("workers", [0, 2])
def test_litdata_bad_items_dropped_in_their_batch_named_by_chunk_and_row(
    tmp_path, loader_cls, workers
):
    folder = write_chunks(tmp_path / "lit", list(range(N)))
    ids = identities(folder, list(range(N)))
    make = litdata.StreamingDataLoader if loader_cls != "DataLoader" else DataLoader
    q = tmp_path / "q"

    def loader(**kw):
        ds = litdata.StreamingDataset(str(folder), shuffle=False)
        return GuardedLoader(make(ds, batch_size=BATCH, num_workers=workers), quarantine=q, **kw)

    guarded = loader(fits="fp16")
    epoch = run_epoch(guarded, image="x")
    assert_clean_once(epoch)  # the bad item's window neighbours all survive
    rec = assert_recorded(q, {i: ids[i][1] for i in range(N)})
    assert sorted(zip(rec["source"], rec["sample"], strict=True)) == sorted(ids[i] for i in BAD)
    assert rec.loc[rec["check"] == "load_error", "value"].str.startswith("UnicodeDecodeError").all()
    if workers == 0:
        assert_dropped_where_they_appear(epoch, rec)
    again = loader()
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)
    assert len(read_quarantine(q)) == len(BAD)


def test_litdata_reshuffled_items_skip_no_clean_sample(tmp_path):
    folder = write_chunks(tmp_path / "lit", list(range(N)))
    q = tmp_path / "q"
    ds = litdata.StreamingDataset(str(folder), shuffle=False)
    run_epoch(GuardedLoader(DataLoader(ds, batch_size=BATCH), quarantine=q, fits="fp16"), image="x")
    shuffled = litdata.StreamingDataset(str(folder), shuffle=True, seed=3)
    loader = GuardedLoader(DataLoader(shuffled, batch_size=BATCH), quarantine=q, fits="fp16")
    epoch = run_epoch(loader, image="x")
    assert epoch.labels != sorted(epoch.labels)  # really another order
    assert_clean_once(epoch)
    assert loader.stats.bad == 0 and loader.stats.excluded == len(BAD)


def _item(i: int) -> dict:
    return {"x": image(i), "cls": i, "name": f"sample-{i:05d}"}


def test_litdata_dataset_grown_by_an_append_optimize_skips_no_clean_sample(tmp_path):
    """The next run's dataset grew the way litdata grows one: ``optimize(mode="append")``
    adds chunks and rewrites ``index.json``; read shuffled, the bad items stay out by chunk
    and row, and every clean item, old and new, comes once."""
    folder = write_chunks(tmp_path / "lit", list(range(N)))
    q = tmp_path / "q"
    ds = litdata.StreamingDataset(str(folder), shuffle=False)
    run_epoch(GuardedLoader(DataLoader(ds, batch_size=BATCH), quarantine=q, fits="fp16"), image="x")
    new = list(range(N, N + 25))
    litdata.optimize(
        fn=_item, inputs=new, output_dir=str(folder), chunk_size=10, mode="append", num_workers=1
    )
    assert len(json.loads((folder / "index.json").read_text())["chunks"]) == 7
    grown = litdata.StreamingDataset(str(folder), shuffle=True, seed=3)
    loader = GuardedLoader(DataLoader(grown, batch_size=BATCH), quarantine=q, fits="fp16")
    epoch = run_epoch(loader, image="x")
    assert epoch.labels != sorted(epoch.labels)
    assert_clean_once(epoch, clean=CLEAN + new)
    assert loader.stats.bad == 0 and loader.stats.excluded == len(BAD)


@pytest.mark.parametrize("workers", [0, 2])
def test_litdata_combined_datasets_name_each_item_by_its_own_chunk_and_row(tmp_path, workers):
    """litgpt's pretraining mixes sources with ``CombinedStreamingDataset``: the bad items of
    one source are named by that source's chunk and row (their window neighbours survive),
    and the next run on that source alone leaves them out."""
    planted = write_chunks(tmp_path / "a", list(range(N)))
    other_ids = list(range(N, N + 20))
    other = tmp_path / "b"
    from litdata.streaming.writer import BinaryWriter

    writer = BinaryWriter(str(other), chunk_size=10)
    for at, i in enumerate(other_ids):
        writer[at] = _item(i)
    writer.done()
    writer.merge()
    ids = identities(planted, list(range(N)))
    q = tmp_path / "q"
    mix = litdata.CombinedStreamingDataset(
        [litdata.StreamingDataset(str(other)), litdata.StreamingDataset(str(planted))],
        iterate_over_all=True,
    )
    guarded = GuardedLoader(
        DataLoader(mix, batch_size=BATCH, num_workers=workers), quarantine=q, fits="fp16"
    )
    assert_clean_once(run_epoch(guarded, image="x"), clean=CLEAN + other_ids)
    rec = assert_recorded(q, {i: ids[i][1] for i in range(N)})
    assert sorted(zip(rec["source"], rec["sample"], strict=True)) == sorted(ids[i] for i in BAD)
    alone = litdata.StreamingDataset(str(planted), shuffle=True, seed=1)
    again = GuardedLoader(DataLoader(alone, batch_size=BATCH), quarantine=q)
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)
