"""Each stream stack under DDP: two gloo ranks reading their library's own share of the data.

``python -m torch.distributed.run --nproc_per_node=2 -m tests.torch.stream._ddp_streams KIND
DATA OUT`` (``KIND``: ``webdataset``, ``hf``, ``mosaic``, ``litdata``, ``nodes``). ``DATA`` holds
what the test wrote with each library's writer before the launch: ``DATA/first`` (the planted
samples 0..N-1) and ``DATA/grown`` (new samples, for the next run). Each rank trains a
``DistributedDataParallel`` model on 2 epochs (the gradient all-reduce hangs if the ranks' steps
differ), then, after a barrier, runs the next run: a new GuardedLoader over the same quarantine,
on the grown dataset read in another order. Each rank writes ``OUT/rank{r}.json``: the labels
of each batch, per epoch and for the next run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from datacheck.torch import GuardedLoader
from tests.torch.stream._kit import BATCH, N

EPOCHS = 2
GROWN = 24
"""New samples N..N+GROWN-1 in the next run (a multiple of 2 ranks x BATCH: no padding)."""


def webdataset(data: Path, q: Path, rank: int, world: int, rerun: bool) -> Any:
    import webdataset as wds

    from datacheck.torch.stream import report_errors, skip_quarantined

    old = sorted(str(p) for p in (data / "first").glob("*.tar"))
    new = sorted(str(p) for p in (data / "grown").glob("*.tar"))
    urls = new[:1] + old[::-1] + new[1:] if rerun else old  # shards move between the ranks
    ds = wds.WebDataset(
        urls,
        shardshuffle=False,
        nodesplitter=wds.split_by_node,
        handler=report_errors,
        empty_check=False,
    )
    if rerun:
        ds = ds.select(skip_quarantined(q))
    return DataLoader(ds.decode(handler=report_errors), batch_size=BATCH, num_workers=2)


def hf(data: Path, q: Path, rank: int, world: int, rerun: bool) -> Any:
    import datasets
    from datasets.distributed import split_dataset_by_node

    old = sorted(str(p) for p in (data / "first").glob("*.parquet"))
    new = sorted(str(p) for p in (data / "grown").glob("*.parquet"))
    files = new[:1] + old[::-1] + new[1:] if rerun else old
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    if rerun:
        ds = ds.shuffle(seed=5, buffer_size=16)
    ds = split_dataset_by_node(ds, rank=rank, world_size=world).with_format("torch")
    return DataLoader(ds, batch_size=BATCH, num_workers=2)


def mosaic(data: Path, q: Path, rank: int, world: int, rerun: bool) -> Any:
    import streaming  # reads RANK, WORLD_SIZE, LOCAL_WORLD_SIZE as torchrun sets them

    if rerun:  # the new stream first: every old sample has another global id and rank
        streams = [
            streaming.Stream(local=str(data / "grown")),
            streaming.Stream(local=str(data / "first")),
        ]
        ds = streaming.StreamingDataset(
            streams=streams, shuffle=True, shuffle_seed=7, batch_size=BATCH
        )
    else:
        ds = streaming.StreamingDataset(local=str(data / "first"), shuffle=False, batch_size=BATCH)
    return streaming.StreamingDataLoader(ds, batch_size=BATCH, num_workers=2)


def litdata(data: Path, q: Path, rank: int, world: int, rerun: bool) -> Any:
    """litdata splits its items over the ranks in whole batches: its ``first`` holds
    ``N + BATCH`` items (an even share each); the next run reads them reshuffled."""
    import litdata

    ds = litdata.StreamingDataset(str(data / "first"), shuffle=rerun, seed=3)
    return litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=2)


def nodes(data: Path, q: Path, rank: int, world: int, rerun: bool) -> Any:
    from tests.torch.stream.test_torchdata_nodes import pipeline

    ids = list(range(N + GROWN))[::-1] if rerun else list(range(N))
    return pipeline(ids[rank::world], 2)  # the user's own split of the records by rank


KINDS: dict[str, Callable[[Path, Path, int, int, bool], Any]] = {
    "webdataset": webdataset,
    "hf": hf,
    "mosaic": mosaic,
    "litdata": litdata,
    "nodes": nodes,
}


def _labels(batch: Any) -> list[int]:
    return [int(v) for v in batch["cls"]]


def _image(batch: Any) -> torch.Tensor:
    x = batch["npy"] if "npy" in batch else batch["x"]
    return torch.as_tensor(x).float()


def main(kind: str, data: Path, out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    options = {"quarantine": str(out / "q"), "fits": "fp16"}
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(48, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    loader = GuardedLoader(KINDS[kind](data, out / "q", rank, world, False), **options)
    epochs: list[list[list[int]]] = []
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        batches = []
        for batch in loader:
            x = _image(batch).reshape(len(_labels(batch)), -1)
            model(x).mean().backward()  # all-reduce: every rank must take the same steps
            opt.step()
            opt.zero_grad()
            batches.append(_labels(batch))
        epochs.append(batches)
    loader.close()
    dist.barrier()  # every rank's quarantine written
    again = GuardedLoader(KINDS[kind](data, out / "q", rank, world, True), **options)
    rerun = [_labels(batch) for batch in again]
    record = {"epochs": epochs, "rerun": rerun, "stats": again.stats.as_dict()}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
