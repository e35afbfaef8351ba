"""GuardedLoader on a ``torchdata.nodes`` pipeline: mapper (threads or processes), Batcher,
collate Mapper, Loader."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import default_collate

from datacheck.errors import UsageError
from datacheck.torch import GuardedLoader, read_quarantine
from datacheck.torch.stream import reporting, skip_quarantined
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

tn = pytest.importorskip("torchdata.nodes")


def load(i: int) -> dict:
    if i == UNREADABLE:
        raise OSError(f"record {i} is truncated")
    return {"x": torch.from_numpy(image(i)), "cls": i}


def key(i: int) -> str:
    return f"rec{i}"


def pipeline(ids, workers: int, method: str = "thread", keep=None):
    node = tn.IterableWrapper(filter(keep, ids) if keep is not None else ids)
    load_one = reporting(load, key_fn=key)
    if workers:
        node = tn.ParallelMapper(node, map_fn=load_one, num_workers=workers, method=method)
    else:
        node = tn.Mapper(node, load_one)
    node = tn.Batcher(node, batch_size=BATCH, drop_last=False)
    return tn.Loader(tn.Mapper(node, default_collate))


@pytest.mark.parametrize(("workers", "method"), [(0, "thread"), (2, "thread"), (2, "process")])
def test_nodes_bad_samples_dropped_in_their_batch_named_by_key(tmp_path, workers, method):
    q = tmp_path / "q"
    loader = GuardedLoader(pipeline(range(N), workers, method), quarantine=q, fits="fp16")
    for epoch_no in range(2):  # the Loader restarts; the second epoch skips what the first found
        epoch = run_epoch(loader, image="x")
        assert_clean_once(epoch)
        for _, labels, names in epoch.batches:
            assert [str(n) for n in names] == [key(i) for i in labels]
        if epoch_no == 0:
            rec = assert_recorded(q, {i: key(i) for i in range(N)})
            assert_dropped_where_they_appear(epoch, rec, slot=False)  # failures take no slot
    assert loader.stats.excluded == len(BAD) and len(read_quarantine(q)) == len(BAD)
    keep = skip_quarantined(q, key_fn=key)  # the next run, at the source
    again = GuardedLoader(pipeline(range(N), workers, method, keep), quarantine=q)
    assert_clean_once(run_epoch(again, image="x"))
    assert again.stats.excluded == 0 and again.stats.checked == len(CLEAN)


def test_nodes_reordered_and_grown_skip_no_clean_sample(tmp_path):
    q = tmp_path / "q"
    run_epoch(GuardedLoader(pipeline(range(N), 0), quarantine=q, fits="fp16"), image="x")
    grown = list(range(N + 12))[::-1]
    loader = GuardedLoader(pipeline(grown, 2), quarantine=q, fits="fp16")
    assert_clean_once(run_epoch(loader, image="x"), clean=[i for i in grown if i not in BAD])
    assert loader.stats.bad == 0


def test_a_nodes_pipeline_without_a_batcher_is_refused():
    node = tn.Mapper(tn.IterableWrapper(range(4)), load)
    with pytest.raises(UsageError, match="needs a Batcher"):
        GuardedLoader(tn.Loader(node))
