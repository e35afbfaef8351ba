"""TrainingGuard in fault scenarios, three ways: no guard, skip-and-clip, datacheck.

Run: ``python benchmarks/guard_scenarios.py`` (CPU, a few minutes; ``--small`` for the
version the test suite runs).  Two small tasks: an MLP on a 10-class 64-feature task (digits-
like, generated) and a character transformer on Python source (this package's own code).
Each scenario is trained three ways from the same seed and the same batches:

- ``none``: ``loss.backward(); optimizer.step()``;
- ``clip``: today's practice: skip a non-finite loss, ``clip_grad_norm_(1.0)``, skip a
  non-finite norm;
- ``guard``: ``GuardedLoader`` + ``TrainingGuard`` with their defaults.

Scenarios: ``clean``; ``poison`` (NaN/Inf/1e30 features, out-of-range labels/ids in 2 % of
the samples); ``lr_base`` (the base LR x100 from mid-run on); ``lr_window`` (the schedule x100
for 20 steps); ``fp16`` (MLP: fp16 autocast, inputs that overflow inside the model);
``shuffled`` (a 50-batch window of shuffled labels / random targets); ``ddp2`` (MLP: DDP over
2 gloo processes on loopback, each rank reading its own shard, NaN/Inf/1e30 features in 4 % of
rank 1's shard; skip-and-clip then backpropagates on every rank and skips when the all-reduced
norm is non-finite, since a rank that skips its backward alone hangs the others).  Prints final
held-out loss and accuracy, steps lost, guard events and clean samples quarantined; writes
``results/guard-scenarios.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _harness import Table, write_results
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from datacheck.torch import GuardedLoader, TrainingGuard, TrainingStopped, read_quarantine

F = torch.nn.functional
SCENARIOS = ("clean", "poison", "lr_base", "lr_window", "fp16", "shuffled", "ddp2")
MLP_ONLY = ("fp16", "ddp2")
WAYS = ("none", "clip", "guard")


# -- the two tasks ---------------------------------------------------------------------------


class Samples(Dataset):
    """(x, y, index) rows; ``poison`` maps an index to a damaged copy of its row."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.poison: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y = self.poison.get(i, (self.x[i], self.y[i]))
        return x, y, i


@dataclass
class Task:
    name: str
    train: Samples
    test: tuple[torch.Tensor, torch.Tensor]
    classes: int
    model: Any
    lr: float
    steps: int
    batch: int = 32
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    seed: int = 0
    """Varies the model's initialisation and the batch order (not the data), for noise."""


def mlp_task(steps: int, seed: int = 0) -> Task:
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 64, generator=gen)
    y = torch.randint(0, 10, (1800,), generator=gen)
    x = protos[y] + 1.6 * torch.randn(1800, 64, generator=gen)

    def model() -> torch.nn.Module:
        torch.manual_seed(1 + seed)
        return torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )

    train = Samples(x[:1500], y[:1500])
    test = (x[1500:], y[1500:])
    return Task("mlp", train, test, 10, model, 2e-3, steps, ranges={"1": (0, 9)}, seed=seed)


class CharLM(torch.nn.Module):
    def __init__(self, vocab: int = 128, d: int = 64, context: int = 32) -> None:
        super().__init__()
        self.emb, self.pos = (
            torch.nn.Embedding(vocab, d),
            torch.nn.Parameter(torch.zeros(context, d)),
        )
        layer = torch.nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x) + self.pos[: x.shape[1]]
        return self.head(self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))


def lm_task(steps: int, context: int = 32, seed: int = 0) -> Task:
    root = Path(__file__).resolve().parents[1] / "datacheck"
    text = "".join(p.read_text() for p in sorted(root.rglob("*.py")))
    ids = torch.tensor([min(ord(c), 127) for c in text[:400_000]], dtype=torch.long)
    n = (len(ids) - 1) // context
    x = ids[: n * context].reshape(n, context)
    y = ids[1 : n * context + 1].reshape(n, context)
    cut = int(0.9 * n)

    def model() -> torch.nn.Module:
        torch.manual_seed(1 + seed)
        return CharLM(context=context)

    ranges = {"0": (0, 127), "1": (0, 127)}
    train, test = Samples(x[:cut], y[:cut]), (x[cut:], y[cut:])
    return Task("lm", train, test, 128, model, 3e-3, steps, ranges=ranges, seed=seed)


