"""What the guard runs on the device: the optimizer step under the LR cut, and sync-free mode.

In sync-free mode (``sync_every=N``) the skip decision stays on the device: the all-reduced
table and a device-side ``ok`` flag (every loss and norm finite, and no probe under way) drive
a masked update (:class:`~datacheck.torch._syncfree.MaskedStep`), and the host reads the
records of N steps back at once, logs them and escalates at most once.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
from torch.nn.utils import clip_grads_with_norm_

from datacheck.errors import UsageError
from datacheck.torch import _dist
from datacheck.torch._guard_policy import Plan, Policy
from datacheck.torch._guard_types import Action, GuardConfig, StepResult, TrainingStopped
from datacheck.torch._identity import SampleKey, as_sample_keys
from datacheck.torch._syncfree import MaskedStep

__all__ = ["DeviceDecisions", "Micro", "check_scalar", "merge_micro", "scaled_lr"]

Micro = tuple[torch.Tensor, Sequence[SampleKey] | None, torch.Tensor | None]
"""One micro-batch recorded by ``guard.backward``: (loss, indices, per-sample losses)."""


def check_scalar(loss: torch.Tensor, where: str) -> None:
    """The guard takes the scalar loss; per-sample losses go in ``sample_losses=``."""
    if loss.numel() != 1:
        raise UsageError(
            f"TrainingGuard.{where}: pass the scalar loss (got shape {tuple(loss.shape)}); "
            "per-sample losses go in sample_losses="
        )


def merge_micro(
    micro: list[Micro],
) -> tuple[torch.Tensor, list[SampleKey] | None, torch.Tensor | None]:
    """One step's loss (the micro-batches' mean, on the device), indices and per-sample losses."""
    mean = torch.stack([m[0].reshape(()).float() for m in micro]).mean()
    idx = None
    if all(m[1] is not None for m in micro):
        idx = [k for m in micro for k in as_sample_keys(m[1] or ())]
    parts = [m[2].detach().reshape(-1) for m in micro if m[2] is not None]
    samples = torch.cat(parts) if len(parts) == len(micro) else None
    return mean, idx, samples


@contextlib.contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: float) -> Iterator[None]:
    """The optimizer steps with its LRs times ``scale``; schedulers only ever see the unscaled
    LRs, so the cut survives every scheduler (chainable or absolute, e.g. OneCycleLR)."""
    if scale == 1.0:
        yield
        return
    saved = [group["lr"] for group in optimizer.param_groups]
    for group, lr in zip(optimizer.param_groups, saved, strict=True):
        group["lr"] = lr * scale
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, saved, strict=True):
            group["lr"] = lr


class DeviceDecisions:
    """The sync-free half of :class:`~datacheck.torch.TrainingGuard` (a mixin)."""

    config: GuardConfig
    world: _dist.World
    optimizer: torch.optim.Optimizer
    step_count: int
    _policy: Policy
    _params: list[torch.Tensor]
    _masked: MaskedStep | None
    _pending: list[tuple[int, torch.Tensor]]
    _stop_message: str | None
    _device_probe: int

    def _escalate(self, step: int, plan: Plan) -> None:
        raise NotImplementedError

    def _record(self, step: int, plan: Plan, loss: float, norm: float, at: int) -> None:
        raise NotImplementedError

    @property
    def lr(self) -> float:
        raise NotImplementedError

    def _step_on_device(
        self, step: int, loss: torch.Tensor, norm: torch.Tensor, hook_bad: torch.Tensor | None
    ) -> StepResult:
        """Decide on the device (a non-finite loss or norm is skipped; so is a probe's batch)."""
        cfg = self.config
        table = _dist.device_stats(self.world, loss, norm, hook_bad)
        probe = self._device_probe > 0
        ok = torch.isfinite(table[:, :2]).all() & (not probe)
        if probe:
            self._device_probe -= 1
        if cfg.clip_norm is not None:
            clip_grads_with_norm_(self._params, cfg.clip_norm, norm, foreach=True)
        assert self._masked is not None
        with scaled_lr(self.optimizer, self._policy.lr_scale):
            self._masked.step(ok)
        flags = torch.stack([ok.to(table.dtype), table.new_tensor(float(probe))])
        self._pending.append((step, torch.cat([table.reshape(-1), flags])))
        if len(self._pending) < cfg.sync_every:
            return StepResult(step, Action.DEFERRED, math.nan, math.nan, self.lr)
        return self._read_back()

    def _read_back(self) -> StepResult:
        """One host read for the pending steps: log them, keep the windows, escalate once."""
        steps = [s for s, _ in self._pending]
        rows = torch.stack([r for _, r in self._pending]).tolist()
        self._pending.clear()
        kinds: list[str] = []
        ranks: set[int] = set()
        action, escalated = Action.DEFERRED, False
        loss = norm = math.nan
        for step, row in zip(steps, rows, strict=True):
            table = _dist.table_from_rows([row[3 * r : 3 * r + 3] for r in range(self.world.size)])
            if self._policy.probing and not row[-1] > 0:  # decided before the probe began
                self._record(
                    step,
                    Plan(Action.SKIP if row[-2] <= 0 else Action.STEP),
                    math.nan,
                    math.nan,
                    at=self.step_count,
                )
                continue
            plan, loss, norm = self._replay(step, table, ok=row[-2] > 0, probe=row[-1] > 0)
            if plan.escalate and not escalated:
                self._escalate(step, plan)
                escalated, action = True, plan.action
                if self._policy.probing:  # the probe's batches are the next ones the device sees
                    self._device_probe = self.config.probe_steps
            self._record(step, plan, loss, norm, at=self.step_count)
            kinds += [e["kind"] for e in plan.events]
            ranks.update(plan.ranks)
        result = StepResult(
            steps[-1], action, loss, norm, self.lr, tuple(kinds), tuple(sorted(ranks))
        )
        if result.action is Action.STOP and self.config.raise_on_stop:
            raise TrainingStopped(self._stop_message)
        return result

    def _replay(
        self, step: int, table: _dist.RankTable, ok: bool, probe: bool
    ) -> tuple[Plan, float, float]:
        """Host bookkeeping for a step the device already decided."""
        finite = [v for v in table.losses if math.isfinite(v)]
        loss = sum(finite) / len(finite) if finite else math.nan
        norm = math.nan if any(map(math.isnan, table.norms)) else max(table.norms)
        policy = self._policy
        bad = table.ranks_with(_dist.BIT_LOSS | _dist.BIT_GRAD)
        if probe:
            return policy.probe_step(math.nan if bad else loss), loss, norm
        if ok:
            clipped = self.config.clip_norm is not None and norm > self.config.clip_norm
            action = Action.CLIP if clipped else Action.STEP
            return policy.finite(step, action, loss, norm, table.norms), loss, norm
        started = table.ranks_with(_dist.BIT_LOSS | _dist.BIT_LOCAL_GRAD)
        ranks = started or table.ranks_with(_dist.BIT_GRAD)
        plan = policy.nonfinite(step, ranks, loss=loss, grad_norm=norm)
        policy.blame(plan, evidence=False, step=step)
        return plan, loss, norm
