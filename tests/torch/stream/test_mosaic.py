"""GuardedLoader on MosaicML streaming: MDS shards written by ``MDSWriter``, read by
``StreamingDataset`` through a plain DataLoader and through ``StreamingDataLoader``."""

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

streaming = pytest.importorskip("streaming")
# MDS arrays are read-only views of the shard; torch's default_collate says so once
pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
COLUMNS = {"x": "ndarray:float32:3,4,4", "cls": "int", "name": "str"}


def write_mds(folder: Path, ids: list[int]) -> Path:
    """MDS shards of ~10 samples; the unreadable sample's ``name`` is not UTF-8 any more."""
    with streaming.MDSWriter(out=str(folder), columns=COLUMNS, size_limit=1500) as out:
        for i in ids:
            out.write({"x": image(i), "cls": i, "name": f"sample-{i:05d}"})
    for shard in folder.glob("*.mds"):
        raw = shard.read_bytes()
        name = f"sample-{UNREADABLE:05d}".encode()
        if name in raw:
            shard.write_bytes(raw.replace(name, b"\xff" * len(name)))
    return folder


def identities(folder: Path, ids: list[int]) -> dict[int, tuple[str, str]]:
    """(shard, row) of each sample, from the index.json MDSWriter wrote."""
    shards = json.loads((folder / "index.json").read_text())["shards"]
    out, at = {}, 0
    for shard in shards:
        for row in range(shard["samples"]):
            out[ids[at]] = (str(folder / shard["raw_data"]["basename"]), str(row))
            at += 1
    return out


def dataset(folder: Path, **kw) -> streaming.StreamingDataset:
    return streaming.StreamingDataset(local=str(folder), shuffle=False, batch_size=BATCH, **kw)


@pytest.fixture(autouse=True)
def _fresh_shared_memory():
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    yield


@pytest.mark.parametrize("loader_cls", ["DataLoader", "StreamingDataLoader"])
@pytest.mark.parametrize("workers", [0, 2])
def test_mds_bad_samples_dropped_in_their_batch_named_by_shard_and_row(
    tmp_path, loader_cls, workers
):
    folder = write_mds(tmp_path / "mds", list(range(N)))
    ids = identities(folder, list(range(N)))
    make = getattr(streaming, loader_cls) if loader_cls != "DataLoader" else DataLoader
    q = tmp_path / "q"
    dl = make(dataset(folder), batch_size=BATCH, num_workers=workers)
    loader = GuardedLoader(dl, quarantine=q, fits="fp16")
    assert len(loader) == len(dl) == N // BATCH  # the dataset's length comes through
    epoch = run_epoch(loader, image="x")
    assert_clean_once(epoch)
    rec = assert_recorded(q, {i: ids[i][1] for i in range(N)})
    assert sorted(zip(rec["source"], rec["sample"], strict=True)) == sorted(ids[i] for i in BAD)
    assert rec.loc[rec["check"] == "load_error", "value"].str.startswith("UnicodeDecodeError").all()
    if workers == 0:  # the hook returns the failure in its place: it takes its slot
        assert_dropped_where_they_appear(epoch, rec)
    if loader_cls == "StreamingDataLoader":  # resumption counts every sample consumed
        assert loader.state_dict()["sample_in_epoch"] == N
    again = GuardedLoader(
        make(dataset(folder), batch_size=BATCH, num_workers=workers), quarantine=q
    )
    assert_clean_once(run_epoch(again, image="x"))
    assert (
        again.stats.bad == 0
        and again.stats.excluded == len(BAD)
        and again.stats.checked == len(CLEAN)
    )
    assert len(read_quarantine(q)) == len(BAD)


def test_mds_streams_reordered_and_grown_skip_no_clean_sample(tmp_path):
    old = write_mds(tmp_path / "old", list(range(N)))
    q = tmp_path / "q"
    run_epoch(
        GuardedLoader(DataLoader(dataset(old), batch_size=BATCH), quarantine=q, fits="fp16"),
        image="x",
    )
    new = write_mds(tmp_path / "new", list(range(N, N + 25)))
    both = streaming.StreamingDataset(
        streams=[streaming.Stream(local=str(new)), streaming.Stream(local=str(old))],
        shuffle=True,
        shuffle_seed=7,
        batch_size=BATCH,
    )  # the new stream first: every old sample has another global sample id now
    loader = GuardedLoader(DataLoader(both, batch_size=BATCH), quarantine=q, fits="fp16")
    assert_clean_once(run_epoch(loader, image="x"), clean=CLEAN + list(range(N, N + 25)))
    assert loader.stats.bad == 0 and loader.stats.excluded == len(BAD)
