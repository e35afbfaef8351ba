"""The guard's public value types: its config, its actions, a step's result, its stop error."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from datacheck.errors import DatacheckError, UsageError

__all__ = ["DIVERGENCE_EVENTS", "Action", "GuardConfig", "StepResult", "TrainingStopped"]

DIVERGENCE_EVENTS = frozenset({"nonfinite", "loss_spike", "scaler_collapse", "rollback", "stop"})
"""Event kinds that mean the run is in trouble (``grad_spike`` is a warning only)."""


class TrainingStopped(DatacheckError):
    """The guard gave up: rollbacks did not recover the run."""


class Action(str, enum.Enum):
    """What ``TrainingGuard.step`` did."""

    STEP = "step"
    """The optimizer stepped; the gradient norm was within ``clip_norm``."""
    CLIP = "clip"
    """The optimizer stepped on gradients clipped to ``clip_norm``."""
    DROP_RANKS = "drop_ranks"
    """The optimizer stepped on the healthy ranks' average; bad ranks' shares were dropped."""
    SCALER_SKIP = "scaler_skip"
    """fp16 overflow: the GradScaler skipped the step and lowered its scale (normal)."""
    SKIP = "skip"
    """Skipped: weights and optimizer state untouched."""
    ROLLBACK = "rollback"
    """Restored the last good snapshot and lowered the learning rate."""
    DEFERRED = "deferred"
    """Sync-free mode: decided on the device; the events are read back every ``sync_every`` steps."""
    STOP = "stop"
    """Gave up (raised :class:`TrainingStopped` unless ``raise_on_stop=False``)."""

    @property
    def stepped(self) -> bool:
        """Whether the weights were updated this step."""
        return self in (Action.STEP, Action.CLIP, Action.DROP_RANKS)


@dataclass(frozen=True, kw_only=True)
class GuardConfig:
    """How the guard detects and responds.  Every field has a safe default."""

    clip_norm: float | None = 1.0
    """Clip the total gradient norm to this; ``None`` turns clipping off (detection stays)."""
    spike_factor: float = 10.0
    """A loss at least this many times its recent median is a loss spike."""
    grad_spike_factor: float = 10.0
    """A grad norm at least this many times its recent median is a (warning) grad spike."""
    loss_window: int = 100
    """Finite losses kept for the running median."""
    grad_window: int = 100
    """Finite grad norms kept for the running median."""
    warmup: int = 20
    """Finite values needed in a window before spikes are judged against it."""
    rollback_after: int = 3
    """Consecutive bad (skipped) steps that trigger a rollback."""
    max_rollbacks: int = 3
    """Rollbacks without a new good snapshot in between before the guard stops."""
    lr_factor: float = 0.5
    """Multiply the learning rate by this at each rollback."""
    lr_restore_after: int | None = None
    """Restore the original learning rate after this many healthy steps (``None``: keep it low)."""
    skip_after_rollback: int = 0
    """Batches to skip after a rollback (the data window that led to the spike)."""
    checkpoint_every: int = 50
    """Healthy steps between good-state snapshots; 0 disables snapshots (LR cuts only)."""
    keep_checkpoints: int = 2
    """Snapshots kept; a rollback takes the newest one from before the trouble began."""
    checkpoint_dir: str | None = None
    """Keep snapshots as files here (one per rank); ``None`` keeps them in memory."""
    quiet_steps: int = 10
    """Healthy steps after a warning before a snapshot counts as good again."""
    max_scaler_skips: int = 20
    """Consecutive fp16 overflow skips that count as divergence."""
    min_scale: float = 1.0
    """A GradScaler scale below this counts as a collapsing scale (divergence)."""
    drop_bad_ranks: bool = False
    """With DDP, drop non-finite ranks' gradient shares and step on the healthy ranks' mean."""
    log: str | None = None
    """JSON Lines event log; the rank is put in the name when the world size is above 1."""
    log_every: int = 10
    """Also log loss, grad norm and LR every this many steps (0: events only)."""
    tensorboard: str | None = None
    """Also write scalars and events to this TensorBoard log dir (``rank{r}`` below it when
    the world size is above 1); needs the tensorboard package."""
    quarantine: str | None = None
    """Add the samples named behind a NaN or spike (needs ``sample_losses``) to this runtime
    quarantine folder (``check`` = ``nonfinite_loss`` / ``loss_spike``), read by the loader."""
    sync_every: int = 0
    """0: decide on the host each step (one host read).  N: keep the decision on the device
    (masked update, no host read) and read the records back every N steps; needs no scaler."""
    raise_on_stop: bool = True
    """Raise :class:`TrainingStopped` when giving up (else return ``Action.STOP``)."""

    def __post_init__(self) -> None:
        positive = {"spike_factor": self.spike_factor, "grad_spike_factor": self.grad_spike_factor}
        for name, value in positive.items():
            if not value > 1.0:
                raise UsageError(f"guard config: {name}={value!r} must be > 1 (e.g. 10.0)")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise UsageError(f"guard config: clip_norm={self.clip_norm!r} must be > 0 or None")
        if not 0.0 < self.lr_factor <= 1.0:
            raise UsageError(f"guard config: lr_factor={self.lr_factor!r} must be in (0, 1]")
        for name in (
            "loss_window",
            "grad_window",
            "rollback_after",
            "max_rollbacks",
            "keep_checkpoints",
            "max_scaler_skips",
        ):
            if getattr(self, name) < 1:
                raise UsageError(f"guard config: {name}={getattr(self, name)!r} must be >= 1")
        for name in (
            "warmup",
            "checkpoint_every",
            "quiet_steps",
            "skip_after_rollback",
            "sync_every",
            "log_every",
        ):
            if getattr(self, name) < 0:
                raise UsageError(f"guard config: {name}={getattr(self, name)!r} must be >= 0")


@dataclass(frozen=True)
class StepResult:
    """What one ``guard.step`` call decided and saw (identical on every rank)."""

    step: int
    action: Action
    loss: float
    """Mean finite loss over ranks (NaN when no rank had a finite loss)."""
    grad_norm: float
    """Largest total gradient norm over ranks, before clipping."""
    lr: float
    """Learning rate of the first parameter group after this step."""
    events: tuple[str, ...] = ()
    """Event kinds logged this step (``grad_spike``, ``nonfinite``, ``rollback``, ...)."""
    ranks: tuple[int, ...] = ()
    """Ranks where the problem started (checked before the gradient all-reduce)."""
