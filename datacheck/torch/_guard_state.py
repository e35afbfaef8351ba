"""The guard's good states and its own state: snapshots to roll back to, and resume.

A snapshot is taken every ``checkpoint_every`` stepped steps as a *candidate*; it is committed
(logged as ``checkpoint``) once ``confirm_steps`` healthy steps followed it, and discarded
(``checkpoint_discarded``) when two bad steps in a row or a grad-norm spike came first: the
update just before a snapshot may be the one that spoiled the weights, and a rollback must
never restore them.  The state the run starts from needs no confirming and is committed at once.
"""

from __future__ import annotations

from typing import Any

import torch

from datacheck.errors import UsageError
from datacheck.torch._guard_policy import Plan, Policy
from datacheck.torch._guard_types import GuardConfig
from datacheck.torch._snapshots import SnapshotStore, capture_state, restore_state

__all__ = ["GoodStates"]

_STATE_VERSION = 1


class GoodStates:
    """Snapshot bookkeeping and ``state_dict`` of :class:`~datacheck.torch.TrainingGuard` (a mixin)."""

    config: GuardConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any
    step_count: int
    _policy: Policy
    _snaps: SnapshotStore
    _skipped: set[int]
    _skip_pending: int

    def _write(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def lr(self) -> float:
        raise NotImplementedError

    def _good_states(self, plan: Plan, stepped: bool, at: int, current: bool) -> None:
        """After a step: discard an unconfirmed candidate, commit a confirmed one, take a new
        one (``at``: the step the live state is before; ``current``: it is this step's)."""
        policy, snaps = self._policy, self._snaps
        if snaps.candidate is not None and policy.confirming is None:
            dropped = snaps.discard()
            assert dropped is not None
            plan.add("checkpoint_discarded", "info", at_step=dropped.step)
        if not stepped:
            return
        after = policy.stepped(current)
        if after.restore:
            plan.add("lr_restored", "info", lr=self.lr)
        if after.commit:
            snap = snaps.commit(pin=policy.at_best())
            plan.add("checkpoint", "info", at_step=snap.step, where=str(snap.path or "memory"))
        if after.snapshot:
            snaps.propose(at, self._state())

    def _state(self) -> dict[str, Any]:
        policy = self._policy
        windows = {"loss": policy.loss.state_dict(), "grad_norm": policy.gnorm.state_dict()}
        return capture_state(self.model, self.optimizer, self.scaler, windows)

    def _restore(self, state: dict[str, Any]) -> None:
        windows = restore_state(state, self.model, self.optimizer, self.scaler)
        self._policy.loss.load_state_dict(windows["loss"])
        self._policy.gnorm.load_state_dict(windows["grad_norm"])

    def state_dict(self) -> dict[str, Any]:
        """The guard's own state, to save beside the model's in your checkpoint.

        Holds the step count, the policy's counters and detector windows, the LR multiplier,
        the skipped steps and the committed snapshot files kept on disk (in-memory snapshots
        are not saved: a resumed guard takes a fresh one at its first step).
        """
        return {
            "version": _STATE_VERSION,
            "name": self.config.name,
            "step": self.step_count,
            "policy": self._policy.state(),
            "skipped": sorted(self._skipped),
            "snapshots": self._snaps.files(),
            "skip_pending": self._skip_pending,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: steps count on, stale snapshot files are deleted,
        and a ``resume`` record tells :func:`bad_steps` which logged steps are replayed."""
        if state.get("version") != _STATE_VERSION:
            raise UsageError(
                f"TrainingGuard.load_state_dict: unknown state version {state.get('version')!r}"
                f" (this datacheck writes {_STATE_VERSION}); pass what state_dict() returned"
            )
        self.step_count = int(state["step"])
        self._policy.load(state["policy"])
        self._skipped = {s for s in state["skipped"] if s < self.step_count}
        self._skip_pending = int(state["skip_pending"])
        self._snaps.adopt([(int(s), str(p)) for s, p in state["snapshots"]])
        self._write({"step": self.step_count, "kind": "resume", "severity": "info"})
