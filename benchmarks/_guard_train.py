"""What the guard suite's ways share: skip-and-clip's update, the scheduler step, counting the
guard's events (``guard_scenarios`` and ``_guard_ddp``)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

WAYS = ("none", "clip", "guard")


def clip_update(way, model, opt, scaler, loss: torch.Tensor, micro_ok: bool) -> bool:
    if way == "clip" and not (micro_ok and torch.isfinite(loss)):
        opt.zero_grad(set_to_none=True)
        return False
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


def schedule_step(sched: Any) -> None:
    """``sched.step()``; skip-and-clip may skip the very first step (a NaN batch), which
    torch warns about: the schedule is meant to advance per batch either way."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler.step\(\)`")
        sched.step()


def count_events(out: dict[str, Any], res: Any) -> None:
    for key, kind in (("rollbacks", "rollback"), ("lr_cuts", "lr_reduced"), ("probes", "probe")):
        out[key] += kind in res.events
    out["fallback"] += "fallback" in res.events
    out["skips"] += res.action.value == "skip"
