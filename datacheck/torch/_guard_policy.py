"""The guard's response policy: what a step's numbers mean and what to do about them.

Pure host bookkeeping (no torch): every rank feeds it the same all-reduced table and so takes
the same decisions.  The policy tells bad data from divergence:

    bad data      an isolated NaN/Inf or loss spike; a bad step with per-sample evidence (a
                  non-finite or outlying per-sample loss); bad steps right after a rollback
                  (the weights are the good snapshot, so the batches are to blame)
                  -> skip the batch; never an LR cut
    divergence    ``rollback_after`` bad steps in a row after the weights moved, grad-norm
                  spikes on ``rollback_after`` stepped steps in a row, a collapsing fp16 scale
                  -> roll back to the last good snapshot; when an earlier rollback did not
                  help (trouble again within ``rollback_window`` steps), also cut the LR
    no way out    ``max_rollbacks`` rollbacks that did not help -> stop

The LR cut is restored after ``lr_restore_after`` stepped steps without a rollback; trouble
soon after a restore puts the last cut back for good.  A new snapshot waits as a candidate
until ``confirm_steps`` healthy steps followed it; two bad steps in a row (without per-sample
evidence), a grad-norm spike or a rollback first discard it.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from datacheck.checks._spike import SpikeDetector
from datacheck.torch._guard_types import Action, GuardConfig

__all__ = ["AfterStep", "Cause", "Escalation", "Plan", "Policy"]


class Cause(str, enum.Enum):
    """What the policy blames for a bad step (written in the event as ``cause``)."""

    DATA = "data"
    DIVERGENCE = "divergence"


@dataclass
class Plan:
    """The decision for one step, built from the shared rank table."""

    action: Action
    events: list[dict[str, Any]] = field(default_factory=list)
    ranks: tuple[int, ...] = ()
    escalate: bool = False

    def add(self, kind: str, severity: str, **values: Any) -> None:
        self.events.append({"kind": kind, "severity": severity, **values})


@dataclass(frozen=True)
class Escalation:
    """What a divergence calls for: roll back, cut the LR (to ``lr_scale``), or stop."""

    stop: bool
    rollback: bool
    lr_scale: float
    unhelpful: int
    """Rollbacks in a row that did not help, this one included."""


@dataclass(frozen=True)
class AfterStep:
    """Bookkeeping due after a stepped step."""

    commit: bool
    """The candidate snapshot was confirmed by enough healthy steps: commit it."""
    snapshot: bool
    """Take a new candidate snapshot of the state now."""
    restore: bool
    """Restore the full learning rate now."""


class Policy:
    """Counters and detectors behind every decision; ``state()`` / ``load()`` for resume."""

    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.loss = SpikeDetector(cfg.loss_spike)
        """The loss detector ``datacheck logs`` uses: spikes never enter its window."""
        self.gnorm = SpikeDetector(cfg.grad_spike)
        self.bad_streak = 0
        """Bad steps in a row without per-sample evidence."""
        self.grad_streak = 0
        self.overflow_streak = 0
        self.incident: int | None = None
        """First step of the current bad streak (a rollback goes to a snapshot before it)."""
        self.since_rollback: int | None = None
        """Stepped steps since the last rollback (None: none yet)."""
        self.unhelpful = 0
        self.rollbacks = 0
        self.since_warning = cfg.quiet_steps
        self.since_snapshot = 0
        self.confirming: int | None = None
        """Healthy steps since the candidate snapshot was taken (None: no candidate)."""
        self.lr_scale = 1.0
        self.since_cut = 0
        self.since_restore: int | None = None
        self.restored_from = 1.0
        self.sticky = cfg.lr_restore_after is None
        self.start: list[float] = []
        """The first healthy losses of the run (``start_level``)."""

    @property
    def start_level(self) -> float | None:
        """The run's start: the median loss of its first ``min_spread`` healthy steps (about an
        untrained model's guess); None until then."""
        if len(self.start) < self.cfg.loss_spike.min_spread:
            return None
        return statistics.median(self.start)

    @property
    def settled(self) -> bool:
        """No bad streak, no recent warning, no rollback within ``rollback_window`` steps: a
        loss spike now is one batch's doing, so per-sample outliers may name its samples.  While
        the run recovers from divergence the optimizer explains a spike; a sample that merely
        stands out (a hard one, on a model near zero loss) is no evidence then."""
        cfg = self.cfg
        recovering = self.since_rollback is not None and self.since_rollback <= cfg.rollback_window
        return self.bad_streak == 0 and self.since_warning >= cfg.quiet_steps and not recovering

    # -- classifying a step -------------------------------------------------------------

    def bad(self, step: int, kind: str, ranks: tuple[int, ...], **values: Any) -> Plan:
        """A skipped step (NaN/Inf or loss spike); :meth:`blame` decides what it means."""
        if kind == "loss_spike":
            self.loss.update(values["loss"], step=step)  # the episode, judged as it goes on
        plan = Plan(Action.SKIP, ranks=ranks)
        plan.add(kind, "error", ranks=list(ranks), **values)
        self.grad_streak = 0
        if self.incident is None:
            self.incident = step
        return plan

    def blame(self, plan: Plan, evidence: bool) -> None:
        """Per-sample evidence, or a streak on unmoved weights, is data; a streak is divergence."""
        event = plan.events[0]
        if evidence:
            event["cause"] = Cause.DATA.value
            return
        self.bad_streak += 1
        if self.bad_streak > 1:  # a second bad step in a row: the candidate is not confirmed
            self.discard()  # (one isolated bad batch says nothing about the weights)
        event["streak"] = self.bad_streak
        moved = self.since_rollback is None or self.since_rollback > 0
        if self.bad_streak >= self.cfg.rollback_after and moved:
            event["cause"] = Cause.DIVERGENCE.value
            plan.escalate = True
        else:
            event["cause"] = Cause.DATA.value

    def overflow(self) -> Plan:
        """fp16 overflow: the GradScaler skips and lowers its scale (normal, not divergence)."""
        self.overflow_streak += 1
        plan = Plan(Action.SCALER_SKIP)
        plan.add("scaler_overflow", "info", streak=self.overflow_streak)
        return plan

    def scale_check(self, plan: Plan, scale: float) -> None:
        """A scale that keeps falling is divergence in fp16."""
        plan.events[-1]["scale"] = scale
        if self.overflow_streak >= self.cfg.max_scaler_skips or scale < self.cfg.min_scale:
            plan.add("scaler_collapse", "error", scale=scale, streak=self.overflow_streak)
            plan.escalate = True

    def healthy(
        self, step: int, action: Action, loss: float, norm: float, norms: tuple[float, ...]
    ) -> Plan:
        """A step that will update the weights; a grad-norm spike is a warning (clipped)."""
        plan = Plan(action)
        bound = self.gnorm.threshold
        verdict = self.gnorm.update(norm, step=step)
        level = verdict.level
        if verdict.above:
            self.discard()
            self.grad_streak += 1
            self.since_warning = 0
            plan.ranks = tuple(r for r, v in enumerate(norms) if bound is not None and v >= bound)
            plan.add(
                "grad_spike",
                "warning",
                ranks=list(plan.ranks),
                grad_norm=norm,
                level=level,
                streak=self.grad_streak,
                clipped=action is Action.CLIP,
            )
            if self.grad_streak >= self.cfg.rollback_after:
                plan.events[-1]["cause"] = Cause.DIVERGENCE.value
                plan.escalate = True
        else:
            self.grad_streak = 0
            if self.confirming is not None:
                self.confirming += 1
        if len(self.start) < self.cfg.loss_spike.min_spread and math.isfinite(loss):
            self.start.append(loss)
        self.loss.update(loss, step=step)
        self.bad_streak = self.overflow_streak = 0
        self.incident = None
        return plan

    # -- responding ---------------------------------------------------------------------

    def escalation(self, have_snapshot: bool, kind: str) -> Escalation:
        """Divergence: roll back; cut the LR when a recent rollback did not help; or stop."""
        cfg = self.cfg
        repeat = self.since_rollback is not None and self.since_rollback <= cfg.rollback_window
        unhelpful = self.unhelpful + 1 if repeat else 0
        if unhelpful > cfg.max_rollbacks:
            return Escalation(True, False, self.lr_scale, unhelpful)
        # A first rollback is a probe: bad data behind the streak stays bad on the good weights
        # (no LR cut then); optimisation signals and repeats cut the LR.
        cut = repeat or not have_snapshot or kind in ("grad_spike", "scaler_collapse")
        scale = self.lr_scale
        if cut:
            recently_restored = (
                self.since_restore is not None
                and cfg.lr_restore_after is not None
                and self.since_restore <= cfg.lr_restore_after
            )
            if recently_restored:  # the restored LR diverged: go back to the cut that worked
                scale, self.sticky = self.restored_from, True
            else:
                scale = self.lr_scale * cfg.lr_factor
        return Escalation(False, have_snapshot, scale, unhelpful)

    def escalated(self, esc: Escalation) -> None:
        """Bookkeeping after a rollback or LR cut was applied."""
        self.unhelpful = esc.unhelpful
        self.rollbacks += esc.rollback
        if esc.lr_scale != self.lr_scale:
            self.since_cut = 0
            self.since_restore = None
        self.lr_scale = esc.lr_scale
        self.since_rollback = 0
        self.bad_streak = self.grad_streak = self.overflow_streak = 0
        self.since_warning = 0
        self.incident = None
        self.discard()

    def discard(self) -> None:
        """The candidate snapshot is not confirmed; the next one is due as soon as it is quiet."""
        if self.confirming is not None:
            self.confirming = None
            self.since_snapshot = max(self.since_snapshot, self.cfg.checkpoint_every)

    def stepped(self, current: bool = True) -> AfterStep:
        """After a stepped step (``current``: the live state is the one right after it)."""
        cfg = self.cfg
        self.since_warning += 1
        self.since_snapshot += 1
        self.since_cut += 1
        if self.since_restore is not None:
            self.since_restore += 1
        if self.since_rollback is not None:
            self.since_rollback += 1
            if self.since_rollback > cfg.rollback_window:
                self.unhelpful = 0
        restore = (
            not self.sticky
            and self.lr_scale < 1.0
            and cfg.lr_restore_after is not None
            and self.since_cut >= cfg.lr_restore_after
        )
        if restore:
            self.restored_from, self.lr_scale, self.since_restore = self.lr_scale, 1.0, 0
        commit = self.confirming is not None and self.confirming >= cfg.confirm_steps
        if commit:
            self.confirming = None
        snapshot = (
            current
            and self.confirming is None
            and cfg.checkpoint_every > 0
            and self.since_snapshot >= cfg.checkpoint_every
            and self.since_warning >= cfg.quiet_steps
            and self.bad_streak == 0
        )
        if snapshot:
            self.since_snapshot, self.confirming = 0, 0
        return AfterStep(commit, snapshot, restore)

    # -- resume -------------------------------------------------------------------------

    _FIELDS = (
        "bad_streak",
        "grad_streak",
        "overflow_streak",
        "incident",
        "since_rollback",
        "unhelpful",
        "rollbacks",
        "since_warning",
        "since_snapshot",
        "lr_scale",
        "since_cut",
        "since_restore",
        "restored_from",
        "sticky",
        "start",
    )

    def state(self) -> dict[str, Any]:
        """Counters and detector windows, as plain Python values."""
        return {
            **{name: getattr(self, name) for name in self._FIELDS},
            "confirming": self.confirming,
            "loss": self.loss.state_dict(),
            "grad_norm": self.gnorm.state_dict(),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state` returned (a candidate snapshot is not kept: the next one
        is due as soon as it is quiet)."""
        for name in self._FIELDS:
            setattr(self, name, state[name])
        self.confirming = state.get("confirming")
        self.discard()
        self.loss.load_state_dict(state["loss"])
        self.gnorm.load_state_dict(state["grad_norm"])
