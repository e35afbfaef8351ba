"""What the guard's policy decides for one step (:class:`Plan`), what it blames
(:class:`Cause`) and the bookkeeping due after a stepped step (:class:`AfterStep`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from datacheck.torch._guard_types import Action

__all__ = ["AfterStep", "Cause", "Plan"]


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
    escalate: str | None = None
    """What the step calls for beyond skip-and-clip: ``probe`` (a persisting excursion or
    non-finite streak), ``verdict`` (the probe's batches are in), ``weights`` (the weights are
    no longer finite?) or ``scaler_collapse``."""

    def add(self, kind: str, severity: str, **values: Any) -> None:
        self.events.append({"kind": kind, "severity": severity, **values})


@dataclass(frozen=True)
class AfterStep:
    """Bookkeeping due after a stepped step."""

    commit: bool
    """The candidate snapshot was confirmed by enough healthy steps: commit it."""
    snapshot: bool
    """Take a new candidate snapshot of the state now."""
    restore: bool
    """Restore the full learning rate now."""
