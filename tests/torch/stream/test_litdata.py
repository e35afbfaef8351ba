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
