"""GuardedLoader under DDP: time per training step, guarded vs bare, on gloo ranks (CPU).

    python benchmarks/bench_loader_ddp.py [--ranks 2] [--batch 256] [--batches 16] [--repeats 5]

Each rank trains a DDP linear model on 256 x 3 x 64 x 64 images normalised per sample (the
``decode`` dataset of ``bench_loader.py``). Bare: a DataLoader over a DistributedSampler. Guarded:
a GuardedLoader over ``DataLoader(shuffle=True)``, which puts the DistributedSampler in itself
and, every batch, checks it and agrees with the other ranks (an all-reduce of three ints) so
that every rank skips the same steps. Bare and guarded epochs alternate in the same processes,
so load changes on a shared machine hit both; the ratio is of the medians of rank 0's seconds
per step (the ranks move in step: each step's gradient all-reduce waits for the slowest).
Prints one JSON object and writes ``benchmarks/results/loader-ddp-cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _harness import write_results
from bench_loader import Images
from torch.utils.data import DataLoader, DistributedSampler

from datacheck.torch import GuardedLoader


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _epoch(loader, model, opt) -> tuple[float, int]:
    start, steps = time.perf_counter(), 0
    for batch in loader:
        opt.zero_grad()
        model(batch["image"].flatten(1)).pow(2).mean().backward()  # the gradient all-reduce
        opt.step()
        steps += 1
    return time.perf_counter() - start, steps


def _rank(rank: int, args: argparse.Namespace, port: int, out: str) -> None:
    torch.set_num_threads(args.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    ds = Images(args.batch * args.batches * args.ranks, "decode")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 64 * 64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(ds, shuffle=True)
    bare = DataLoader(ds, batch_size=args.batch, sampler=sampler)
    guarded = GuardedLoader(DataLoader(ds, batch_size=args.batch, shuffle=True))
    times: dict[str, list[float]] = {"bare": [], "guarded": []}
    for epoch in range(args.repeats + 1):  # the first is a warm-up
        sampler.set_epoch(epoch)
        for name, loader in (("bare", bare), ("guarded", guarded)):
            seconds, steps = _epoch(loader, model, opt)
            if epoch:
                times[name].append(seconds / steps)
    assert len(guarded) == len(bare) == args.batches  # each rank its share
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=16, help="batches per rank per epoch")
    p.add_argument("--repeats", type=int, default=5, help="alternating bare/guarded epochs")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp, "times.json"))
        mp.start_processes(
            _rank, args=(args, _port(), out), nprocs=args.ranks, start_method="spawn"
        )
        times = json.loads(Path(out).read_text())
    b, g = statistics.median(times["bare"]), statistics.median(times["guarded"])
    result = {
        "ranks": args.ranks,
        "batch_shape": [args.batch, 3, 64, 64],
        "threads_per_rank": args.threads,
        "bare_ms_per_step": round(b * 1e3, 3),
        "guarded_ms_per_step": round(g * 1e3, 3),
        "ratio": round(g / b, 4),
        "bare_ms_all": [round(t * 1e3, 3) for t in times["bare"]],
        "guarded_ms_all": [round(t * 1e3, 3) for t in times["guarded"]],
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    write_results("loader-ddp-cpu", result, params=vars(args))


if __name__ == "__main__":
    sys.exit(main())
