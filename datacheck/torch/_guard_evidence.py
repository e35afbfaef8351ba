"""Naming the samples behind a non-finite step: per-sample evidence, quarantine, exclusion.

Evidence is a non-finite per-sample loss, or (the gradient being non-finite while every
per-sample loss is finite) per-sample losses that are outliers within their batch
(:func:`~datacheck.torch._guard_log.name_samples`), far above every other one and no better
than the run's start (the median loss of its first healthy steps, an untrained model's guess):
such a sample overflowed the gradient (a 1e30 input).  A finite high loss alone is never
evidence: hard and mislabelled-looking clean samples are normal, more so on a converged model,
and skip-and-clip would step on them.  Named samples go to the runtime quarantine and are
excluded for the rest of the run on every rank.
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
        """Name the samples behind a non-finite step (every rank's), then blame data or not."""
        policy = self._policy
        local = name_samples(
            indices,
            sample_losses,
            outliers=self.world.rank in plan.ranks or not plan.ranks,
            floor=policy.start_level,
        )
        named = [{**s, "rank": self.world.rank} for s in local]
        if self.world.size > 1:  # every rank skips this step, so every rank joins
            parts: list[Any] = [None] * self.world.size
            dist.all_gather_object(parts, named, group=self.world.group)
            named = [s for part in parts for s in part]
        policy.blame(plan, evidence=bool(named), step=step)
        if indices is not None:
            plan.events[0]["indices"] = [json_key(k) for k in as_sample_keys(indices)][:1000]
        if not named:
            return
        plan.events[0]["samples"] = [{**s, "index": json_key(s["index"])} for s in named[:1000]]
        rows = quarantine_records(local, self._epoch, self._batch, self.world.rank)
        if self.loader is not None:  # what names each sample across runs, as the loader knows
            described = self.loader.describe([s["index"] for s in local])
            rows = [{**r, **d} for r, d in zip(rows, described, strict=True)]
        self._name(rows, named)

    def _name(self, rows: list[dict[str, Any]], named: list[dict[str, Any]]) -> None:
        """Quarantine this rank's named samples; exclude every rank's for the rest of the run."""
        if self._quarantine is not None and rows:
            self._quarantine.write(rows)
        if self.loader is not None:
            self.loader.exclude({as_sample_key(s["index"]) for s in named})
