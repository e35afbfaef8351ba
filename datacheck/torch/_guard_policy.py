"""The guard's response policy: what a step's numbers mean and what to do about them.

Pure host bookkeeping (no torch): every rank feeds it the same all-reduced table and so takes
the same decisions.  Skip-and-clip is the floor; every step beyond it needs evidence
(``_guard_trend`` says which):

    non-finite loss/gradient  -> skip (as skip-and-clip); samples with a non-finite per-sample
                                 loss (or a finite one far above the rest beside an overflowing
                                 gradient) are quarantined
    loss spike                -> step, clipped (as skip-and-clip), and follow the excursion
    excursion that persists   -> probe: the newest good snapshot on the next batches; it does
    without falling              better -> roll back (divergence); no better -> put the live
                                 state back and learn the new level
    divergence again within   -> roll back and cut the LR x ``lr_factor``; restored after
    ``rollback_window`` steps    ``lr_restore_after`` healthy steps, for good only when the
                                 restored LR diverged again (repeated, confirmed divergence)
    ``max_rollbacks`` in a    -> fall back to skip-and-clip for the rest of the run (LR cut
    row that did not help        undone; a ``fallback`` warning)
    weights non-finite        -> roll back at once; stop only when no snapshot brings back
                                 finite weights

A grad-norm spike (after a warm-up) is a warning and is clipped; it never rolls back by
itself.  A new snapshot waits as a candidate until ``confirm_steps`` healthy steps followed
it; two bad steps in a row, a repeated batch or a rollback first discard it.  Snapshots are
not taken inside an excursion or a stretch of repeated batches.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

from datacheck.checks._spike import SpikeDetector
from datacheck.torch._guard_plan import AfterStep, Cause, Plan
from datacheck.torch._guard_trend import (
    LEARNED,
    Excursion,
    Levels,
    Probe,
    chance_streak,
    falling,
)
from datacheck.torch._guard_types import Action, GuardConfig

__all__ = ["AfterStep", "Cause", "Plan", "Policy"]  # the plan types re-exported

_RECENT = 128
"""Judged readings over which the spike rate is counted."""


class Policy:
    """Counters and detectors behind every decision; ``state()`` / ``load()`` for resume."""

    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.loss = SpikeDetector(cfg.loss_spike)
        """The loss detector ``datacheck logs`` uses (a learned new level replaces its window)."""
        self.gnorm = SpikeDetector(cfg.grad_spike)
        self.recent: deque[bool] = deque(maxlen=_RECENT)
        """Whether each recent judged reading was a spike (the series' own spike rate)."""
        self.excursion: Excursion | None = None
        self.probe: Probe | None = None
        self.nonfinite_streak = 0
        """Non-finite steps in a row without per-sample evidence."""
        self.incident: int | None = None
        self.data_verdict = False
        """A probe blamed the current batches: no new probe before a healthy step."""
        self.skips = 0
        """Steps skipped in a row."""
        self.grad_streak = 0
        self.overflow_streak = 0
        self.repeated = 0
        """Steps in a row that repeated the batch before them."""
        self.since_rollback: int | None = None
        """Stepped steps since the last confirmed rollback (None: none yet)."""
        self.unhelpful = 0
        self.rollbacks = 0
        self.fallback = False
        """The guard gave up intervening: skip-and-clip for the rest of the run."""
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
        self.levels = Levels()
        """The current level (the latest stepped losses on these weights) and the best one."""

    @property
    def start_level(self) -> float | None:
        """The run's start: the median loss of its first ``min_spread`` healthy steps (about an
        untrained model's guess); None until then."""
        if len(self.start) < self.cfg.loss_spike.min_spread:
            return None
        return statistics.median(self.start)

    @property
    def probing(self) -> bool:
        return self.probe is not None

    @property
    def threshold(self) -> float | None:
        """The loss bar: the excursion's (frozen at its start) while one is open."""
        if self.excursion is not None:
            return self.excursion.threshold
        return self.loss.threshold

    # -- classifying a step -------------------------------------------------------------

    def nonfinite(self, step: int, ranks: tuple[int, ...], **values: Any) -> Plan:
        """A non-finite step: skipped, as skip-and-clip skips it; :meth:`blame` goes on."""
        plan = Plan(Action.SKIP, ranks=ranks)
        plan.add("nonfinite", "error", ranks=list(ranks), **values)
        self.grad_streak = 0
        self.skips += 1
        return plan

    def blame(self, plan: Plan, evidence: bool, step: int) -> None:
        """Per-sample evidence names the data; a streak without it may be the weights."""
        event = plan.events[0]
        if evidence:
            event["cause"] = Cause.DATA.value
            self._long_skip(plan)
            return
        self.nonfinite_streak += 1
        if self.incident is None:
            self.incident = step
        if self.nonfinite_streak > 1:
            self.discard()
        event["streak"] = self.nonfinite_streak
        event["cause"] = Cause.DATA.value
        if self.fallback or self.data_verdict:
            self._long_skip(plan)
            return
        if self.nonfinite_streak == self.cfg.rollback_after:
            plan.escalate = "weights"  # the guard checks the weights themselves
        elif self.nonfinite_streak >= self.cfg.patience:
            plan.escalate = "probe"
        self._long_skip(plan)

    def _long_skip(self, plan: Plan) -> None:
        """Every ``max_skips`` steps skipped in a row, a line saying why it goes on."""
        if self.skips and self.skips % self.cfg.max_skips == 0:
            plan.add(
                "skip_stretch",
                "warning",
                skipped=self.skips,
                reason="non-finite batches; the weights are finite (skip-and-clip skips them too)",
            )

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
            if not self.fallback:
                plan.escalate = "scaler_collapse"

    def finite(
        self,
        step: int,
        action: Action,
        loss: float,
        norm: float,
        norms: tuple[float, ...],
        repeated: bool = False,
    ) -> Plan:
        """A step that will update the weights (skip-and-clip would step it too)."""
        plan = Plan(action)
        self.skips = 0
        self._grad(plan, step, norm, norms, action)
        self.overflow_streak = self.nonfinite_streak = 0
        if self.excursion is None:
            self.incident = None
        if repeated:
            self._repeated(plan, step, loss)
            return plan
        if self.repeated:
            plan.add("repeated_batch_end", "info", steps=self.repeated)
            self.repeated, self.since_warning = 0, 0
        threshold = self.threshold
        verdict = self.loss.update(loss, step=step)
        spike = verdict.above or (threshold is not None and loss >= threshold)
        if verdict.kind != "warmup":
            self.recent.append(spike)
        self.levels.add(loss)
        drift = None
        if not spike and self.excursion is None:
            drift = self.levels.drift(self.loss.level, self.loss.readings, step)
            drift = None if self.fallback or self.data_verdict else drift
        if drift is not None:
            threshold, spike = drift, True
        if spike or self.excursion is not None:
            self._excursion(plan, step, loss, threshold, verdict.level, drift is not None)
        else:
            self.data_verdict = False
            if self.confirming is not None and not self.grad_streak:
                self.confirming += 1
            if len(self.start) < self.cfg.loss_spike.min_spread and math.isfinite(loss):
                self.start.append(loss)
        return plan

    def at_best(self) -> bool:
        """The current level is (about) the run's best: a snapshot now is worth pinning."""
        return self.levels.at_best()

    def _grad(
        self, plan: Plan, step: int, norm: float, norms: tuple[float, ...], action: Action
    ) -> None:
        """A grad-norm spike is a warning (the step is clipped); it pauses confirmation."""
        bound = self.gnorm.threshold
        verdict = self.gnorm.update(norm, step=step)
        if not verdict.above:
            self.grad_streak = 0
            return
        self.grad_streak += 1
        self.since_warning = min(self.since_warning, self.cfg.quiet_steps - 1)
        ranks = tuple(r for r, v in enumerate(norms) if bound is not None and v >= bound)
        plan.ranks = ranks
        plan.add(
            "grad_spike",
            "warning",
            ranks=list(ranks),
            grad_norm=norm,
            level=verdict.level,
            streak=self.grad_streak,
            clipped=action is Action.CLIP,
        )

    def _repeated(self, plan: Plan, step: int, loss: float) -> None:
        """The same batch as the step before: a data-pipeline bug, never divergence.  Stepped
        (as skip-and-clip would), but kept out of the loss window and of the snapshots."""
        self.repeated += 1
        self.discard()
        self.since_warning = 0
        if self.repeated == 1:
            plan.add(
                "repeated_batch",
                "warning",
                loss=loss,
                message="this batch is the one before it again (a stuck loader or cache?): "
                "stepped, but its losses are kept out of the spike detector and no snapshot "
                "is taken until the batches change",
            )

    def _excursion(
        self,
        plan: Plan,
        step: int,
        loss: float,
        threshold: float | None,
        level: float | None,
        drift: bool = False,
    ) -> None:
        """Follow the readings since the loss rose above its bar; probe once it persists."""
        exc = self.excursion
        if exc is None:
            assert threshold is not None
            need = chance_streak(self.recent, self.cfg.rollback_after, spike=True)
            best = self.levels.best
            drifted = drift and best is not None
            if drifted and best is not None:  # back to the best level's state, judged from there
                level, need = best[0], self.cfg.patience
                plan.add(
                    "drift",
                    "warning",
                    level=self.levels.current,
                    best_level=best[0],
                    best_step=int(best[1]),
                )
            exc = Excursion(step, threshold, level or threshold, need=need, drift=drifted)
            self.excursion = exc
            self.incident = int(best[2]) + 1 if drifted and best is not None else step
        exc.add(loss)
        if loss >= exc.threshold and not exc.drift:  # first event (a grad spike is a symptom)
            plan.add(
                "loss_spike",
                "warning",
                loss=loss,
                level=exc.level,
                threshold=exc.threshold,
                streak=exc.run,
                stepped=True,
            )
            plan.events.insert(0, plan.events.pop())
        if loss >= exc.threshold:  # not a healthy stretch: no snapshot in it or just after it
            self.discard()
            self.since_warning = 0
        if exc.ended:
            plan.add("excursion_end", "info", since=exc.start, readings=len(exc.losses))
            self.excursion = None
            self.since_warning = 0
            return
        if self.fallback or self.data_verdict or not exc.persists:
            exc.fresh_from = None
            return
        if exc.fresh_from is not None:
            self._fresh(plan, exc)
            return
        n = len(exc.losses)
        sharp = exc.run >= exc.need and (
            statistics.median(exc.losses[-exc.run :]) >= self.cfg.sharp_rise * exc.level
        )
        if not sharp and (n < self.cfg.patience or n % self.cfg.rollback_after):
            return
        if n >= self.cfg.patience:  # enough readings to judge the trend by
            early, late = exc.early_late()
            overdue = n >= 4 * self.cfg.patience
            if late <= LEARNED * early:  # the loss came down a long way while the weights moved
                if overdue or not falling(exc.losses[-max(4, n // 3) :]):
                    self._learned(plan, "the loss fell while the weights moved and holds there")
                return
            if falling(exc.losses[-max(4, n // 2) :]) and not overdue:
                return  # coming down: wait
        exc.fresh_from = len(exc.losses)

    def _fresh(self, plan: Plan, exc: Excursion) -> None:
        """Before a probe, the live weights' own losses on the next ``probe_steps`` batches
        (stepped, as skip-and-clip steps them): the snapshot is then compared with the live
        weights on batches of the same time, never with the batches that spiked (a streak of
        bad batches says nothing about the weights).  Still above the bar: probe."""
        assert exc.fresh_from is not None
        fresh = exc.losses[exc.fresh_from :]
        if len(fresh) < self.cfg.probe_steps:
            return
        exc.fresh_from = None
        if statistics.median(fresh) < exc.threshold:
            return  # the live weights do well on fresh batches: the batches were to blame
        exc.live = statistics.median(fresh)
        plan.escalate = "probe"

    def _learned(self, plan: Plan, why: str) -> None:
        """The excursion's level is the run's level now: the detector learns it."""
        exc = self.excursion
        assert exc is not None
        recent = exc.losses[-self.cfg.loss_spike.window :]
        self.relevel(recent)
        plan.add(
            "level_shift",
            "warning",
            since=exc.start,
            old_level=exc.level,
            new_level=statistics.median(recent),
            reason=why,
        )

    def relevel(self, readings: list[float]) -> None:
        """Learn a new level: fresh detectors, the loss one fed these readings."""
        self.loss = SpikeDetector(self.cfg.loss_spike)
        for v in readings:
            if math.isfinite(v):
                self.loss.update(v)
        self.gnorm = SpikeDetector(self.cfg.grad_spike)
        self.recent.clear()
        self.levels.reset()
        self.excursion = None
        self.incident = None
        self.since_snapshot = max(self.since_snapshot, self.cfg.checkpoint_every)

    # -- the probe ----------------------------------------------------------------------

    def start_probe(self, kind: str, to_step: int) -> Probe:
        """A rollback on trial: the next ``probe_steps`` batches are read on the snapshot."""
        exc = self.excursion
        recent = [v for v in (exc.losses if exc is not None else []) if math.isfinite(v)]
        threshold = exc.threshold if exc is not None else self.loss.threshold
        live = exc.live if exc is not None and exc.live is not None else None
        if live is None and recent:
            live = statistics.median(recent[-self.cfg.patience :])
        incident = self.incident if self.incident is not None else to_step
        self.probe = Probe(
            kind, to_step, incident, threshold, live, self.cfg.probe_steps, recent=recent
        )
        self.excursion = None
        self.discard()
        return self.probe

    def probe_step(self, loss: float) -> Plan:
        """One batch read on the snapshot under trial: skipped (no update)."""
        probe = self.probe
        assert probe is not None
        probe.losses.append(loss)
        probe.left -= 1
        self.skips += 1
        plan = Plan(Action.SKIP)
        if probe.left <= 0:
            plan.escalate = "verdict"
        return plan

    def end_probe(self) -> Probe:
        probe, self.probe = self.probe, None
        assert probe is not None
        self.nonfinite_streak = 0
        return probe

    # -- responding ---------------------------------------------------------------------

    def diverged(self) -> tuple[bool, float, int]:
        """A confirmed divergence (the rollback helped): (fall back?, new LR scale, unhelpful).

        The first one is a rollback alone; one within ``rollback_window`` stepped steps of the
        last says the LR reproduces the damage: cut it.  A cut that comes back within
        ``lr_restore_after`` steps of a restore goes back to the cut that worked, for good."""
        cfg = self.cfg
        repeat = self.since_rollback is not None and self.since_rollback <= cfg.rollback_window
        unhelpful = self.unhelpful + 1 if repeat else 0
        if unhelpful > cfg.max_rollbacks:
            return True, 1.0, unhelpful
        scale = self.lr_scale
        if repeat:
            recently_restored = (
                self.since_restore is not None
                and cfg.lr_restore_after is not None
                and self.since_restore <= cfg.lr_restore_after
            )
            if recently_restored:
                scale, self.sticky = self.restored_from, True
            else:
                scale = self.lr_scale * cfg.lr_factor
        return False, scale, unhelpful

    def escalated(self, lr_scale: float, unhelpful: int, rolled_back: bool = True) -> None:
        """Bookkeeping after a rollback (and LR cut) was applied."""
        self.unhelpful = unhelpful
        self.rollbacks += rolled_back
        if lr_scale != self.lr_scale:
            self.since_cut = 0
            self.since_restore = None
        self.lr_scale = lr_scale
        self.since_rollback = 0
        self.grad_streak = self.overflow_streak = self.nonfinite_streak = 0
        self.since_warning = 0
        self.excursion = None
        self.incident = None
        self.levels.last.clear()  # the restored weights' losses from here on
        self.discard()

    def fall_back(self) -> None:
        """Skip-and-clip from now on: the LR cut is undone, no more probes or rollbacks."""
        self.fallback = True
        self.lr_scale, self.sticky = 1.0, True
        self.excursion = self.probe = None

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
            and self.excursion is None
            and not self.repeated
            and not self.nonfinite_streak
        )
        if snapshot:
            self.since_snapshot, self.confirming = 0, 0
        return AfterStep(commit, snapshot, restore)

    # -- resume -------------------------------------------------------------------------

    _FIELDS = (
        "nonfinite_streak",
        "grad_streak",
        "overflow_streak",
        "incident",
        "data_verdict",
        "skips",
        "repeated",
        "since_rollback",
        "unhelpful",
        "rollbacks",
        "fallback",
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
        exc = self.excursion
        return {
            **{name: getattr(self, name) for name in self._FIELDS},
            "confirming": self.confirming,
            "recent": list(self.recent),
            "last": list(self.levels.last),
            "best": self.levels.best,
            "excursion": None if exc is None else exc.state(),
            "loss": self.loss.state_dict(),
            "grad_norm": self.gnorm.state_dict(),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state` returned (a candidate snapshot is not kept, nor a probe:
        the next snapshot is due as soon as it is quiet)."""
        for name in self._FIELDS:  # a field newer than the state keeps its start value
            setattr(self, name, state.get(name, getattr(self, name)))
        self.confirming = state.get("confirming")
        self.discard()
        self.recent = deque((bool(v) for v in state.get("recent", ())), maxlen=_RECENT)
        self.levels = Levels([float(v) for v in state.get("last", ())], state.get("best"))
        exc = state.get("excursion")
        self.excursion = None if exc is None else Excursion(**exc)
        self.probe = None
        self.loss.load_state_dict(state["loss"])
        self.gnorm.load_state_dict(state["grad_norm"])
