"""The DDP scenario of the guard suite: 2 gloo processes on loopback, NaN/Inf/1e30 in 4 % of
rank 1's shard; the three ways from the same seed."""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _guard_faults import base_schedule
from _guard_tasks import Task, collate, task
from _guard_train import WAYS, clip_update, count_events, schedule_step
from torch.utils.data import DataLoader, Sampler

from datacheck.torch import GuardedLoader, TrainingGuard, TrainingStopped, read_quarantine

__all__ = ["measure_ddp"]


def _plant_rank(task: Task, rank: int, world: int) -> set[int]:
    """NaN, Inf and 1e30 features in 4 % of rank ``rank``'s shard; returns their indices."""
    shard = list(range(rank, len(task.train), world))
    gen = torch.Generator().manual_seed(7 + task.seed)
    bad = [shard[p] for p in torch.randperm(len(shard), generator=gen)[: len(shard) // 25]]
    for k, i in enumerate(bad):
        x = task.train.x[i].clone()
        x[k % len(x)] = (math.nan, math.inf, 1e30)[k % 3]
        task.train.poison[i] = (x, task.train.y[i].clone())
    return set(bad)


class _Shard(Sampler[int]):
    """A rank's own shard, shuffled anew each epoch: bad data in it stays on that rank."""

    def __init__(self, n: int, rank: int, world: int, seed: int) -> None:
        self.indices, self.seed, self.epoch = list(range(rank, n, world)), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter([self.indices[i] for i in torch.randperm(len(self), generator=gen).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


def _ddp_run(task: Task, way: str, rank: int, world: int, folder: Path) -> dict[str, Any]:
    import torch.distributed as dist

    planted = _plant_rank(task, 1, world)
    model = torch.nn.parallel.DistributedDataParallel(task.model())
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: base_schedule(s, task.steps))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    sampler = _Shard(len(task.train), rank, world, seed=3 + task.seed)
    loader: Any = DataLoader(
        task.train, batch_size=task.batch, sampler=sampler, drop_last=True, collate_fn=collate
    )
    guard = None
    if way == "guard":
        loader = GuardedLoader(loader, quarantine=str(folder), shard=False)
        guard = TrainingGuard(model, opt, scheduler=sched, loader=loader, quarantine=str(folder))
    keys = ("lost", "rollbacks", "lr_cuts", "probes", "fallback", "skips")
    out: dict[str, Any] = dict.fromkeys(keys, 0) | {"stopped": None, "crashed": None}
    step = epoch = 0
    try:
        while step < task.steps:
            loader.set_epoch(epoch) if guard is not None else sampler.set_epoch(epoch)
            epoch += 1
            for x, y, idx in loader:
                if step >= task.steps:
                    break
                per_sample = task.per_sample(model(x), y)
                loss = per_sample.mean()
                loss.backward()  # every rank backpropagates: one that skips alone hangs the rest
                if guard is not None:
                    res = guard.step(loss, indices=idx.tolist(), sample_losses=per_sample.detach())
                    count_events(out, res)
                    stepped = res.action.stepped
                else:
                    stepped = clip_update(way, model, opt, scaler, loss, micro_ok=True)
                out["lost"] += not stepped
                schedule_step(sched)
                opt.zero_grad(set_to_none=True)
                step += 1
    except TrainingStopped:
        out["stopped"] = step
    if guard is not None:
        guard.close()
        loader.close()
    dist.barrier()  # every rank's quarantine rows are written
    loss_v, acc = task.evaluate(model.module)
    named = set(read_quarantine(folder)["index"].tolist()) if folder.exists() else set()
    task.train.poison.clear()
    return {
        **out,
        "loss": loss_v,
        "acc": acc,
        "quarantined": len(named),
        "clean_quarantined": len(named - planted),
        "seconds": 0.0,
    }


def _ddp_worker(rank: int, world: int, port: int, steps: int, seed: int, out: str) -> None:
    import os
    from datetime import timedelta

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    torch.set_num_threads(1)
    t = task("mlp", seed)
    t.steps = steps
    rows = [{"way": way, **_ddp_run(t, way, rank, world, Path(out, way))} for way in WAYS]
    if rank == 0:
        Path(out, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure_ddp(steps: int, seed: int, world: int = 2, timeout: float = 900.0) -> list[dict]:
    """The three ways under DDP, ``world`` gloo processes on loopback."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(
            _ddp_worker,
            args=(world, port, steps, seed, tmp),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                raise TimeoutError(f"the {world}-rank DDP scenario ran past {timeout:.0f} s")
        return json.loads(Path(tmp, "rows.json").read_text())
