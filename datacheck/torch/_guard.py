"""TrainingGuard: the gradient side of the runtime guard.

``guard.step(loss)`` replaces ``optimizer.step()`` (and ``scaler.step`` / ``scaler.update``);
with gradient accumulation, ``guard.backward(loss)`` per micro-batch, then ``guard.step()``.
Each step it computes one total gradient norm (foreach), shares (loss, norm, flags) with every
rank in one small all-reduce, and runs the same policy on every rank (``_guard_policy``).
Skip-and-clip is the floor; anything beyond it needs evidence (``_guard_trend``):

    healthy, or a loss spike -> step (clipped to ``clip_norm`` when above it)
    grad-norm spike          -> warn, step on clipped gradients
    fp16 overflow            -> the GradScaler skips and lowers its scale (normal)
    NaN/Inf                  -> skip the batch (weights and optimizer untouched); samples
                                with non-finite evidence are quarantined and excluded
    a loss excursion that    -> probe: the newest good snapshot on the next batches; the
    persists                    rollback stands when it does clearly better (divergence), else
                                the live state comes back and the new level is learned
    divergence again         -> roll back and cut the LR; restored after stable steps
    rollbacks that keep not  -> fall back to skip-and-clip (a ``fallback`` warning)
    helping
    non-finite weights that  -> stop with a clear message
    no snapshot recovers

Every action is a line in a JSON Lines log (one file per rank).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm

from datacheck.errors import UsageError
from datacheck.torch import _dist
from datacheck.torch._guard_batches import SameBatch
from datacheck.torch._guard_device import (
    DeviceDecisions,
    Micro,
    check_scalar,
    merge_micro,
    scaled_lr,
)
from datacheck.torch._guard_evidence import SampleEvidence
from datacheck.torch._guard_log import (
    SKIPPED_KINDS,
    EventLog,
    bad_steps,
    guard_quarantine,
)
from datacheck.torch._guard_policy import Plan, Policy
from datacheck.torch._guard_respond import Responses
from datacheck.torch._guard_state import GoodStates
from datacheck.torch._guard_types import (
    Action,
    ExcludingLoader,
    GuardConfig,
    StepResult,
    TrainingStopped,
)
from datacheck.torch._identity import SampleKey
from datacheck.torch._snapshots import SnapshotStore
from datacheck.torch._syncfree import MaskedStep

__all__ = ["Action", "GuardConfig", "StepResult", "TrainingGuard", "TrainingStopped", "bad_steps"]


class TrainingGuard(Responses, DeviceDecisions, GoodStates, SampleEvidence):
    """Guards optimizer steps against NaN/Inf, loss spikes and divergence.

    Example:
        >>> guard = TrainingGuard(model, optimizer, scheduler=sched, log="guard.jsonl")
        >>> loss.backward()
        >>> guard.step(loss)            # instead of optimizer.step()
        >>> sched.step(); optimizer.zero_grad(set_to_none=True)

    Args:
        model: The model (a DDP model gets a communication hook for rank attribution).
        optimizer: The optimizer whose ``step`` the guard calls.
        scaler: A ``torch.amp.GradScaler`` when training in fp16.
        scheduler: The LR scheduler (snapshotted with the rest of the state).
        loader: A ``GuardedLoader``: samples the guard names are excluded from the rest of the
            run, and its epoch goes in the quarantine rows.
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
        loader: ExcludingLoader | None = None,
        config: GuardConfig | None = None,
        process_group: Any = None,
        **options: Any,
    ) -> None:
        if config is not None and options:
            raise UsageError(
                f"TrainingGuard: pass config= or options, not both (got {sorted(options)})"
            )
        self.config = cfg = config if config is not None else GuardConfig(**options)
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.scheduler, self.loader = scheduler, loader
        self.world = _dist.World.detect(process_group)
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._hook = self._maybe_install_hook()
        tag = (f"-{cfg.name}" if cfg.name else "") + (
            f".rank{self.world.rank}" if self.world.size > 1 else ""
        )
        self._snaps = SnapshotStore(
            cfg.keep_checkpoints, cfg.checkpoint_dir, tag, cfg.async_checkpoint
        )
        self._policy = Policy(cfg)
        self._log_path = (
            _dist.rank_path(cfg.log, self.world.rank, self.world.size) if cfg.log else None
        )
        self._log = self._open_log()
        self._quarantine = (
            guard_quarantine(cfg.quarantine, self.world.rank) if cfg.quarantine else None
        )
        self.step_count = 0
        self._skipped: set[int] = set()
        self._skip_pending = 0
        self._stop_message: str | None = None
        self._threshold: float | None = None
        self._micro: list[Micro] = []
        self._epoch, self._batch = 0, -1
        self._masked = self._maybe_masked()
        self._pending: list[tuple[int, torch.Tensor]] = []
        self._device_probe = 0
        self._aside: dict[str, Any] | None = None
        """The live state kept aside while a probe tries a snapshot."""
        self._batches = SameBatch(enabled=self.world.size == 1)

    def _open_log(self) -> EventLog | None:
        tb_dir = self.config.tensorboard
        if tb_dir is not None and self.world.size > 1:
            tb_dir = str(Path(tb_dir) / f"rank{self.world.rank}")
        if self._log_path is None and tb_dir is None:
            return None
        return EventLog(self._log_path, Path(tb_dir) if tb_dir else None)

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
                "TrainingGuard: drop_bad_ranks=True needs a DistributedDataParallel model in a "
                "world of 2+ ranks"
            )
        return None

    # -- the step --------------------------------------------------------------------------

    def backward(
        self,
        loss: torch.Tensor,
        *,
        indices: Sequence[SampleKey] | None = None,
        sample_losses: torch.Tensor | None = None,
    ) -> None:
        """Backward one micro-batch (through the GradScaler when there is one) and keep its loss;
        ``step()`` then checks every micro-batch's loss.  With DDP, wrap all but the last
        micro-batch in ``model.no_sync()`` as usual.
        """
        check_scalar(loss, "backward")
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        self._micro.append((loss.detach(), indices, sample_losses))
        self._next_batch()

    def step(
        self,
        loss: torch.Tensor | None = None,
        *,
        indices: Sequence[SampleKey] | None = None,
        sample_losses: torch.Tensor | None = None,
    ) -> StepResult:
        """Check this step and step the optimizer (or not); returns what was done.

        Args:
            loss: This rank's loss for the step (after ``backward``); leave it out after
                :meth:`backward` calls (gradient accumulation).
            indices: The names of this rank's batch's samples, attached to events: dataset
                indices (ints), or keys (strings, e.g. WebDataset's ``__key__``; kept as text)
                or a stream loader's ``batch_indices``.
            sample_losses: Per-sample losses of this rank's batch, the evidence that names (and
                quarantines) single samples.

        Raises:
            TrainingStopped: when rollbacks did not recover the run (``raise_on_stop``).
        """
        loss, indices, sample_losses = self._step_inputs(loss, indices, sample_losses)
        step, self.step_count = self.step_count, self.step_count + 1
        if self._stop_message is not None:
            return self._finish(step, Plan(Action.STOP), math.nan, math.nan)
        if self._skip_pending > 0:
            self._skip_pending -= 1
            plan = Plan(Action.SKIP)
            plan.add("data_skip", "info", left=self._skip_pending)
            return self._finish(step, plan, math.nan, math.nan)
        if not len(self._snaps) and self.config.checkpoint_every:
            self._snaps.save(step, self._state())  # always a state to roll back to: this one
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = get_total_norm(grads, foreach=True) if grads else torch.zeros((), device=loss.device)
        hook_bad = self._hook.take() if self._hook is not None else None
        if self._masked is not None:
            return self._step_on_device(step, loss, norm, hook_bad)
        table = _dist.share_stats(self.world, loss, norm, hook_bad)
        repeated = self._batches.repeated(indices, sample_losses)
        plan, mean_loss, max_norm = self._decide(step, table, repeated)
        if plan.action is Action.SKIP and plan.events and plan.events[0]["kind"] == "nonfinite":
            self._evidence(step, plan, indices, sample_losses)
        self._apply(plan, norm)
        if plan.escalate:
            self._escalate(step, plan)
        return self._finish(step, plan, mean_loss, max_norm)

    def _step_inputs(
        self,
        loss: torch.Tensor | None,
        indices: Sequence[SampleKey] | None,
        sample_losses: torch.Tensor | None,
    ) -> tuple[torch.Tensor, Sequence[SampleKey] | None, torch.Tensor | None]:
        """The step's loss and evidence: as given, or gathered from the micro-batches."""
        if loss is not None:
            if self._micro:
                raise UsageError(
                    "TrainingGuard.step: after guard.backward(...) call guard.step() without a "
                    "loss (the micro-batches' losses are already recorded)"
                )
            check_scalar(loss, "step")
            self._next_batch()
            return loss, indices, sample_losses
        if not self._micro:
            raise UsageError(
                "TrainingGuard.step: pass the loss, or call guard.backward(loss) per micro-batch"
            )
        micro, self._micro = self._micro, []
        return merge_micro(micro)

    def _next_batch(self) -> None:
        """Track the batch's (epoch, position) as the loader's manifest rows count them."""
        if self.loader is not None:
            self._epoch, self._batch = self.loader.epoch, self.loader.step
        else:
            self._batch += 1

    def _decide(
        self, step: int, table: _dist.RankTable, repeated: bool = False
    ) -> tuple[Plan, float, float]:
        cfg, policy = self.config, self._policy
        started = table.ranks_with(_dist.BIT_LOSS | _dist.BIT_LOCAL_GRAD)
        finite = [v for v in table.losses if math.isfinite(v)]
        mean_loss = sum(finite) / len(finite) if finite else math.nan
        max_norm = math.nan if any(map(math.isnan, table.norms)) else max(table.norms)
        loss_bad = bool(table.ranks_with(_dist.BIT_LOSS))
        grad_bad = bool(table.ranks_with(_dist.BIT_GRAD))
        self._threshold = policy.threshold
        if policy.probing:  # a batch read on the snapshot under trial: no update
            return policy.probe_step(math.nan if loss_bad else mean_loss), mean_loss, max_norm
        if self._scaling and grad_bad and not loss_bad:
            return policy.overflow(), mean_loss, max_norm
        if started and not grad_bad and cfg.drop_bad_ranks:
            plan = policy.finite(step, Action.DROP_RANKS, mean_loss, max_norm, table.norms)
            plan.ranks = started
            plan.add("nonfinite", "warning", ranks=list(started), dropped=True)
            return plan, mean_loss, max_norm
        if loss_bad or grad_bad:
            ranks = started or table.ranks_with(_dist.BIT_GRAD)
            plan = policy.nonfinite(step, ranks, loss=mean_loss, grad_norm=max_norm)
            return plan, mean_loss, max_norm
        clipped = cfg.clip_norm is not None and max_norm > cfg.clip_norm
        action = Action.CLIP if clipped else Action.STEP
        plan = policy.finite(step, action, mean_loss, max_norm, table.norms, repeated)
        if self._threshold is not None and mean_loss >= self._threshold:
            plan.ranks = tuple(r for r, v in enumerate(table.losses) if v >= self._threshold)
            for event in plan.events:
                if event["kind"] == "loss_spike":
                    event["ranks"] = list(plan.ranks)
        return plan, mean_loss, max_norm

    # -- applying decisions ----------------------------------------------------------------

    def _apply(self, plan: Plan, local_norm: torch.Tensor) -> None:
        if plan.action.stepped and self.config.clip_norm is not None:
            clip_grads_with_norm_(self._params, self.config.clip_norm, local_norm, foreach=True)
        with scaled_lr(self.optimizer, self._policy.lr_scale):
            if self.scaler is None:
                if plan.action.stepped:
                    self.optimizer.step()
                return
            if plan.action.stepped:
                self.scaler.step(self.optimizer)
        # Not scaler.step on an overflow: a rank whose own gradients were finite (no DDP) would
        # step alone.  update() must follow unscale_ every step; it lowers the scale on Inf/NaN,
        # which is right for an fp16 overflow but not for a batch skipped for its loss (NaN/Inf
        # or a spike in the forward pass): the scale is not to blame, and halving it at every
        # bad batch underflows the gradients of the good ones.
        keep = plan.action is Action.SKIP
        self.scaler.update(float(self.scaler.get_scale()) if keep else None)
        if plan.action is Action.SCALER_SKIP:
            self._policy.scale_check(plan, float(self.scaler.get_scale()))

    # -- learning rate -------------------------------------------------------------

    @property
    def lrs(self) -> list[float]:
        """Effective learning rate of every parameter group (with the guard's cut)."""
        scale = self._policy.lr_scale
        return [float(g["lr"]) * scale for g in self.optimizer.param_groups]

    @property
    def lr(self) -> float:
        """Effective learning rate of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"]) * self._policy.lr_scale

    @property
    def lr_scale(self) -> float:
        """The guard's multiplier on every LR (1.0 unless divergence cut it)."""
        return self._policy.lr_scale

    @property
    def skipped_steps(self) -> frozenset[int]:
        """Steps skipped as NaN/Inf or loss spikes (as :func:`bad_steps` reads from the log)."""
        return frozenset(self._skipped)

    # -- results and the log ---------------------------------------------------------------

    def _finish(self, step: int, plan: Plan, loss: float, norm: float) -> StepResult:
        self._record(step, plan, loss, norm, at=step + 1)
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

    def _record(self, step: int, plan: Plan, loss: float, norm: float, at: int) -> None:
        """Snapshot and LR bookkeeping and the log lines of one step (``at``: the next step)."""
        self._good_states(plan, plan.action.stepped, at, current=at == step + 1)
        if plan.action is Action.SKIP and plan.events and plan.events[0]["kind"] in SKIPPED_KINDS:
            self._skipped.add(step)
        base = {"step": step, "rank": self.world.rank, "action": plan.action.value}
        values = {"loss": loss, "grad_norm": norm, "lr": self.lr, "lrs": self.lrs}
        for event in plan.events:
            hosts = [self.world.hosts[r] for r in event.get("ranks", [])]
            self._write({**base, **values, **event, "hosts": hosts})
        every = self.config.log_every
        if every and step % every == 0:
            self._write({**base, "kind": "step", **values})

    def _write(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            if self.config.name is not None:
                record = {"guard": self.config.name, **record}
            self._log.write(record)

    def close(self) -> None:
        """Close the event log and the quarantine file; wait for a snapshot being written."""
        self._snaps.wait()
        if self._log is not None:
            self._log.close()
        if self._quarantine is not None:
            self._quarantine.close()

    def __repr__(self) -> str:
        return (
            f"TrainingGuard(step={self.step_count}, rank={self.world.rank}/{self.world.size}, "
            f"{asdict(self.config)})"
        )
