"""Repeated batches: the same batch as the step before, a data-pipeline bug (a stuck loader,
a cache that keeps returning one entry), never divergence.

A batch repeats the one before it when its sample names (``indices``) are the same in the same
order, or when its per-sample losses are those of the step before nearly one for one (an
update on one batch moves its samples' losses together: log-losses correlated at ``CORR`` or
more and within ``SPREAD`` of each other in the median, over at least ``MIN_SAMPLES``
samples; two different batches of 8+ samples almost never are).  Only once the batches have
varied: a run that trains on one batch from its first step (full-batch training, overfitting
one batch to debug a model) repeats it on purpose.  Judged on one process only:
under DDP each rank's batches differ and the decision would not be the same on every rank.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch

from datacheck.torch._identity import SampleKey, as_sample_keys

__all__ = ["SameBatch"]

CORR = 0.98
SPREAD = 0.5
MIN_SAMPLES = 8


class SameBatch:
    """Remembers the last batch's fingerprint; ``repeated()`` once per step."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._names: int | None = None
        self._losses: list[float] | None = None
        self._varied = False
        self._steps = 0

    def repeated(
        self, indices: Sequence[SampleKey] | None, sample_losses: torch.Tensor | None
    ) -> bool:
        """Whether this batch is the previous one again (and remember this one)."""
        if not self.enabled:
            return False
        same = False
        if indices is not None:
            keys = tuple(as_sample_keys(indices))
            names = hash(keys) if len(keys) >= 2 else None
            same = names is not None and names == self._names
            self._names = names
        losses = None
        if sample_losses is not None and sample_losses.numel() >= MIN_SAMPLES:
            losses = sample_losses.detach().float().reshape(-1).tolist()
            same = same or _alike(self._losses, losses)
        self._losses = losses
        self._steps += 1
        self._varied = self._varied or (not same and self._steps > 1)
        return same and self._varied


def _alike(before: list[float] | None, now: list[float]) -> bool:
    if before is None or len(before) != len(now):
        return False
    if not all(math.isfinite(v) and v >= 0 for v in before + now):
        return False
    a = [math.log(v + 1e-8) for v in before]
    b = [math.log(v + 1e-8) for v in now]
    if statistics.median(abs(x - y) for x, y in zip(a, b, strict=True)) > SPREAD:
        return False
    try:
        return statistics.correlation(a, b) >= CORR
    except statistics.StatisticsError:  # a constant series: nothing to correlate
        return False
