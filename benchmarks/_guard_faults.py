"""The scenarios of the guard suite: legitimate changes a guard must leave alone, and faults.

A :class:`Scenario` says which families it runs on and changes a run through hooks: which
samples each step's batch is drawn from (``pool``), what is planted in the data (``plant``:
returns the indices of the damaged samples, the only ones a guard may quarantine), what
happens to a batch after the loader (``after``), the LR schedule (``schedule``), and fp16 /
gradient accumulation / batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from _guard_tasks import Task

S = torch.optim.lr_scheduler


def base_schedule(step: int, steps: int, warmup: int = 30) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str
    """``legit`` (a change the run should learn) or ``fault``."""
    families: tuple[str, ...]
    what: str
    plant: Callable[[Task, torch.Generator], set[int]] | None = None
    pool: Callable[[Task, int], torch.Tensor | None] | None = None
    after: Callable[[Task, int, Any, Any, torch.Generator], tuple[Any, Any]] | None = None
    lr: Callable[[int, int], float] | None = None
    """A factor on the base schedule (LR typos, creep)."""
    schedule: Callable[[Any, Task], Any] | None = None
    """A scheduler of its own instead of the base one."""
    stale: tuple[float, float] | None = None
    """(start, length) as fractions of the run: one batch repeated (a stuck loader)."""
    replay: Callable[[Task, int], torch.Tensor | None] | None = None
    fp16: bool = False
    micro: int = 1
    batch: int | None = None
    ddp: bool = False
    setup: Callable[[Task, torch.Generator], None] | None = None
    """Changes to the task that are part of the run, not faults (label noise)."""
    tags: dict[str, Any] = field(default_factory=dict)


# -- legitimate changes ----------------------------------------------------------------------


def _incremental(task: Task, step: int) -> torch.Tensor | None:
    if step >= int(0.4 * task.steps):
        return None
    return (task.train.y < 5).nonzero().reshape(-1)


def _curriculum(task: Task, step: int) -> torch.Tensor | None:
    if step >= int(0.4 * task.steps):
        return None
    easy = task.extra.get("easy")
    if easy is None:
        x, y = task.train.x, task.train.y
        if task.regression:
            score = y.abs()
        else:
            means = torch.stack([x[y == c].mean(0) for c in range(task.classes)])
            score = (x - means[y]).norm(dim=1)
        easy = task.extra["easy"] = score.argsort()[: len(score) // 2]
    return easy


def _seq_growth(task: Task, step: int, x: Any, y: Any, gen: torch.Generator) -> tuple[Any, Any]:
    third = task.steps // 3
    keep = 8 if step < third else 16 if step < 2 * third else x.shape[1]
    return x[:, :keep], y[:, :keep]


def _label_noise(task: Task, gen: torch.Generator) -> None:
    y = task.train.y
    flip = torch.rand(len(y), generator=gen) < 0.3
    if task.regression:
        y[flip] = 3.0 * torch.randn(int(flip.sum()), generator=gen)
    else:
        y[flip] = torch.randint(0, task.classes, (int(flip.sum()),), generator=gen)


def _rare_setup(task: Task, gen: torch.Generator) -> None:
    y = task.train.y
    rare = (y == 8).nonzero().reshape(-1)
    keep = rare[torch.randperm(len(rare), generator=gen)[: max(4, len(rare) // 10)]]
    others = (y != 8).nonzero().reshape(-1)
    task.extra["pool"] = torch.cat([others, keep])
    task.extra["rare"] = keep


def _rare_pool(task: Task, step: int) -> torch.Tensor | None:
    return task.extra["pool"]


def _rare_replay(task: Task, step: int) -> torch.Tensor | None:
    if step % 25 == 24:
        return task.extra["rare"]
    return None


def _cosine_restarts(opt: Any, task: Task) -> Any:
    return S.CosineAnnealingWarmRestarts(opt, T_0=max(10, task.steps // 5))


def _step_lr(opt: Any, task: Task) -> Any:
    return S.MultiStepLR(opt, [task.steps // 2, 3 * task.steps // 4], gamma=0.1)


def _warmup(opt: Any, task: Task) -> Any:
    for group in opt.param_groups:
        group["lr"] *= 3.0
    warm = S.LinearLR(opt, start_factor=0.01, total_iters=task.steps // 4)
    rest = S.CosineAnnealingLR(opt, T_max=task.steps - task.steps // 4)
    return S.SequentialLR(opt, [warm, rest], milestones=[task.steps // 4])


# -- faults ----------------------------------------------------------------------------------


def _poison(values: tuple[float, ...], share: float) -> Callable[[Task, torch.Generator], set[int]]:
    def plant(task: Task, gen: torch.Generator) -> set[int]:
        n = len(task.train)
        bad = torch.randperm(n, generator=gen)[: max(3, int(n * share))].tolist()
        for k, i in enumerate(bad):
            x = task.train.x[i].clone()
            x[k % x.shape[0]] = values[k % len(values)]
            task.train.poison[i] = (x, task.train.y[i].clone())
        return set(bad)

    return plant


def _microbatch(task: Task, gen: torch.Generator) -> set[int]:
    bad = torch.randperm(len(task.train), generator=gen)[:3].tolist()
    for i in bad:
        x = task.train.x[i].clone()
        x[5] = math.nan
        task.train.poison[i] = (x, task.train.y[i].clone())
    return set(bad)


def _fp16_plant(task: Task, gen: torch.Generator) -> set[int]:
    n = len(task.train)
    bad = torch.randperm(n, generator=gen)[: n // 50].tolist()
    for i in bad:
        x = task.train.x[i].clone()
        task.train.poison[i] = (torch.where(x > 0.2, 40000.0, 0.0), task.train.y[i].clone())
    return set(bad)


def _zero(task: Task, step: int, x: Any, y: Any, gen: torch.Generator) -> tuple[Any, Any]:
    if torch.rand((), generator=gen).item() < 0.1:
        return torch.zeros_like(x), y
    return x, y


def _shuffled(task: Task, step: int, x: Any, y: Any, gen: torch.Generator) -> tuple[Any, Any]:
    start = int(0.4 * task.steps)
    if not start <= step < start + 50:
        return x, y
    if task.family == "lm":
        return x, torch.randint(0, task.classes, y.shape, generator=gen)
    return x, y[torch.randperm(len(y), generator=gen)]


def _typo(factor: float) -> Callable[[int, int], float]:
    return lambda step, steps: factor if step >= steps // 2 else 1.0


def _creep(step: int, steps: int) -> float:
    start = int(0.3 * steps)
    return 1.0 if step < start else 1.01 ** (step - start)


ONECYCLE = 100.0
"""OneCycleLR's max_lr over the task's LR: far past the stable LR (the loss blows up at the peak)."""


def _onecycle(opt: Any, task: Task) -> Any:
    base = opt.param_groups[0]["lr"]
    return S.OneCycleLR(opt, max_lr=ONECYCLE * base, total_steps=task.steps)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("clean", "legit", ("mlp", "cnn", "lm", "reg"), "nothing changes"),
        Scenario(
            "curriculum",
            "legit",
            ("mlp", "reg"),
            "easiest half for 40 % of the run, then all",
            pool=_curriculum,
        ),
        Scenario(
            "class_incremental",
            "legit",
            ("mlp", "cnn"),
            "classes 0-4 for 40 % of the run, then all ten",
            pool=_incremental,
        ),
        Scenario("seq_growth", "legit", ("lm",), "context 8, then 16, then 32", after=_seq_growth),
        Scenario("step_lr", "legit", ("mlp", "lm"), "LR x0.1 at 50 % and 75 %", schedule=_step_lr),
        Scenario(
            "cosine_restarts",
            "legit",
            ("mlp", "cnn", "reg"),
            "cosine with warm restarts every 20 % of the run",
            schedule=_cosine_restarts,
        ),
        Scenario(
            "warmup",
            "legit",
            ("cnn", "lm"),
            "linear warm-up over 25 % to 3x the LR, then cosine",
            schedule=_warmup,
        ),
        Scenario("small_batch", "legit", ("mlp", "reg"), "batches of 4", batch=4),
        Scenario(
            "label_noise", "legit", ("mlp", "cnn"), "30 % of labels random", setup=_label_noise
        ),
        Scenario(
            "rare_class",
            "legit",
            ("mlp",),
            "class 8 at 10 %, replayed as a whole batch every 25 steps",
            setup=_rare_setup,
            pool=_rare_pool,
            replay=_rare_replay,
        ),
        Scenario(
            "nan_samples",
            "fault",
            ("mlp", "cnn", "reg"),
            "NaN/Inf features in 2 % of samples",
            plant=_poison((math.nan, math.inf, -math.inf), 0.02),
        ),
        Scenario(
            "huge_samples",
            "fault",
            ("mlp", "reg"),
            "1e30 features in 1 % of samples (finite input, the gradient overflows)",
            plant=_poison((1e30,), 0.01),
        ),
        Scenario(
            "nan_microbatch",
            "fault",
            ("mlp",),
            "3 NaN rows, 4 micro-batches of 8 a step",
            plant=_microbatch,
            micro=4,
        ),
        Scenario(
            "stale_batch",
            "fault",
            ("mlp", "lm"),
            "one batch repeated for 20 % of the run (a stuck loader)",
            stale=(0.3, 0.2),
        ),
        Scenario("zero_batches", "fault", ("mlp", "cnn"), "10 % of batches all zeros", after=_zero),
        Scenario(
            "shuffled",
            "fault",
            ("mlp", "lm"),
            "50 steps of shuffled labels / random targets",
            after=_shuffled,
        ),
        Scenario("lr_x10", "fault", ("mlp", "lm"), "base LR x10 from mid-run", lr=_typo(10.0)),
        Scenario(
            "lr_x100", "fault", ("mlp", "lm", "reg"), "base LR x100 from mid-run", lr=_typo(100.0)
        ),
        Scenario("lr_creep", "fault", ("mlp", "reg"), "LR x1.01 a step from 30 %", lr=_creep),
        Scenario(
            "onecycle",
            "fault",
            ("mlp", "cnn"),
            "OneCycleLR with max_lr 50x the LR (diverges at the peak)",
            schedule=_onecycle,
        ),
        Scenario(
            "fp16",
            "fault",
            ("mlp",),
            "fp16 autocast, 2 % of samples overflow fp16 in the first layer",
            plant=_fp16_plant,
            fp16=True,
        ),
        Scenario(
            "ddp_bad_rank",
            "fault",
            ("mlp",),
            "DDP over 2 gloo processes, NaN/Inf/1e30 in 4 % of rank 1's shard",
            ddp=True,
        ),
    )
}