def per_sample_loss(task: Task, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if task.name == "lm":
        flat = F.cross_entropy(logits.reshape(-1, task.classes), y.reshape(-1), reduction="none")
        return flat.reshape(y.shape).mean(dim=1)
    return F.cross_entropy(logits, y, reduction="none")


def evaluate(task: Task, model: torch.nn.Module) -> tuple[float, float]:
    x, y = task.test
    with torch.no_grad():
        logits = model(x)
        loss = per_sample_loss(task, logits.float(), y).mean().item()
        acc = (logits.argmax(-1) == y).float().mean().item()
    return loss, acc


# -- faults ------------------------------------------------------------------------------------


def plant(task: Task, scenario: str) -> set[int]:
    """Damage 2 % of the training samples (poison, fp16); returns their indices."""
    if scenario not in ("poison", "fp16"):
        return set()
    gen = torch.Generator().manual_seed(7)
    n = len(task.train)
    bad = torch.randperm(n, generator=gen)[: n // 50].tolist()
    for k, i in enumerate(bad):
        x, y = task.train.x[i].clone(), task.train.y[i].clone()
        if scenario == "fp16":
            x = x.sign() * 40000.0  # fits fp16 (under 65504) but overflows in the first layer
        elif task.name == "lm":
            x[k % len(x)] = 500  # an id beyond the vocabulary
        elif k % 4 == 3:
            y = torch.tensor(10 + k % 5)  # a label beyond the classes
        else:
            x[k % len(x)] = (math.nan, math.inf, 1e30)[k % 4 % 3]
        task.train.poison[i] = (x, y)
    return set(bad)


def lr_multiplier(scenario: str, step: int, steps: int) -> float:
    if scenario == "lr_base" and step >= steps // 2:
        return 100.0
    if scenario == "lr_window" and steps * 2 // 5 <= step < steps * 2 // 5 + 20:
        return 100.0
    return 1.0


def schedule(step: int, steps: int, warmup: int = 30) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def scramble(task: Task, scenario: str, step: int, y: torch.Tensor) -> torch.Tensor:
    start = task.steps * 2 // 5
    if scenario != "shuffled" or not start <= step < start + 50:
        return y
    gen = torch.Generator().manual_seed(step)
    if task.name == "lm":
        return torch.randint(0, task.classes, y.shape, generator=gen)
    return y[torch.randperm(len(y), generator=gen)]


# -- one run -------------------------------------------------------------------------------------


def run(task: Task, scenario: str, way: str, folder: Path) -> dict[str, Any]:
    poisoned = plant(task, scenario)
    model = task.model()
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: schedule(s, task.steps) * lr_multiplier(scenario, s, task.steps)
    )
    fp16 = scenario == "fp16"
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    sampler = RandomSampler(task.train, generator=torch.Generator().manual_seed(3 + task.seed))
    loader: Any = DataLoader(task.train, batch_size=task.batch, sampler=sampler, drop_last=True)
    guard = None
    if way == "guard":
        loader = GuardedLoader(loader, quarantine=str(folder), ranges=task.ranges)
        seam = loader if hasattr(loader, "exclude") else None
        guard = TrainingGuard(
            model, opt, scaler, scheduler=sched, loader=seam, quarantine=str(folder)
        )
    out = {"lost": 0, "stopped": None, "crashed": None, "rollbacks": 0, "lr_cuts": 0, "skips": 0}
    step = 0
    try:
        while step < task.steps:
            for x, y, idx in loader:
                if step >= task.steps:
                    break
                y = scramble(task, scenario, step, y)
                with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
                    logits = model(x)
                per_sample = per_sample_loss(task, logits.float(), y)
                loss = per_sample.mean()
                stepped = update(way, guard, model, opt, scaler, loss, idx, per_sample, out)
                out["lost"] += not stepped
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
    except TrainingStopped:
        out["stopped"] = step
    except (IndexError, RuntimeError) as exc:  # an out-of-range label or id
        out["crashed"] = f"step {step}: {type(exc).__name__}"
    if guard is not None:
        guard.close()
    loss_v, acc = evaluate(task, model) if out["crashed"] is None else (math.nan, math.nan)
    named = set(read_quarantine(folder)["index"].tolist()) if way == "guard" else set()
    task.train.poison.clear()
    return {**out, "loss": loss_v, "acc": acc, "clean_quarantined": len(named - poisoned)}


def update(way, guard, model, opt, scaler, loss, idx, per_sample, out, ddp=False) -> bool:
    if way == "guard":
        scaler.scale(loss).backward()
        res = guard.step(loss, indices=idx.tolist(), sample_losses=per_sample.detach())
        out["rollbacks"] += "rollback" in res.events
        out["lr_cuts"] += "lr_reduced" in res.events
        out["skips"] += res.action.value == "skip"
        return res.action.stepped
    if way == "clip" and not ddp and not torch.isfinite(loss):
        return False
    scaler.scale(loss).backward()
    if way == "none":
        scaler.step(opt)
        scaler.update()
        return bool(torch.isfinite(loss))
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        scaler.update()
        return False
    scaler.step(opt)
    scaler.update()
    return True


# -- (iv) DDP: bad data on one rank ----------------------------------------------------------


class ShardSampler(Sampler[int]):
    """A rank's own shard (every ``world``-th index, as if read from its own files), shuffled
    anew each epoch: bad data in the shard stays on that rank."""

    def __init__(self, n: int, rank: int, world: int, seed: int) -> None:
        self.indices, self.seed, self.epoch = list(range(rank, n, world)), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter([self.indices[i] for i in torch.randperm(len(self), generator=gen).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


def plant_rank(task: Task, rank: int, world: int) -> set[int]:
    """NaN, Inf and 1e30 features in 4 % of rank ``rank``'s shard; returns their indices."""
    shard = list(range(rank, len(task.train), world))
    gen = torch.Generator().manual_seed(7)
    bad = [shard[p] for p in torch.randperm(len(shard), generator=gen)[: len(shard) // 25]]
    for k, i in enumerate(bad):
        x = task.train.x[i].clone()
        x[k % len(x)] = (math.nan, math.inf, 1e30)[k % 3]
        task.train.poison[i] = (x, task.train.y[i].clone())
    return set(bad)


def ddp_run(task: Task, way: str, rank: int, world: int, folder: Path) -> dict[str, Any]:
    poisoned = plant_rank(task, 1, world)
    model = torch.nn.parallel.DistributedDataParallel(task.model())
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule(s, task.steps))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    sampler = ShardSampler(len(task.train), rank, world, seed=3 + task.seed)
    loader: Any = DataLoader(task.train, batch_size=task.batch, sampler=sampler, drop_last=True)
    guard = None
    if way == "guard":
        loader = GuardedLoader(loader, quarantine=str(folder), ranges=task.ranges)
        guard = TrainingGuard(model, opt, scheduler=sched, loader=loader, quarantine=str(folder))
    out = {"lost": 0, "stopped": None, "crashed": None, "rollbacks": 0, "lr_cuts": 0, "skips": 0}
    step = epoch = 0
    try:
        while step < task.steps:
            loader.set_epoch(epoch) if guard is not None else sampler.set_epoch(epoch)
            epoch += 1
            for x, y, idx in loader:
                if step >= task.steps:
                    break
                per_sample = F.cross_entropy(model(x), y, reduction="none")
                loss = per_sample.mean()
                args = (model, opt, scaler, loss, idx, per_sample, out)
                stepped = update(way, guard, *args, ddp=True)
                out["lost"] += not stepped
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
    except TrainingStopped:
        out["stopped"] = step
    if guard is not None:
        guard.close()
        loader.close()
    dist.barrier()  # every rank's quarantine rows are written
    loss_v, acc = evaluate(task, model.module)
    named = set(read_quarantine(folder)["index"].tolist()) if way == "guard" else set()
    task.train.poison.clear()
    return {**out, "loss": loss_v, "acc": acc, "clean_quarantined": len(named - poisoned)}


def ddp_worker(rank: int, world: int, port: int, steps: int, seed: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    torch.set_num_threads(1)
    task = mlp_task(steps, seed)
    rows = [{"way": way, **ddp_run(task, way, rank, world, Path(out, way))} for way in WAYS]
    if rank == 0:
        Path(out, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure_ddp(
    steps: int, seed: int = 0, world: int = 2, timeout: float = 900.0
) -> list[dict[str, Any]]:
    """Scenario (iv): the three ways under DDP, ``world`` gloo processes on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(
            ddp_worker,
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
        rows = json.loads(Path(tmp, "rows.json").read_text())
    return [{"task": "mlp", "scenario": f"ddp{world}", **row} for row in rows]


# -- the table -----------------------------------------------------------------------------------


def scenarios_for(task: Task, small: bool) -> list[str]:
    chosen = ["clean", "poison", "lr_base", "shuffled", "ddp2"] if small else list(SCENARIOS)
    return [s for s in chosen if task.name == "mlp" or s not in MLP_ONLY]


def measure(
    small: bool = False, seeds: tuple[int, ...] = (0,), only: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Rows of (task, scenario, way, seed, results); ``only``: these scenarios (default all)."""
    rows = []
    for seed in seeds:
        tasks = [mlp_task(300 if small else 900, seed)]
        tasks += [] if small else [lm_task(600, seed=seed)]
        with tempfile.TemporaryDirectory() as tmp:
            for task in tasks:
                for scenario in scenarios_for(task, small):
                    if only and scenario not in only:
                        continue
                    if scenario.startswith("ddp"):
                        found = measure_ddp(task.steps, seed, world=int(scenario[3:]))
                        rows += [{**r, "seed": seed} for r in found]
                        continue
                    for way in WAYS:
                        folder = Path(tmp) / f"{task.name}-{scenario}-{way}"
                        head = {"task": task.name, "scenario": scenario, "way": way, "seed": seed}
                        rows.append({**head, **run(task, scenario, way, folder)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", action="store_true", help="the quick version the tests run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1, help="repeat with seeds 0..N-1 (noise)")
    ap.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    only = tuple(x for x in a.only.split(",") if x)
    rows = measure(a.small, tuple(range(a.seeds)), only)
    cols = ["task", "scenario", "way"] + (["seed"] if a.seeds > 1 else [])
    cols += ["loss", "acc", "lost", "skips", "rollbacks", "lr_cuts", "stopped", "crashed"]
    cols += ["clean_quarantined"]
    table = Table(
        cols,
        [[r[c] if r[c] is not None else "" for c in cols] for r in rows],
        title="TrainingGuard scenarios (CPU)",
    )
    name = "guard-scenarios" + ("-small" if a.small else "")
    name += "-noise" if a.seeds > 1 or only else ""
    write_results(name, {"rows": rows}, table=table, params=vars(a))


if __name__ == "__main__":
    main()
