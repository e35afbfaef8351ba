"""What the guard does beyond skip-and-clip, once a step called for it (``Plan.escalate``).

A probe (keep the live state aside, read the next batches on the newest good snapshot), its
verdict (the rollback stands, or the live state comes back and the new level is learned), a
rollback at once when the weights are non-finite or the fp16 scale collapsed, the LR cut on
repeated confirmed divergence, the fallback to skip-and-clip when rollbacks keep not helping,
and the stop (only when no snapshot brings back finite weights).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import get_total_norm

from datacheck.torch._guard_policy import Plan, Policy
from datacheck.torch._guard_types import Action, GuardConfig
from datacheck.torch._snapshots import SnapshotStore
from datacheck.torch._snapshots import copy_to_cpu as _to_cpu

__all__ = ["Responses"]


class Responses:
    """The escalation half of :class:`~datacheck.torch.TrainingGuard` (a mixin)."""

    config: GuardConfig
    _params: list[torch.Tensor]
    _policy: Policy
    _snaps: SnapshotStore
    _aside: dict[str, Any] | None
    _skip_pending: int
    _stop_message: str | None
    _log_path: Path | None
    # GoodStates' (declared, not defined: a stub here would shadow them in the guard's MRO)
    _state: Callable[[], dict[str, Any]]
    _restore: Callable[[dict[str, Any]], None]

    def _escalate(self, step: int, plan: Plan) -> None:
        """What the step called for beyond skip-and-clip (``Plan.escalate``)."""
        kind = plan.escalate
        if kind == "weights":
            if not self._weights_finite():
                self._recover(step, plan, "the weights are no longer finite")
        elif kind == "probe":
            self._start_probe(step, plan)
        elif kind == "verdict":
            self._verdict(step, plan)
        elif kind == "scaler_collapse":
            self._recover(step, plan, "the fp16 loss scale collapsed")

    def _weights_finite(self) -> bool:
        params = [p.detach() for p in self._params]
        return bool(torch.isfinite(get_total_norm(params, foreach=True))) if params else True

    def _start_probe(self, step: int, plan: Plan) -> None:
        """Keep the live state aside and read the next batches on the newest good snapshot."""
        policy = self._policy
        kind = "nonfinite" if policy.nonfinite_streak else "divergence"
        snap = self._snaps.pick(before=policy.incident if policy.incident is not None else step)
        if snap is None:  # nothing to compare with: skip-and-clip, and the level is learned
            if kind == "divergence" and policy.excursion is not None:
                policy._learned(plan, "no snapshot to compare with (checkpoint_every=0)")
            else:
                policy.data_verdict = True
            return
        self._aside = _to_cpu(self._state())
        self._restore(snap.load())
        probe = policy.start_probe(kind, snap.step)
        plan.action = Action.ROLLBACK
        plan.add(
            "probe",
            "warning",
            to_step=snap.step,
            since=probe.incident,
            live_loss=probe.live,
            steps=self.config.probe_steps,
            reason=f"the loss has been {'non-finite' if kind == 'nonfinite' else 'above its level'} "
            f"since step {probe.incident}: trying the snapshot from step {snap.step} on the next "
            f"{self.config.probe_steps} batches (skipped) before rolling back for good",
        )

    def _verdict(self, step: int, plan: Plan) -> None:
        """The probe's batches are in: the rollback stands, or the live state comes back."""
        policy = self._policy
        probe = policy.end_probe()
        aside, self._aside = self._aside, None
        if probe.helped():
            why = (
                f"the snapshot from step {probe.to_step} scores {_g(probe.score())} on the "
                f"current batches where the live weights scored {_g(probe.live)}"
            )
            if probe.moved():  # better, but far from the old level too: the data moved as well
                plan.action = Action.ROLLBACK
                policy.relevel([v for v in probe.losses if math.isfinite(v)])
                plan.add(
                    "level_shift",
                    "warning",
                    since=probe.incident,
                    to_step=probe.to_step,
                    new_level=probe.score(),
                    reason=why + ": kept, and the level it scores "
                    "there is learned (the data moved too)",
                )
                policy.data_verdict = True
                return
            self._rolled_back(step, plan, probe.to_step, why)
            return
        assert aside is not None
        self._restore(aside)
        plan.action = Action.ROLLBACK
        what = "non-finite" if probe.kind == "nonfinite" else f"at {_g(probe.score())}"
        reason = (
            f"the snapshot from step {probe.to_step} does no better on the current batches "
            f"({what}): the weights are not to blame; the live state is back"
        )
        if probe.kind == "divergence" and probe.recent:
            policy.relevel(probe.recent)
            plan.add(
                "level_shift",
                "warning",
                since=probe.incident,
                to_step=probe.to_step,
                new_level=statistics.median(probe.recent),
                reason=reason + ", new level learned",
            )
        else:
            plan.add(
                "probe_undone",
                "warning",
                since=probe.incident,
                to_step=probe.to_step,
                reason=reason + ", skipping non-finite batches as skip-and-clip would",
            )
        policy.data_verdict = True

    def _recover(self, step: int, plan: Plan, why: str) -> None:
        """Roll back at once (non-finite weights, a collapsed fp16 scale); stop only when the
        weights are non-finite and no snapshot brings back finite ones."""
        policy = self._policy
        snap = self._snaps.pick(before=policy.incident if policy.incident is not None else step)
        if snap is not None:
            self._restore(snap.load())
        if not self._weights_finite():
            where = (
                "no snapshot is kept"
                if snap is None
                else f"the snapshot from step {snap.step} is not finite either"
            )
            self._stop(step, plan, f"{why}, and {where}")
            return
        if snap is not None:
            self._rolled_back(step, plan, snap.step, why)
            return
        fall, scale, unhelpful = policy.diverged()  # no snapshot (checkpoint_every=0): LR cut
        if fall:
            self._fall_back(step, plan, unhelpful)
            policy.escalated(1.0, 0, rolled_back=False)
            return
        if scale != policy.lr_scale:
            plan.add("lr_reduced", "warning", lr_scale=scale, sticky=policy.sticky, evidence=why)
        policy.escalated(scale, unhelpful, rolled_back=False)

    def _rolled_back(self, step: int, plan: Plan, to_step: int, why: str) -> None:
        """A rollback that stands (divergence confirmed); a repeat cuts the LR; too many in a
        row fall back to skip-and-clip."""
        policy = self._policy
        plan.action = Action.ROLLBACK
        if policy.fallback:
            plan.add("rollback", "error", to_step=to_step, cause="divergence", evidence=why)
            policy.escalated(1.0, policy.unhelpful)
            return
        fall, scale, unhelpful = policy.diverged()
        plan.add(
            "rollback",
            "error",
            to_step=to_step,
            cause="divergence",
            evidence=why,
            where=str(self._snaps.location),
            not_helped=unhelpful,
        )
        if fall:
            self._fall_back(step, plan, unhelpful)
            policy.escalated(1.0, 0)
            return
        if scale != policy.lr_scale:
            plan.add("lr_reduced", "warning", lr_scale=scale, sticky=policy.sticky)
        policy.escalated(scale, unhelpful)
        self._skip_pending = self.config.skip_after_rollback

    def _fall_back(self, step: int, plan: Plan, unhelpful: int) -> None:
        """Rollbacks that kept not helping: skip-and-clip from here on, said loudly."""
        self._policy.fall_back()
        msg = (
            f"datacheck guard: {unhelpful} rollbacks in a row did not keep the run healthy "
            f"(trouble came back within {self.config.rollback_window} steps each time); from "
            f"step {step} on it only skips non-finite steps and clips (skip-and-clip), the LR "
            f"cut is undone. Look at the learning rate and the data before step {step}"
            + (f" (events in {self._log_path})." if self._log_path else ".")
        )
        plan.add("fallback", "warning", message=msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)

    def _stop(self, step: int, plan: Plan, why: str) -> None:
        plan.action = Action.STOP
        msg = (
            f"datacheck guard stopped training at step {step}: {why} (the run cannot go on "
            f"from non-finite weights); last good state: {self._snaps.location}. Restart from "
            f"it and inspect the data and the learning rate before step {step}"
            + (f" (events in {self._log_path})." if self._log_path else ".")
        )
        plan.add("stop", "error", message=msg)
        self._stop_message = msg


def _g(value: float | None) -> str:
    return "nothing finite" if value is None else f"{value:.4g}"
