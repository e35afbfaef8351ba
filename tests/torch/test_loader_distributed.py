"""GuardedLoader under DDP: 2 gloo processes on loopback, one rank drops samples."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from datacheck.torch import GuardedLoader, read_quarantine

N = 64
BATCH = 4
# DistributedSampler(shuffle=False) gives rank 0 the even indices: every bad sample lands there.
# Rank 0's first two batches are all bad (emptied), and its sixth batch loses one sample.
BAD = {0, 2, 4, 6, 8, 10, 12, 14, 46}


class Planted(Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.full((8,), float(i) / N)
        if i in BAD:
            x[3] = float("nan")
        return x, i


def _train(rank: int, world: int, init: str, folder: str, on_bad: str, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = Planted()
    sampler = DistributedSampler(ds, shuffle=False)
    loader = GuardedLoader(
        DataLoader(ds, batch_size=BATCH, sampler=sampler), quarantine=folder, on_bad=on_bad
    )
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen, sizes = [], []
        for x, idx in loader:
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()  # the gradient all-reduce: hangs if the ranks' step counts differ
            opt.step()
            assert torch.isfinite(loss)
            seen += idx.tolist()
            sizes.append(len(idx))
        epochs.append({"seen": seen, "sizes": sizes})
    dist.barrier()
    result = {"epochs": epochs, "stats": loader.stats.as_dict()}
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run_ddp(tmp_path: Path, on_bad: str) -> list[dict]:
    init = f"file://{tmp_path / 'init'}"
    ctx = mp.start_processes(
        _train,
        args=(2, init, str(tmp_path / "q"), on_bad, str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("DDP training with a guarded loader hung")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_training_proceeds_when_one_rank_drops_samples(tmp_path):
    r0, r1 = run_ddp(tmp_path, "drop")
    # Same number of steps on both ranks in every epoch: no collective left unmatched.
    for e0, e1 in zip(r0["epochs"], r1["epochs"], strict=True):
        assert len(e0["sizes"]) == len(e1["sizes"])
    first0, first1 = r0["epochs"][0], r1["epochs"][0]
    assert first0["sizes"][3] == BATCH - 1  # rank 0 trained on 3 samples while rank 1 had 4
    assert set(first1["sizes"]) == {BATCH}
    assert len(first0["sizes"]) == N // 2 // BATCH - 2  # both emptied batches skipped by all
    assert sorted(set(first0["seen"]) | BAD) == list(range(0, N, 2))
    assert set(read_quarantine(tmp_path / "q")["index"]) == BAD
    assert set(read_quarantine(tmp_path / "q")["rank"]) == {0}
    # Epoch 1: the quarantined indices are never loaded; rank 0's emptied batches are skipped
    # by both ranks again (the sampler emptied them), still in step.
    second0 = r0["epochs"][1]
    assert second0["seen"] == first0["seen"]
    assert r0["stats"]["excluded"] == len(BAD)
    assert r1["stats"]["skipped_batches"] == 4


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_skip_batch_makes_every_rank_skip_the_same_step(tmp_path):
    r0, r1 = run_ddp(tmp_path, "skip_batch")
    (a0, b0), (a1, b1) = r0["epochs"], r1["epochs"]
    assert len(a0["sizes"]) == len(a1["sizes"]) == N // 2 // BATCH - 3
    assert set(a0["sizes"]) == set(a1["sizes"]) == {BATCH}
    # Epoch 1: rank 0's all-quarantined batches are skipped by both; its sixth batch, rid of
    # index 46 at the sampler, is trained on.
    assert len(b0["sizes"]) == len(b1["sizes"]) == N // 2 // BATCH - 2
    assert b0["sizes"].count(BATCH - 1) == 1
    # rank 1 lost its batches 0, 1 and 5 (the steps where rank 0 had bad samples)
    skipped1 = {1 + 2 * (BATCH * b + k) for b in (0, 1, 5) for k in range(BATCH)}
    assert set(r1["epochs"][0]["seen"]) == set(range(1, N, 2)) - skipped1
    assert set(read_quarantine(tmp_path / "q")["index"]) == BAD


class Recorded(Dataset):
    """Planted, remembering every index it loads (num_workers=0: in the training process)."""

    def __init__(self) -> None:
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.loaded.append(i)
        x = torch.full((8,), float(i) / N)
        if i == 6:
            x[0] = float("nan")
        return x, i


def _rank1_order(epoch: int) -> list[int]:
    sampler = DistributedSampler(Recorded(), num_replicas=2, rank=1, shuffle=True, seed=3)
    sampler.set_epoch(epoch)
    return list(sampler)


NAMED = _rank1_order(0)[3 * BATCH]
"""Rank 0 names this index (rank 1's 4th batch in epoch 0) with loader.exclude() after step 0."""


def _train_exclude(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    ds = Recorded()
    sampler = DistributedSampler(ds, shuffle=True, seed=3)
    loader = GuardedLoader(DataLoader(ds, batch_size=BATCH, sampler=sampler))
    epochs = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        ds.loaded.clear()
        seen = []
        for step, (_x, idx) in enumerate(loader):
            if rank == 0 and epoch == 0 and step == 0:
                loader.exclude([NAMED])
            seen += idx.tolist()
        epochs.append({"seen": seen, "loaded": list(ds.loaded), "order": list(sampler)})
    Path(out, f"rank{rank}.json").write_text(json.dumps(epochs))
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_index_excluded_or_found_on_one_rank_is_excluded_on_every_rank(tmp_path):
    init = f"file://{tmp_path / 'init'}"
    ctx = mp.start_processes(
        _train_exclude, args=(2, init, str(tmp_path)), nprocs=2, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("DDP training with loader.exclude hung")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    # epoch 0: NAMED was on rank 1, drawn after rank 0 named it: rank 1 never loads it
    assert r1[0]["order"] == _rank1_order(0)
    assert NAMED not in r1[0]["loaded"] and NAMED not in r1[0]["seen"]
    # index 6 (NaN) was found by whichever rank loaded it in epoch 0; from then on no rank loads
    # it, and NAMED stays excluded on both, wherever the shuffle puts them
    for later in (1, 2):
        for r in (r0, r1):
            assert not {6, NAMED} & set(r[later]["loaded"])
    found_on = 0 if 6 in r0[0]["loaded"] else 1
    moved = [e["order"] for e in (r0, r1)[1 - found_on][1:]] + [e["order"] for e in r0[1:]]
    assert any(6 in o for o in moved) and any(NAMED in o for o in moved)  # the test bites


class Unmounted(Dataset):
    """Every even index (rank 0's share, shuffle off) fails to load, like a lost mount."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % 2 == 0:
            raise OSError(f"[Errno 5] Input/output error: '/mnt/data/{i}.jpg'")
        return torch.full((8,), float(i) / N), i


def _train_unmounted(rank: int, world: int, init: str, out: str) -> None:
    from datacheck.errors import BadSampleError

    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    sampler = DistributedSampler(Unmounted(), shuffle=False)
    loader = GuardedLoader(DataLoader(Unmounted(), batch_size=BATCH, sampler=sampler))
    steps, message = 0, ""
    try:
        for _x, _idx in loader:
            steps += 1
    except BadSampleError as exc:
        message = str(exc)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"steps": steps, "message": message}))
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_load_error_budget_stops_every_rank_together(tmp_path):
    init = f"file://{tmp_path / 'init'}"
    ctx = mp.start_processes(
        _train_unmounted, args=(2, init, str(tmp_path)), nprocs=2, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("a rank hung after another ran out of its load-error budget")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    # rank 0 fails 4 of 4 per batch: over the grace of 10 at its third batch; rank 1 stops too
    assert "12 of 12 samples seen failed to load" in r0["message"]
    assert "Input/output error" in r0["message"]
    assert r1["message"].startswith("another rank stopped")
    assert r0["steps"] == r1["steps"] == 0  # every batch so far was emptied on rank 0: skipped


class Buckets:
    """A batch sampler of the user's own that knows nothing of ranks: the same batches on every
    rank (``rank_aware``: rank r takes the batches r, r + 2, ... itself)."""

    def __init__(self, rank: int | None = None) -> None:
        self.rank = rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _all(self) -> list[list[int]]:
        order = torch.randperm(N, generator=torch.Generator().manual_seed(self.epoch)).tolist()
        return [order[i : i + BATCH] for i in range(0, N - 2 * BATCH, BATCH)]  # 14 batches

    def __iter__(self):
        batches = self._all()
        return iter(batches if self.rank is None else batches[self.rank :: 2])

    def __len__(self) -> int:
        return len(self._all()) if self.rank is None else len(self._all()) // 2


def _train_custom(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    result = {}
    for name, sampler in (("same", Buckets()), ("aware", Buckets(rank))):
        loader = GuardedLoader(DataLoader(Recorded(), batch_sampler=sampler))
        result[name] = [[i for _x, idx in loader for i in idx.tolist()] for _ in range(2)]
        result[name + "_len"] = len(loader)
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_batch_sampler_that_ignores_ranks_is_dealt_out_one_that_shards_is_kept(tmp_path):
    init = f"file://{tmp_path / 'init'}"
    ctx = mp.start_processes(
        _train_custom, args=(2, init, str(tmp_path)), nprocs=2, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + 120
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("DDP training with a custom batch sampler hung")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    for epoch in range(2):
        sampler = Buckets()
        sampler.set_epoch(epoch)  # that epoch's batches: the epoch reached the sampler
        batches = sampler._all()
        for name in ("same", "aware"):
            for rank, got in enumerate((r0[name][epoch], r1[name][epoch])):
                # rank r trained on batches r, r + 2, ... (6, a NaN, dropped where it was)
                assert got == [i for b in batches[rank::2] for i in b if i != 6]
    assert r0["same"][0] != r0["same"][1]
    assert r0["same_len"] == r1["same_len"] == 7 == r0["aware_len"]
