"""GuardedLoader on WebDataset: shards written by webdataset's ShardWriter, read by its readers."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from datacheck.errors import UsageError
from datacheck.torch import GuardedLoader, read_quarantine
from datacheck.torch.stream import quarantined_keys, report_errors, skip_quarantined
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

wds = pytest.importorskip("webdataset")


def write_shards(folder: Path, ids: list[int], prefix: str = "shard") -> list[str]:
    """Shards of 10 samples (``s00005.npy``, ``s00005.cls``); the unreadable one is cut short."""
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / f"{prefix}-%06d.tar"), maxcount=10, verbose=0) as sink:
        for i in ids:
            buf = io.BytesIO()
            np.save(buf, image(i))
            data = buf.getvalue()
            if i == UNREADABLE:
                data = data[:40]  # a truncated .npy: the decoder raises
            sink.write({"__key__": f"s{i:05d}", "npy": data, "cls": i})
    return sorted(str(p) for p in folder.glob(f"{prefix}-*.tar"))


def urls_of(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.tar"))


def dataset(urls: list[str], keep=None, seen: Path | None = None):
    ds = wds.WebDataset(urls, shardshuffle=False, handler=report_errors, empty_check=False)
    if keep is not None:
        ds = ds.select(keep)
    if seen is not None:
        ds = ds.map(_Seen(seen))
    return ds.decode(handler=report_errors)


class _Seen:
    """Writes each key that reaches the decoder to a per-process file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, sample: dict) -> dict:
        with open(self.folder / f"{os.getpid()}.txt", "a") as f:
            f.write(sample["__key__"] + "\n")
        return sample


def decoded(folder: Path) -> list[str]:
    return sorted(k for p in folder.glob("*.txt") for k in p.read_text().split())


def names(urls: list[str]) -> dict[int, str]:
    return {i: f"s{i:05d}" for i in range(N)}


