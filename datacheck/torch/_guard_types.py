"""The guard's public value types: its config, its actions, a step's result, its stop error."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from datacheck.checks._spike import GRAD_NORM, LOSS, SpikeConfig
from datacheck.errors import DatacheckError, UsageError
from datacheck.torch._identity import SampleKey

__all__ = [
    "DIVERGENCE_EVENTS",
    "Action",
    "ExcludingLoader",
    "GuardConfig",
    "StepResult",
    "TrainingStopped",
]

DIVERGENCE_EVENTS = frozenset({"nonfinite", "loss_spike", "scaler_collapse", "rollback", "stop"})
"""Event kinds that mean the run is in trouble (``grad_spike`` is a warning only)."""


class TrainingStopped(DatacheckError):
    """The guard gave up: the weights are non-finite and no snapshot recovers them."""


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
    """Restored the last good snapshot (and, when it did not help before, cut the LR)."""
    DEFERRED = "deferred"
    """Sync-free mode: decided on the device; the events are read back every ``sync_every`` steps."""
    STOP = "stop"
    """Gave up: the weights are non-finite and no snapshot brings back finite ones (raised as
    :class:`TrainingStopped` unless ``raise_on_stop=False``)."""

    @property
    def stepped(self) -> bool:
        """Whether the weights were updated this step."""
        return self in (Action.STEP, Action.CLIP, Action.DROP_RANKS)


GUARD_GRAD = replace(GRAD_NORM, min_readings=32, min_spread=32)
"""The grad-norm detector of ``datacheck logs`` with a warm-up of 32 steps: a young run's
gradient norm rises as it leaves its initialisation (5x within the first steps is normal), and
a warning it raises then says nothing about the data or the weights."""

GUARD_LOSS = replace(LOSS, min_readings=LOSS.min_spread)
"""The loss detector of ``datacheck logs`` judging from its 8th reading on, when the spread
test joins the ratio test.  Offline a short log must be judged from its first readings; online
a young run's batches differ by more than 1.5x (a tiny regression skipped 9 of its first 17
steps and rolled back), and skipping healthy steps costs more than seeing a spike 8 steps late."""


@dataclass(frozen=True, kw_only=True)
class GuardConfig:
    """How the guard detects and responds.  Every field has a safe default (README: "Response
    policy" says why each default is what it is)."""

    clip_norm: float | None = 1.0
    """Clip the total gradient norm to this; ``None`` turns clipping off (detection stays)."""
    loss_spike: SpikeConfig = GUARD_LOSS
    """What a loss spike is: the detector ``datacheck logs`` uses, with its defaults (median and
    MAD over 128 readings, 6 robust sigmas and 1.5x the median), judging from the 8th step."""
    grad_spike: SpikeConfig = GUARD_GRAD
    """What a grad-norm spike is: a warning only (the step is clipped, no rollback), judged
    from the 32nd step on."""
    rollback_after: int = 3
    """Readings in a row above the spike threshold, at ``sharp_rise`` times the level, before
    the guard probes whether the weights are to blame (more in a series that often spikes by
    chance); also the non-finite steps in a row after which the weights are checked."""
    sharp_rise: float = 4.0
    """A loss this many times its level rose sharply: probed after ``rollback_after`` steps."""
    patience: int = 24
    """Readings of an excursion (the loss above its spike threshold most of the time) after
    which the guard probes when the loss is not coming down; also the non-finite steps in a
    row (weights finite, no per-sample evidence) after which it probes."""
    probe_steps: int = 3
    """Batches read on the snapshot under trial (skipped) before the guard decides whether the
    rollback stands (the snapshot does clearly better) or is undone (it does no better)."""
    max_rollbacks: int = 5
    """Confirmed rollbacks in a row whose trouble came back within ``rollback_window`` steps
    before the guard falls back to skip-and-clip (a ``fallback`` warning); a rollback followed
    by ``rollback_window`` healthy steps resets the count."""
    max_skips: int = 100
    """Steps skipped in a row (non-finite batches) after which, and every this many, the log
    says why skipping goes on (``skip_stretch``)."""
    rollback_window: int = 200
    """Stepped steps after a rollback within which new trouble means it did not help."""
    lr_factor: float = 0.25
    """Multiply the learning rate by this at each rollback that did not help (divergence)."""
    lr_restore_after: int | None = 100
    """Restore the full learning rate after this many stepped steps without a rollback
    (``None``: keep it cut).  Trouble within this many steps of a restore makes the cut stick."""
    skip_after_rollback: int = 0
    """Batches to skip after a rollback (the data window that led to the spike)."""
    checkpoint_every: int = 50
    """Stepped steps between good-state snapshots (the first is taken at the first step);
    0 disables snapshots (divergence then only cuts the LR)."""
    confirm_steps: int = 3
    """Healthy steps that must follow a snapshot before it counts as good (a rollback target);
    two bad steps in a row or a grad-norm spike before that discard it, and the next one is
    taken as soon as the run is quiet again.  The update just before a snapshot can be the one
    that did the damage, and momentum carries it over the next steps."""
    keep_checkpoints: int = 2
    """Confirmed snapshots kept; a rollback takes the newest one.  In memory, AdamW costs about
    12 bytes per fp32 parameter per snapshot (one more while a new one waits to be confirmed)."""
    checkpoint_dir: str | None = None
    """Keep snapshots as files here (one per rank); ``None`` keeps them in memory."""
    async_checkpoint: bool = False
    """With ``checkpoint_dir``: write snapshot files on a background thread (the copy to the
    CPU stays synchronous, so the snapshot is consistent)."""
    quiet_steps: int = 10
    """Stepped steps after a rollback or a grad spike before a snapshot is taken again."""
    max_scaler_skips: int = 20
    """Consecutive fp16 overflow skips that count as divergence."""
    min_scale: float = 1.0
    """A GradScaler scale below this counts as a collapsing scale (divergence)."""
    drop_bad_ranks: bool = False
    """With DDP, drop non-finite ranks' gradient shares and step on the healthy ranks' mean."""
    name: str | None = None
    """Written in every log record (``guard``), so guards sharing a log can be told apart."""
    log: str | None = None
    """JSON Lines event log; the rank is put in the name when the world size is above 1."""
    log_every: int = 10
    """Also log loss, grad norm and LR every this many steps (0: events only)."""
    tensorboard: str | None = None
    """Also write scalars and events to this TensorBoard log dir (``rank{r}`` below it when
    the world size is above 1); needs the tensorboard package."""
    quarantine: str | None = None
    """Add the samples named by per-sample evidence (needs ``sample_losses``) to this runtime
    quarantine folder (``check`` = ``nonfinite_loss`` / ``loss_outlier``), read by the loader."""
    sync_every: int = 0
    """0: decide on the host each step (one host read).  N: keep the decision on the device
    (masked update, no host read) and read the records back every N steps; needs no scaler."""
    raise_on_stop: bool = True
    """Raise :class:`TrainingStopped` when giving up (else return ``Action.STOP``)."""

    def __post_init__(self) -> None:
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise UsageError(f"guard config: clip_norm={self.clip_norm!r} must be > 0 or None")
        if not self.sharp_rise > 1.0:
            raise UsageError(f"guard config: sharp_rise={self.sharp_rise!r} must be > 1")
        if not 0.0 < self.lr_factor <= 1.0:
            raise UsageError(f"guard config: lr_factor={self.lr_factor!r} must be in (0, 1]")
        if self.async_checkpoint and self.checkpoint_dir is None:
            raise UsageError("guard config: async_checkpoint=True needs checkpoint_dir=")
        for name in _AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise UsageError(f"guard config: {name}={getattr(self, name)!r} must be >= 1")
        for name in _AT_LEAST_ZERO:
            if getattr(self, name) < 0:
                raise UsageError(f"guard config: {name}={getattr(self, name)!r} must be >= 0")
        if self.lr_restore_after is not None and self.lr_restore_after < 1:
            raise UsageError(
                f"guard config: lr_restore_after={self.lr_restore_after!r} must be >= 1 or None"
            )


_AT_LEAST_ONE = (
    "rollback_after",
    "confirm_steps",
    "max_rollbacks",
    "rollback_window",
    "keep_checkpoints",
    "max_scaler_skips",
    "patience",
    "probe_steps",
    "max_skips",
)
_AT_LEAST_ZERO = (
    "checkpoint_every",
    "quiet_steps",
    "skip_after_rollback",
    "sync_every",
    "log_every",
)


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
    """Effective learning rate of the first parameter group (with the guard's cut)."""
    events: tuple[str, ...] = ()
    """Event kinds logged this step (``grad_spike``, ``nonfinite``, ``rollback``, ...)."""
    ranks: tuple[int, ...] = ()
    """Ranks where the problem started (checked before the gradient all-reduce)."""


class ExcludingLoader(Protocol):
    """What the guard needs from a loader (``GuardedLoader``): its epoch, and a way to keep
    samples out of the rest of the run."""

    epoch: int
    step: int
    """The position in the epoch of the batch last yielded (the manifest's ``step``)."""

    def exclude(self, indices: Iterable[SampleKey]) -> None: ...

    def describe(self, names: Sequence[SampleKey]) -> list[dict[str, Any]]:
        """The quarantine fields naming each sample (index, sample, source, dataset)."""
        ...
