"""Held-out scenarios: runs the guard was NOT tuned on (issue 28's "scenario sets we keep").

The guard's thresholds were chosen while watching ``_guard_faults.SCENARIOS``; these were
written afterwards and are reported separately (``guard_scenarios.py --held-out``).  They change
what was fixed there: the timing of a fault (late NaN samples, an early LR typo), its shape (a
short LR spike with no warm-up at all, a burst of random labels, one batch of inputs scaled
1e4), and the model family (``bn``: BatchNorm + dropout, SGD with Nesterov momentum, a small
binary table).  Samples an ``after`` hook damages for one batch are not counted as planted:
quarantining them counts as quarantining clean samples (the strict reading).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from _guard_faults import Scenario, _poison
from _guard_tasks import Task

S = torch.optim.lr_scheduler


def _spike_no_warmup(opt: Any, task: Task) -> Any:
    """A constant LR (no warm-up, no decay) with x30 for 20 steps at 60 % of the run."""
    start = int(0.6 * task.steps)
    return S.LambdaLR(opt, lambda s: 30.0 if start <= s < start + 20 else 1.0)


def _label_burst(task: Task, step: int, x: Any, y: Any, gen: torch.Generator) -> tuple[Any, Any]:
    """30 steps of uniformly random labels (random targets for the regressor) at 65 %."""
    start = int(0.65 * task.steps)
    if not start <= step < start + 30:
        return x, y
    if task.regression:
        return x, 3.0 * torch.randn(y.shape, generator=gen)
    return x, torch.randint(0, task.classes, y.shape, generator=gen)


def _scaled_batch(task: Task, step: int, x: Any, y: Any, gen: torch.Generator) -> tuple[Any, Any]:
    """One batch of inputs scaled 1e4 (a unit bug: mm for m) at 50 % and again at 75 %."""
    if step in (task.steps // 2, 3 * task.steps // 4):
        return x * 1e4, y
    return x, y


def _late_pool(task: Task, step: int) -> torch.Tensor | None:
    """Only clean samples for the first 70 % of the run (the poisoned shard arrives late)."""
    if step >= int(0.7 * task.steps):
        return None
    clean = task.extra.get("clean")
    if clean is None:
        bad = torch.tensor(sorted(task.train.poison), dtype=torch.long)
        keep = torch.ones(len(task.train), dtype=torch.bool)
        keep[bad] = False
        clean = task.extra["clean"] = keep.nonzero().reshape(-1)
    return clean


def _early_typo(step: int, steps: int) -> float:
    return 100.0 if step >= steps // 5 else 1.0


HELD_OUT: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("clean", "legit", ("bn",), "nothing changes (the held-out family)"),
        Scenario(
            "lr_spike_no_warmup",
            "fault",
            ("mlp", "reg", "bn"),
            "constant LR, no warm-up; x30 for 20 steps at 60 %",
            schedule=_spike_no_warmup,
        ),
        Scenario(
            "label_burst",
            "fault",
            ("mlp", "cnn", "bn"),
            "30 steps of random labels at 65 % (a bad shard; nothing non-finite)",
            after=_label_burst,
        ),
        Scenario(
            "scaled_batch",
            "fault",
            ("mlp", "reg", "bn"),
            "one batch of inputs x1e4 at 50 % and at 75 % (finite)",
            after=_scaled_batch,
        ),
        Scenario(
            "late_nan",
            "fault",
            ("mlp", "reg", "bn"),
            "NaN/Inf features in 2 % of samples, drawn only from 70 % of the run on",
            plant=_poison((math.nan, math.inf, -math.inf), 0.02),
            pool=_late_pool,
        ),
        Scenario(
            "early_lr_x100",
            "fault",
            ("mlp", "lm", "bn"),
            "base LR x100 from 20 % of the run",
            lr=_early_typo,
        ),
        Scenario("small_batch", "legit", ("bn",), "batches of 4", batch=4),
    )
}