@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_bad_samples_dropped_in_their_batch_named_by_key_and_shard(tmp_path, workers):
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"
    loader = GuardedLoader(
        DataLoader(dataset(urls), batch_size=BATCH, num_workers=workers), quarantine=q, fits="fp16"
    )
    epoch = run_epoch(loader)
    assert_clean_once(epoch)
    rec = assert_recorded(q, names(urls))
    shard_of = {i: urls[i // 10] for i in BAD}
    assert dict(zip(rec["sample"], rec["source"], strict=True)) == {
        f"s{i:05d}": shard_of[i] for i in BAD
    }
    assert rec.loc[rec["check"] == "load_error", "value"].str.startswith("ValueError").all()
    if workers == 0:  # the handler skips the unreadable one: the next sample takes its place
        assert_dropped_where_they_appear(epoch, rec, slot=False)
    assert loader.stats.skipped_batches == 0
    from datacheck.torch._identity import SampleId

    assert epoch.batches[0][2][0] == SampleId(urls[0], "s00000")


@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_next_run_skips_them_at_the_source_before_decoding(tmp_path, workers):
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"
    run_epoch(GuardedLoader(DataLoader(dataset(urls), batch_size=BATCH), quarantine=q, fits="fp16"))
    seen = tmp_path / "seen"
    seen.mkdir()
    again = GuardedLoader(
        DataLoader(dataset(urls, skip_quarantined(q), seen), batch_size=BATCH, num_workers=workers),
        quarantine=q,
        fits="fp16",
    )
    assert_clean_once(run_epoch(again))
    assert decoded(seen) == sorted(f"s{i:05d}" for i in CLEAN)  # never decoded again
    assert again.stats.bad == 0 and len(read_quarantine(q)) == len(BAD)
    # the keys alone, for a filter of one's own
    bad = quarantined_keys(q)
    assert bad == {f"s{i:05d}" for i in BAD}
    own = dataset(urls, lambda s: s["__key__"] not in bad)
    assert_clean_once(run_epoch(GuardedLoader(DataLoader(own, batch_size=BATCH), quarantine=q)))


def test_webdataset_reordered_and_grown_shards_skip_no_clean_sample(tmp_path):
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"
    run_epoch(GuardedLoader(DataLoader(dataset(urls), batch_size=BATCH), quarantine=q, fits="fp16"))
    more = write_shards(tmp_path / "shards", list(range(N, N + 20)), prefix="extra")
    order = more[:1] + urls[::-1] + more[1:]  # a new shard first, the old ones reversed
    loader = GuardedLoader(
        DataLoader(dataset(order, skip_quarantined(q)), batch_size=BATCH), quarantine=q, fits="fp16"
    )
    assert_clean_once(run_epoch(loader), clean=CLEAN + list(range(N, N + 20)))
    assert loader.stats.bad == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_web_loader_with_rebatching_stages_after_the_guarded_dataloader(tmp_path, workers):
    """wds.WebLoader over a pipeline that batches (``batch_size=None``), then unbatches,
    shuffles and rebatches in the main process, as WebDataset's docs recommend."""
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"
    ds = dataset(urls).batched(BATCH)
    web = wds.WebLoader(ds, batch_size=None, num_workers=workers)
    web = web.unbatched().shuffle(16, rng=__import__("random").Random(0)).batched(6)
    loader = GuardedLoader(web, quarantine=q, fits="fp16")
    epoch = run_epoch(loader)
    assert_clean_once(epoch)
    assert_recorded(q, names(urls))
    for _, labels, ids in epoch.batches:  # batch_indices follow the rebatched rows
        assert [i.sample for i in ids] == [f"s{i:05d}" for i in labels]
    assert all(isinstance(b, torch.Tensor) for b in [torch.as_tensor(epoch.labels)])


def test_web_loader_with_epoch_repeats_and_cuts_as_webdataset_does(tmp_path):
    urls = write_shards(tmp_path / "shards", list(range(N)))
    web = wds.WebLoader(dataset(urls), batch_size=BATCH, num_workers=0).with_epoch(9)
    loader = GuardedLoader(web, quarantine=tmp_path / "q", fits="fp16")
    labels = [[int(c) for c in batch["cls"]] for batch in loader]
    assert len(labels) == 9  # one pass is 5 batches: WebDataset repeats, then cuts at 9
    assert not {i for b in labels for i in b} & set(BAD)
    assert len(read_quarantine(tmp_path / "q")) == len(BAD)  # each found once


def _named_by_key_and_shard(loader, q: Path, urls: list[str], caplog):
    """One epoch of a ``to_tuple`` pipeline: every clean sample once, the planted ones
    recorded by key and shard, each batch's rows named by their keys (no ``key_fn`` asked
    for). Returns the quarantine's records."""
    epoch = run_epoch(loader, label=1, image=0)
    assert_clean_once(epoch)
    rec = assert_recorded(q, names(urls))
    assert set(rec["source"]) == {urls[i // 10] for i in BAD}
    assert "pass key_fn" not in caplog.text
    for _, labels, ids in epoch.batches:
        assert [i.sample for i in ids] == [f"s{i:05d}" for i in labels]
    return rec


@pytest.mark.parametrize("workers", [0, 2])
def test_to_tuple_batches_are_checked_by_field_name_and_their_samples_keep_their_key(
    tmp_path, workers, caplog
):
    """``.to_tuple("npy", "cls")`` drops ``__key__``: the samples are still named by key and
    shard (through a ``map_tuple`` and a ``shuffle`` after it), and the leaves by field."""
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"

    def pipeline():
        ds = dataset(urls).to_tuple("npy", "cls").map_tuple(lambda x: x * 1, lambda c: c)
        return ds.shuffle(8, rng=__import__("random").Random(0))

    loader = GuardedLoader(
        DataLoader(pipeline(), batch_size=BATCH, num_workers=workers), quarantine=q, fits="fp16"
    )
    rec = _named_by_key_and_shard(loader, q, urls, caplog)
    keys = dict(zip(rec["check"], rec["key"], strict=True))
    assert keys["nan"] == keys["fp16_safe"] == "npy"
    assert "nan in 'npy'" in caplog.text
    again = GuardedLoader(DataLoader(pipeline(), batch_size=BATCH), quarantine=q, fits="fp16")
    assert_clean_once(run_epoch(again, label=1, image=0))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)


def test_a_range_on_a_field_name_runs_and_one_on_no_leaf_is_refused(tmp_path):
    urls = write_shards(tmp_path / "shards", list(range(N)))
    ds = dataset(urls).to_tuple("npy", "cls")
    loader = GuardedLoader(
        DataLoader(ds, batch_size=BATCH),
        quarantine=tmp_path / "q",
        ranges={"cls": (0, 29)},
        fits="fp16",
    )
    got = sorted(int(c) for batch in loader for c in batch[1])
    assert got == [i for i in range(30) if i not in BAD]  # 30..39 out of range, and the bad
    rec = read_quarantine(tmp_path / "q")
    assert set(rec.loc[rec["check"] == "out_of_range", "key"]) == {"cls"}
    wrong = GuardedLoader(DataLoader(ds, batch_size=BATCH), ranges={"1": (0, 29)})
    with pytest.raises(UsageError, match=r"ranges key '1' names no leaf.*'npy', 'cls'"):
        next(iter(wrong))


@pytest.mark.parametrize("workers", [0, 2])
def test_batched_in_the_pipeline_keeps_each_rows_key(tmp_path, workers, caplog):
    """The WebDataset README's ``.to_tuple("npy", "cls").batched(8)`` with ``batch_size=None``
    (``wds.WebLoader`` does the same): the batch is made inside the pipeline, and its rows are
    still named by key and shard; the next run leaves the quarantined samples out before the
    batch is made, so every clean sample comes once."""
    urls = write_shards(tmp_path / "shards", list(range(N)))
    q = tmp_path / "q"

    def pipeline():
        return dataset(urls).to_tuple("npy", "cls").batched(BATCH)

    loader = GuardedLoader(
        DataLoader(pipeline(), batch_size=None, num_workers=workers), quarantine=q, fits="fp16"
    )
    _named_by_key_and_shard(loader, q, urls, caplog)
    again = GuardedLoader(DataLoader(pipeline(), batch_size=None), quarantine=q, fits="fp16")
    assert_clean_once(run_epoch(again, label=1, image=0))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)
