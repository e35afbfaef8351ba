"""Naming the samples behind a bad step: per-sample evidence, quarantine, exclusion.

Evidence is a non-finite per-sample loss (named at once), or per-sample losses that are
outliers within their batch (:func:`~datacheck.torch._guard_log.name_samples`) and no better
than the run's start (the median loss of its first healthy steps, an untrained model's guess): at
a non-finite step they are named at once (a sample whose finite loss stands far above the rest
overflowed the gradient); at a loss spike only when the run is settled and once the next step
shows the spike was isolated.  Named samples go to the runtime quarantine and are excluded for
the rest of the run on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from datacheck.torch import _dist
from datacheck.torch._guard_log import name_samples, quarantine_records
from datacheck.torch._guard_policy import Plan, Policy
from datacheck.torch._guard_types import ExcludingLoader
from datacheck.torch._identity import SampleKey, as_sample_key, as_sample_keys, json_key
from datacheck.torch._quarantine import QuarantineWriter

__all__ = ["SampleEvidence"]


class SampleEvidence:
    """The sample-naming half of :class:`~datacheck.torch.TrainingGuard` (a mixin)."""

    world: _dist.World
    loader: ExcludingLoader | None
    _policy: Policy
    _threshold: float | None
    _held: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None
    _quarantine: QuarantineWriter | None
    _epoch: int
    _batch: int

    def _evidence(
        self,
        step: int,
        plan: Plan,
        indices: Sequence[SampleKey] | None,
        sample_losses: torch.Tensor | None,
    ) -> None:
        """Name the samples behind a skipped step (every rank's), then blame data or divergence."""
        self._held = None  # the previous step's outliers: this step is bad too, not isolated
        policy = self._policy
        spike = plan.events[0]["kind"] == "loss_spike"
        # A non-finite gradient beside finite per-sample losses, one of them far above the rest
        # (an input of 1e30): that sample overflowed it, whatever state the run is in.  A loss
        # spike is finite everywhere; its outliers count only when the run is settled.
        nonfinite = not spike
        local = name_samples(
            indices,
            sample_losses,
            outliers=(nonfinite or policy.settled) and (spike or self.world.rank in plan.ranks),
            threshold=self._threshold if spike else None,
            floor=policy.start_level,
        )
        named = [{**s, "rank": self.world.rank} for s in local]
        if self.world.size > 1:  # every rank skips this step, so every rank joins
            parts: list[Any] = [None] * self.world.size
            dist.all_gather_object(parts, named, group=self.world.group)
            named = [s for part in parts for s in part]
        sure = bool(named) and nonfinite or any(s["check"] == "nonfinite_loss" for s in named)
        policy.blame(plan, evidence=sure)
        if indices is not None:
            plan.events[0]["indices"] = [json_key(k) for k in as_sample_keys(indices)][:1000]
        if not named:
            return
        plan.events[0]["samples"] = [{**s, "index": json_key(s["index"])} for s in named[:1000]]
        rows = quarantine_records(local, self._epoch, self._batch, self.world.rank)
        if self.loader is not None:  # what names each sample across runs, as the loader knows
            described = self.loader.describe([s["index"] for s in local])
            rows = [{**r, **d} for r, d in zip(rows, described, strict=True)]
        if sure:
            self._name(rows, named)
        else:  # outliers: named once the next step shows the spike was isolated (not divergence)
            plan.events[0]["pending"] = True
            self._held = (rows, named)

    def _name(self, rows: list[dict[str, Any]], named: list[dict[str, Any]]) -> None:
        """Quarantine this rank's named samples; exclude every rank's for the rest of the run."""
        if self._quarantine is not None and rows:
            self._quarantine.write(rows)
        if self.loader is not None:
            self.loader.exclude({as_sample_key(s["index"]) for s in named})
