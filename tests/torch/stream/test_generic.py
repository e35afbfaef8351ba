"""GuardedLoader on a plain IterableDataset: a generator sharded by ``get_worker_info()``."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from datacheck.torch import GuardedLoader, read_quarantine
from datacheck.torch.stream import reporting, skip_quarantined
from tests.torch.stream._kit import (
    BAD,
    CLEAN,
    NAN,
    UNREADABLE,
    N,
    assert_clean_once,
    assert_dropped_where_they_appear,
    assert_recorded,
    image,
    run_epoch,
)


def load(i: int) -> dict:
    """Read sample ``i`` (the unreadable one raises, as a truncated file would)."""
    if i == UNREADABLE:
        raise OSError(f"record {i} is truncated")
    return {"npy": torch.from_numpy(image(i)), "cls": i}


class Records(IterableDataset):
    """Records ``ids``, each worker taking every n-th one; errors reported per record."""

    def __init__(self, ids: list[int], keep=None) -> None:
        self.ids, self.keep = ids, keep

    def __iter__(self):
        info = get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        mine = self.ids[w::n]
        if self.keep is not None:  # the next run's filter, at the source
            mine = [i for i in mine if self.keep(f"rec{i}")]
        yield from map(reporting(load, key_fn=lambda i: f"rec{i}"), mine)


NAMES = {i: f"rec{i}" for i in range(N)}


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_records_are_dropped_in_their_batch_recorded_by_key_and_skipped_next_run(
    tmp_path, workers
):
    q = tmp_path / "q"
    dl = DataLoader(Records(list(range(N))), batch_size=8, num_workers=workers)
    loader = GuardedLoader(dl, quarantine=q, fits="fp16")
    first = run_epoch(loader)
    assert_clean_once(first)
    records = assert_recorded(q, NAMES)
    if workers == 0:
        assert_dropped_where_they_appear(first, records)
    assert loader.stats.skipped_batches == 0 and loader.stats.yielded == len(CLEAN)
    assert records.loc[records["check"] == "load_error", "value"].tolist() == [
        f"OSError: record {UNREADABLE} is truncated"
    ]
    # batch_indices name each yielded row by its key
    assert all(
        [str(k) for k in names] == [f"rec{i}" for i in labels] for _, labels, names in first.batches
    )
    # the next run: the loader leaves them out, and so does a filter at the source
    again = GuardedLoader(
        DataLoader(Records(list(range(N))), batch_size=8, num_workers=workers), quarantine=q
    )
    assert_clean_once(run_epoch(again))
    assert again.stats.bad == 0 and again.stats.excluded == len(BAD)
    keep = skip_quarantined(q, key_fn=lambda k: k)
    filtered = GuardedLoader(
        DataLoader(Records(list(range(N)), keep), batch_size=8, num_workers=workers),
        quarantine=q,
    )
    assert_clean_once(run_epoch(filtered))
    assert filtered.stats.excluded == 0 and filtered.stats.checked == len(CLEAN)
    assert len(read_quarantine(q)) == len(BAD)  # nothing recorded twice


def test_a_reordered_and_grown_stream_skips_no_clean_sample(tmp_path):
    q = tmp_path / "q"
    first = GuardedLoader(
        DataLoader(Records(list(range(N))), batch_size=8), quarantine=q, fits="fp16"
    )
    run_epoch(first)
    grown = list(range(N + 16))[::-1]  # new records, and every record in another place
    loader = GuardedLoader(DataLoader(Records(grown), batch_size=8), quarantine=q, fits="fp16")
    assert_clean_once(run_epoch(loader), clean=[i for i in grown if i not in BAD])
    assert loader.stats.bad == 0


class Raising(IterableDataset):
    """A generator that raises at record UNREADABLE: Python finishes it there."""

    def __iter__(self):
        info = get_worker_info()
        w, n = (info.id, info.num_workers) if info else (0, 1)
        for i in range(w, N, n):
            yield load(i)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_generator_that_raises_ends_its_own_stream_only_and_the_error_names_where(
    tmp_path, workers
):
    loader = GuardedLoader(
        DataLoader(Raising(), batch_size=8, num_workers=workers),
        quarantine=tmp_path / "q",
        key_fn=lambda s: f"rec{s['cls']}",
    )
    got = run_epoch(loader).labels
    q = read_quarantine(tmp_path / "q")
    q = q[q["check"] == "load_error"]
    assert len(q) == 1 and q["sample"].isna().all()
    where = q["key"].tolist()[0]
    if workers == 0:
        assert sorted(got) == [i for i in range(UNREADABLE) if i != NAN]  # the stream ended
        assert (
            where
            == "the main process, item 11 of its stream, after sample 'rec10'; the stream ended there"
        )
    else:  # worker 1 read the odd records and ended at 11; worker 0 read all of its own
        assert sorted(got) == sorted([i for i in range(0, N, 2)] + [1, 3, 7, 9])
        assert (
            where == "worker 1, item 5 of its stream, after sample 'rec9'; the stream ended there"
        )


def test_a_stream_sample_the_guard_names_is_recorded_by_its_name_and_left_out_next_epoch(tmp_path):
    """TrainingGuard gets the stream loader's ``batch_indices`` (names, not indices): a sample
    whose loss is not finite (1e30 in fp32 passes the loader's default checks) is quarantined
    under its key and shard, and the loader leaves it out from then on."""
    import torch.nn.functional as F

    from datacheck.torch import TrainingGuard

    class Wide(IterableDataset):
        def __iter__(self):
            for i in range(32):
                x = torch.full((4,), float(i) / 32)
                if i == 13:
                    x[2] = 1e30
                yield {
                    "x": x,
                    "y": torch.tensor(float(i)),
                    "__key__": f"k{i}",
                    "__url__": "shard-0.tar",
                }

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = GuardedLoader(DataLoader(Wide(), batch_size=8), quarantine=tmp_path / "q")
    guard = TrainingGuard(model, opt, loader=loader, quarantine=str(tmp_path / "q"))
    seen: dict[int, list[int]] = {0: [], 1: []}
    for epoch in (0, 1):
        for batch in loader:
            seen[epoch] += [int(y) for y in batch["y"]]
            per_sample = F.mse_loss(model(batch["x"]).squeeze(1), batch["y"], reduction="none")
            per_sample.mean().backward()
            guard.step(per_sample.mean(), indices=loader.batch_indices, sample_losses=per_sample)
            opt.zero_grad()
    guard.close()
    assert 13 in seen[0] and 13 not in seen[1] and len(seen[1]) == 31
    rec = read_quarantine(tmp_path / "q")
    assert rec[["sample", "source", "check"]].values.tolist() == [
        ["k13", "shard-0.tar", "nonfinite_loss"]
    ]
