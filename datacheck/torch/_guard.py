"""TrainingGuard: the gradient side of the runtime guard.

``guard.step(loss)`` replaces ``optimizer.step()`` (and ``scaler.step`` / ``scaler.update``).
Each step it computes one total gradient norm (foreach), shares (flags, loss, norm) with
every rank in one small all-reduce, and runs the same policy on every rank:

    healthy            -> step (clipped to ``clip_norm`` when above it)
    grad-norm spike    -> warn (the early sign), then step on clipped gradients
    fp16 overflow      -> let the GradScaler skip and lower its scale (normal, not divergence)
    NaN/Inf or a loss spike -> skip: weights and optimizer state untouched
    ``rollback_after`` bad steps in a row (or a collapsing loss scale)
                       -> roll back to the last good snapshot and lower the LR
    ``max_rollbacks`` rollbacks without progress -> stop with a clear message

Every action is a line in a JSON Lines log (one file per rank).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from datacheck.errors import UsageError
from datacheck.torch import _dist
from datacheck.torch._guard_log import (
    EventLog,
    bad_steps,
    guard_quarantine,
    name_samples,
    quarantine_records,
)
from datacheck.torch._guard_types import (
    Action,
    GuardConfig,
    StepResult,
    TrainingStopped,
)
from datacheck.torch._snapshots import SnapshotStore, capture_rng, restore_rng
from datacheck.torch._syncfree import MaskedStep

__all__ = ["Action", "GuardConfig", "StepResult", "TrainingGuard", "TrainingStopped", "bad_steps"]


class _Window:
    """Recent finite values and their median."""

    def __init__(self, size: int, warmup: int) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.warmup = warmup

    def level(self) -> float | None:
        if not self.values or len(self.values) < min(self.warmup, self.values.maxlen or 0):
            return None
        return statistics.median(self.values)

    def is_spike(self, value: float, factor: float) -> tuple[bool, float | None]:
        level = self.level()
        return (level is not None and level > 0 and value >= factor * level), level

    def push(self, value: float) -> None:
        if math.isfinite(value):
            self.values.append(value)


@dataclass
class _Plan:
    """The decision for one step, built from the shared rank table."""

    action: Action
    events: list[dict[str, Any]] = field(default_factory=list)
    ranks: tuple[int, ...] = ()
    escalate: bool = False

    def add(self, kind: str, severity: str, **values: Any) -> None:
        self.events.append({"kind": kind, "severity": severity, **values})


class TrainingGuard:
    """Guards optimizer steps against NaN/Inf, loss spikes and divergence.

    Example:
        >>> guard = TrainingGuard(model, optimizer, clip_norm=1.0, log="guard.jsonl")
        >>> loss.backward()
        >>> guard.step(loss)            # instead of optimizer.step()
        >>> optimizer.zero_grad(set_to_none=True)

    Args:
        model: The model (a DDP model gets a communication hook for rank attribution).
        optimizer: The optimizer whose ``step`` the guard calls.
        scaler: A ``torch.amp.GradScaler`` when training in fp16.
        scheduler: An LR scheduler to snapshot and to keep in line with LR cuts.
        config: A :class:`GuardConfig`; or pass its fields as keyword arguments.
        process_group: The group to agree over (default: the world).
        **options: :class:`GuardConfig` fields, when ``config`` is not given.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: Any = None,
        *,
        scheduler: Any = None,
        config: GuardConfig | None = None,
        process_group: Any = None,
        **options: Any,
    ) -> None:
        if config is not None and options:
            raise UsageError(
                f"TrainingGuard: pass config= or options, not both (got {sorted(options)})"
            )
        self.config = cfg = config if config is not None else GuardConfig(**options)
        self.model, self.optimizer, self.scaler, self.scheduler = (
            model,
            optimizer,
            scaler,
            scheduler,
        )
        self.world = _dist.World.detect(process_group)
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._hook = self._maybe_install_hook()
        self._snaps = SnapshotStore(
            cfg.keep_checkpoints, cfg.checkpoint_dir, self.world.rank, self.world.size
        )
        self._loss = _Window(cfg.loss_window, cfg.warmup)
        self._gnorm = _Window(cfg.grad_window, cfg.warmup)
        self._log_path = (
            _dist.rank_path(cfg.log, self.world.rank, self.world.size) if cfg.log else None
        )
        tb_dir = cfg.tensorboard
        if tb_dir is not None and self.world.size > 1:
            tb_dir = str(Path(tb_dir) / f"rank{self.world.rank}")
        has_log = self._log_path is not None or tb_dir is not None
        self._log = EventLog(self._log_path, Path(tb_dir) if tb_dir else None) if has_log else None
        self._quarantine = (
            guard_quarantine(cfg.quarantine, self.world.rank) if cfg.quarantine else None
        )
        self.step_count = 0
        self._bad_streak = self._overflow_streak = self._rollbacks = 0
        self._healthy_since_warning = self._healthy_since_cut = self._good_since_snapshot = 0
        self._incident: int | None = None
        self._skip_pending = 0
        self._lr_scale = 1.0
        self._stop_message: str | None = None
        self._now = 0
        self._masked = self._maybe_masked()
        self._pending: list[tuple[int, torch.Tensor]] = []

    @property
    def _scaling(self) -> bool:
        """A GradScaler that is on: ``GradScaler(enabled=False)`` never overflows, so NaN is NaN."""
        return self.scaler is not None and self.scaler.is_enabled()

    def _maybe_masked(self) -> MaskedStep | None:
        if not self.config.sync_every:
            return None
        if self._scaling or self.config.drop_bad_ranks:
            raise UsageError(
                "TrainingGuard: sync_every needs scaler=None and drop_bad_ranks=False (GradScaler "
                "reads its overflow flag on the host); use bf16, or sync_every=0"
            )
        return MaskedStep(self.optimizer)

    def _maybe_install_hook(self) -> _dist.HookState | None:
        ddp = isinstance(self.model, torch.nn.parallel.DistributedDataParallel)
        if ddp and self.world.size > 1:
            return _dist.install_ddp_hook(self.model, self.world, self.config.drop_bad_ranks)
        if self.config.drop_bad_ranks:
            raise UsageError(
                "TrainingGuard: drop_bad_ranks=True needs a DistributedDataParallel model in a world of 2+ ranks"
            )
        return None

    # -- the step --------------------------------------------------------------------------

    def step(
        self,
        loss: torch.Tensor,
        *,
        indices: Sequence[int] | None = None,
        sample_losses: torch.Tensor | None = None,
    ) -> StepResult:
        """Check this step and step the optimizer (or not); returns what was done.

        Args:
            loss: This rank's loss for the step (after ``backward``).
            indices: Dataset indices of this rank's batch, attached to events.
            sample_losses: Per-sample losses of this rank's batch, to name the samples behind
                a NaN or a spike.

        Raises:
            TrainingStopped: when rollbacks did not recover the run (``raise_on_stop``).
        """
        if loss.numel() != 1:
            raise UsageError(
                f"TrainingGuard.step: pass the scalar loss (got shape {tuple(loss.shape)}); "
                "per-sample losses go in sample_losses="
            )
        step, self.step_count = self.step_count, self.step_count + 1
        self._now = step
        if self._stop_message is not None:
            return self._finish(step, _Plan(Action.STOP), math.nan, math.nan, None, None)
        if self._skip_pending > 0:
            self._skip_pending -= 1
            plan = _Plan(Action.SKIP)
            plan.add("data_skip", "info", left=self._skip_pending)
            return self._finish(step, plan, math.nan, math.nan, indices, sample_losses)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = get_total_norm(grads, foreach=True) if grads else torch.zeros((), device=loss.device)
        hook_bad = self._hook.take() if self._hook is not None else None
        if self._masked is not None:
            return self._step_on_device(step, loss, norm, hook_bad)
        table = _dist.share_stats(self.world, loss, norm, hook_bad)
        plan, mean_loss, max_norm = self._decide(step, table)
        self._apply(plan, norm, max_norm)
        if plan.escalate:
            self._escalate(step, plan)
        return self._finish(step, plan, mean_loss, max_norm, indices, sample_losses)

    def _decide(self, step: int, table: _dist.RankTable) -> tuple[_Plan, float, float]:
        cfg = self.config
        started = table.ranks_with(_dist.BIT_LOSS | _dist.BIT_LOCAL_GRAD)
        finite = [v for v in table.losses if math.isfinite(v)]
        mean_loss = sum(finite) / len(finite) if finite else math.nan
        max_norm = math.nan if any(map(math.isnan, table.norms)) else max(table.norms)
        loss_bad = bool(table.ranks_with(_dist.BIT_LOSS))
        grad_bad = bool(table.ranks_with(_dist.BIT_GRAD))
        if self._scaling and grad_bad and not loss_bad:
            return self._overflow_plan(), mean_loss, max_norm
        if started and not grad_bad and cfg.drop_bad_ranks:
            plan = _Plan(Action.DROP_RANKS, ranks=started)
            plan.add("nonfinite", "warning", ranks=list(started), dropped=True)
            return plan, mean_loss, max_norm
        if loss_bad or grad_bad:
            ranks = started or table.ranks_with(_dist.BIT_GRAD)
            return (
                self._bad_plan("nonfinite", ranks, loss=mean_loss, grad_norm=max_norm),
                mean_loss,
                max_norm,
            )
        spike, level = self._loss.is_spike(mean_loss, cfg.spike_factor)
        if spike:
            ranks = tuple(
                r for r, v in enumerate(table.losses) if level and v >= cfg.spike_factor * level
            )
            plan = self._bad_plan(
                "loss_spike", ranks, loss=mean_loss, level=level, factor=cfg.spike_factor
            )
            return plan, mean_loss, max_norm
        return self._healthy_plan(step, mean_loss, max_norm, table), mean_loss, max_norm

    def _bad_plan(self, kind: str, ranks: tuple[int, ...], **values: Any) -> _Plan:
        self._note_warning()
        self._bad_streak += 1
        plan = _Plan(
            Action.SKIP, ranks=ranks, escalate=self._bad_streak >= self.config.rollback_after
        )
        plan.add(kind, "error", ranks=list(ranks), streak=self._bad_streak, **values)
        return plan

    def _overflow_plan(self) -> _Plan:
        self._overflow_streak += 1
        plan = _Plan(Action.SCALER_SKIP)
        plan.add("scaler_overflow", "info", streak=self._overflow_streak)
        return plan

    def _healthy_plan(self, step: int, loss: float, norm: float, table: _dist.RankTable) -> _Plan:
        cfg = self.config
        clipped = cfg.clip_norm is not None and norm > cfg.clip_norm
        plan = _Plan(Action.CLIP if clipped else Action.STEP)
        spike, level = self._gnorm.is_spike(norm, cfg.grad_spike_factor)
        if spike:
            self._note_warning()
            ranks = tuple(
                r for r, v in enumerate(table.norms) if level and v >= cfg.grad_spike_factor * level
            )
            plan.ranks = ranks
            plan.add(
                "grad_spike",
                "warning",
                ranks=list(ranks),
                grad_norm=norm,
                level=level,
                factor=cfg.grad_spike_factor,
                clipped=clipped,
            )
        else:
            self._gnorm.push(norm)
        self._loss.push(loss)
        self._bad_streak = self._overflow_streak = 0
        return plan

    def _note_warning(self) -> None:
        if self._incident is None:
            self._incident = self._now
        self._healthy_since_warning = 0

    # -- sync-free mode ---------------------------------------------------------------------

    def _step_on_device(
        self, step: int, loss: torch.Tensor, norm: torch.Tensor, hook_bad: torch.Tensor | None
    ) -> StepResult:
        """Decide on the device (non-finite, or loss >= factor x the last read-back level)."""
        cfg = self.config
        table = _dist.device_stats(self.world, loss, norm, hook_bad)
        ok = torch.isfinite(table[:, :2]).all()
        level = self._loss.level()
        if level is not None:
            ok = ok & (table[:, 0].mean() < cfg.spike_factor * level)
        if cfg.clip_norm is not None:
            clip_grads_with_norm_(self._params, cfg.clip_norm, norm, foreach=True)
        assert self._masked is not None
        self._masked.step(ok)
        self._pending.append((step, torch.cat([table.reshape(-1), ok.reshape(1).to(table.dtype)])))
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
        for step, row in zip(steps, rows, strict=True):
            self._now = step
            table = _dist.table_from_rows([row[3 * r : 3 * r + 3] for r in range(self.world.size)])
            plan, loss, norm = self._replay(table, ok=row[-1] > 0)
            if plan.escalate and not escalated:
                self._escalate(step, plan)
                escalated, action = True, plan.action
            self._record(step, plan, loss, norm, None, None, at=self.step_count)
            kinds += [e["kind"] for e in plan.events]
            ranks.update(plan.ranks)
        result = StepResult(
            steps[-1],
            action if escalated else Action.DEFERRED,
            loss,
            norm,
            self.lr,
            tuple(kinds),
            tuple(sorted(ranks)),
        )
        if result.action is Action.STOP and self.config.raise_on_stop:
            raise TrainingStopped(self._stop_message)
        return result

    def _replay(self, table: _dist.RankTable, ok: bool) -> tuple[_Plan, float, float]:
        """Host bookkeeping for a step the device already decided."""
        finite = [v for v in table.losses if math.isfinite(v)]
        loss = sum(finite) / len(finite) if finite else math.nan
        norm = math.nan if any(map(math.isnan, table.norms)) else max(table.norms)
        if ok:
            return self._healthy_plan(self._now, loss, norm, table), loss, norm
        started = table.ranks_with(_dist.BIT_LOSS | _dist.BIT_LOCAL_GRAD)
        if table.ranks_with(_dist.BIT_LOSS | _dist.BIT_GRAD):
            ranks = started or table.ranks_with(_dist.BIT_GRAD)
            return self._bad_plan("nonfinite", ranks, loss=loss, grad_norm=norm), loss, norm
        level = self._loss.level() or math.nan
        ranks = tuple(
            r for r, v in enumerate(table.losses) if v >= self.config.spike_factor * level
        )
        plan = self._bad_plan(
            "loss_spike", ranks, loss=loss, level=level, factor=self.config.spike_factor
        )
        return plan, loss, norm

    # -- applying decisions ----------------------------------------------------------------

    def _apply(self, plan: _Plan, local_norm: torch.Tensor, max_norm: float) -> None:
        if plan.action.stepped and self.config.clip_norm is not None:
            clip_grads_with_norm_(self._params, self.config.clip_norm, local_norm, foreach=True)
        if self.scaler is None:
            if plan.action.stepped:
                self.optimizer.step()
            return
        if plan.action.stepped:
            self.scaler.step(self.optimizer)
        # Not scaler.step on an overflow: a rank whose own gradients were finite (no DDP) would
        # step alone.  update() must follow unscale_ every step; it lowers the scale on Inf/NaN.
        self.scaler.update()
        if plan.action is Action.SCALER_SKIP:
            self._check_scale(plan)

    def _check_scale(self, plan: _Plan) -> None:
        scale = float(self.scaler.get_scale())
        plan.events[-1]["scale"] = scale
        cfg = self.config
        if self._overflow_streak >= cfg.max_scaler_skips or scale < cfg.min_scale:
            self._note_warning()
            plan.add("scaler_collapse", "error", scale=scale, streak=self._overflow_streak)
            plan.escalate = True

    def _escalate(self, step: int, plan: _Plan) -> None:
        cfg = self.config
        self._bad_streak = self._overflow_streak = 0
        if self._rollbacks >= cfg.max_rollbacks:
            self._stop(step, plan)
            return
        self._rollbacks += 1
        snap = self._snaps.pick(before=self._incident)
        new_scale = self._lr_scale * cfg.lr_factor
        if snap is not None:
            state = snap.load()
            self._restore(state)
            plan.action = Action.ROLLBACK
            plan.add("rollback", "error", to_step=snap.step, where=str(snap.path or "memory"))
        self._set_lr_scale(new_scale)
        plan.add("lr_reduced", "warning", lr=self.lr, lr_scale=new_scale)
        self._skip_pending = cfg.skip_after_rollback
        self._incident = None
        self._healthy_since_cut = 0

    def _stop(self, step: int, plan: _Plan) -> None:
        plan.action = Action.STOP
        msg = (
            f"datacheck guard stopped training at step {step}: {self._rollbacks} rollback(s) "
            f"did not recover the run ({plan.events[0]['kind']} on rank(s) {list(plan.ranks)}); "
            f"last good state: {self._snaps.location}. Restart from it with a lower learning "
            f"rate, or inspect the data before step {step}"
            + (f" (events in {self._log_path})." if self._log_path else ".")
        )
        plan.add("stop", "error", message=msg)
        self._stop_message = msg

    # -- good states and the learning rate -------------------------------------------------

    def _after_healthy(self, at: int, plan: _Plan) -> None:
        cfg = self.config
        self._healthy_since_warning += 1
        self._healthy_since_cut += 1
        self._good_since_snapshot += 1
        if self._healthy_since_warning >= cfg.quiet_steps:
            self._incident = None
        if (
            cfg.lr_restore_after
            and self._lr_scale < 1.0
            and self._healthy_since_cut >= cfg.lr_restore_after
        ):
            self._set_lr_scale(1.0)
            plan.add("lr_restored", "info", lr=self.lr)
        quiet = self._incident is None
        if cfg.checkpoint_every and quiet and self._good_since_snapshot >= cfg.checkpoint_every:
            snap = self._snaps.save(at, self._state())
            self._good_since_snapshot = self._rollbacks = 0
            plan.add("checkpoint", "info", at_step=snap.step, where=str(snap.path or "memory"))

    def _state(self) -> dict[str, Any]:
        return {
            "data_position": self.step_count,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": capture_rng(),
            "guard": {
                "loss": list(self._loss.values),
                "grad_norm": list(self._gnorm.values),
                "lr_scale": self._lr_scale,
            },
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        restore_rng(state["rng"])
        guard = state["guard"]
        self._loss.values = deque(guard["loss"], maxlen=self._loss.values.maxlen)
        self._gnorm.values = deque(guard["grad_norm"], maxlen=self._gnorm.values.maxlen)
        self._lr_scale = float(guard["lr_scale"])  # the restored LRs carry this scale

    def _set_lr_scale(self, scale: float) -> None:
        ratio = scale / self._lr_scale
        for group in self.optimizer.param_groups:
            group["lr"] = group["lr"] * ratio
        if self.scheduler is not None and hasattr(self.scheduler, "base_lrs"):
            self.scheduler.base_lrs = [lr * ratio for lr in self.scheduler.base_lrs]
        self._lr_scale = scale

    @property
    def lr(self) -> float:
        """Learning rate of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"])

    # -- results and the log ---------------------------------------------------------------

    def _finish(
        self,
        step: int,
        plan: _Plan,
        loss: float,
        norm: float,
        indices: Sequence[int] | None,
        sample_losses: torch.Tensor | None,
    ) -> StepResult:
        self._record(step, plan, loss, norm, indices, sample_losses, at=step + 1)
        result = StepResult(
            step,
            plan.action,
            loss,
            norm,
            self.lr,
            tuple(e["kind"] for e in plan.events),
            plan.ranks,
        )
        if plan.action is Action.STOP and self.config.raise_on_stop:
            raise TrainingStopped(self._stop_message)
        return result

    def _record(
        self,
        step: int,
        plan: _Plan,
        loss: float,
        norm: float,
        indices: Sequence[int] | None,
        sample_losses: torch.Tensor | None,
        at: int,
    ) -> None:
        """Snapshot bookkeeping and the log lines of one step (``at``: the data position now)."""
        if plan.action.stepped:
            self._after_healthy(at, plan)
        bad = [e for e in plan.events if e["severity"] != "info"]
        if bad and (indices is not None or sample_losses is not None):
            bad[0].update(
                name_samples(indices, sample_losses, self._loss.level(), self.config.spike_factor)
            )
            if self._quarantine is not None and bad[0].get("samples"):
                self._quarantine.write(quarantine_records(bad[0]["samples"], step, self.world.rank))
        for event in plan.events:
            self._write(
                {
                    "step": step,
                    "rank": self.world.rank,
                    "action": plan.action.value,
                    "loss": loss,
                    "grad_norm": norm,
                    "lr": self.lr,
                    **event,
                    "hosts": [self.world.hosts[r] for r in event.get("ranks", [])],
                }
            )
        every = self.config.log_every
        if every and step % every == 0:
            self._write(
                {
                    "step": step,
                    "rank": self.world.rank,
                    "kind": "step",
                    "action": plan.action.value,
                    "loss": loss,
                    "grad_norm": norm,
                    "lr": self.lr,
                }
            )

    def _write(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            self._log.write(record)

    def close(self) -> None:
        """Close the event log and the quarantine file."""
        if self._log is not None:
            self._log.close()
        if self._quarantine is not None:
            self._quarantine.close()

    def __repr__(self) -> str:
        return f"TrainingGuard(step={self.step_count}, rank={self.world.rank}/{self.world.size}, {asdict(self.config)})"
