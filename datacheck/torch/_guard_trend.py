"""Is the run worse off without an intervention?  The evidence behind every rollback.

Skip-and-clip (skip a non-finite step, clip the rest) is the floor: the guard does what it does
unless it has evidence that the run is worse off that way.  A loss spike is not such evidence
on its own (a new stage of a curriculum, a replayed rare class and a warm restart all raise
the loss); the guard steps on it as skip-and-clip would and watches two things:

* the **excursion** (:class:`Excursion`): the readings since the loss first rose above the
  spike threshold, judged by their trend while the weights move, not by one ratio.  It ends
  once ``END_AFTER`` readings in a row are back under the threshold.  It calls for a probe
  when it persists (most of its readings above the threshold) and does not fall: after
  ``rollback_after`` readings in a row when the loss rose sharply (``sharp_rise`` times its
  level), else after ``patience`` readings.  A loss that falls while the weights move is being
  learned: once it holds at its new level, that level is learned without a probe.
* the **probe** (:class:`Probe`): the guard keeps the live state aside, restores the newest
  good snapshot from before the excursion and skips ``probe_steps`` batches on it, only
  reading their loss.  If the snapshot does clearly better on the *current* batches, the
  weights went bad (divergence): the rollback stands.  If it does no better, the data moved
  (a new level): the live state is put back, nothing is lost but the probe's batches, and the
  detector learns the new level from the excursion's readings.

Non-finite steps are skipped as skip-and-clip skips them; ``rollback_after`` of them in a row
without per-sample evidence are probed the same way (a finite snapshot that stays finite on
the current batches says the weights are to blame), or rolled back at once when the weights
themselves are no longer finite.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["END_AFTER", "Excursion", "Levels", "Probe", "chance_streak", "falling"]

END_AFTER = 3
"""Readings in a row back under the excursion's threshold that end it."""
FALL = 0.8
"""A trend falls when its recent median is at most this times its earlier median."""
LEARNED = 0.7
"""An excursion whose recent median is at most this times its early median was learned."""
CHANCE = 5e-5
"""Largest chance per step of a streak of spikes in a series that spikes this often."""
LEVEL = 32
"""Readings whose median is the run's current level, for the drift test (enough that the
median of a noisy series, batches of 4, does not dip far below its level by chance)."""
DRIFT = 2.0
"""A current level this many times the run's best level is a drift (a slow divergence: the LR
creeping up, OneCycleLR past its stable LR), followed as an excursion from the best level."""
RISE = 1.4
"""The rise starts where the level last stood under this many times the best level: the
rollback target is a snapshot from before that."""


@dataclass
class Excursion:
    """The readings since the loss first rose above the threshold (on the live weights)."""

    start: int
    """Step of the first reading above the threshold."""
    threshold: float
    level: float
    losses: list[float] = field(default_factory=list)
    above: int = 0
    """Readings above ``threshold``."""
    run: int = 0
    """Readings in a row above ``threshold`` (the current run)."""
    below: int = 0
    """Readings in a row back under ``threshold``."""
    need: int = 3
    """Readings in a row above that make a sharp rise no chance (:func:`chance_streak`)."""
    drift: bool = False
    """Opened by a slow rise of the level (no spike), from the run's best level."""
    fresh_from: int | None = None
    """Where the live weights' check on fresh batches began (an index into ``losses``)."""
    live: float | None = None
    """The live weights' median loss on those fresh batches (the probe compares with it)."""

    def add(self, loss: float) -> None:
        self.losses.append(loss)
        up = loss >= self.threshold
        self.above += up
        self.run = self.run + 1 if up else 0
        self.below = 0 if up else self.below + 1

    @property
    def ended(self) -> bool:
        return self.below >= END_AFTER

    @property
    def persists(self) -> bool:
        """Most of its readings are above the threshold."""
        return 2 * self.above > len(self.losses)

    def early_late(self) -> tuple[float, float]:
        """Median of the first and of the last third of its readings."""
        n = len(self.losses)
        k = max(1, n // 3)
        return statistics.median(self.losses[:k]), statistics.median(self.losses[-k:])

    def state(self) -> dict[str, Any]:
        return asdict(self)


class Levels:
    """The run's current level (median of its last ``LEVEL`` stepped losses on these weights)
    and its best level so far (the loss detector's window median: slow and robust, not the
    minimum of a noisy median): a slow rise from the best level is a drift."""

    def __init__(self, last: list[float] | None = None, best: list[float] | None = None) -> None:
        self.last: deque[float] = deque(last or (), maxlen=LEVEL)
        self.best = best
        """[level, step, last step under ``RISE`` x level] (None: not known yet)."""

    def add(self, loss: float) -> None:
        self.last.append(loss)

    @property
    def current(self) -> float | None:
        return statistics.median(self.last) if len(self.last) >= LEVEL else None

    def drift(self, base: float | None, readings: int, step: int) -> float | None:
        """Track the best level (``base``: the detector's level after ``readings``); the
        threshold of a drift excursion when the current level has risen ``DRIFT`` times above
        it (None otherwise)."""
        level = self.current
        if level is None or base is None or readings < LEVEL:
            return None
        if self.best is None or base < self.best[0]:
            self.best = [base, float(step), float(step)]
            return None
        if level < RISE * self.best[0]:
            self.best[2] = float(step)  # the rise, if one comes, starts after this step
        return DRIFT * self.best[0] if level >= DRIFT * self.best[0] > 0 else None

    def at_best(self) -> bool:
        """The current level is (about) the run's best: a snapshot now is worth pinning."""
        level = self.current
        return self.best is not None and level is not None and level <= 1.1 * self.best[0]

    def reset(self) -> None:
        """A new level was learned: the best level is found again."""
        self.last.clear()
        self.best = None


def falling(values: list[float]) -> bool:
    """The later half's median is clearly under the earlier half's (the loss comes down)."""
    if len(values) < 4:
        return False
    half = len(values) // 2
    return statistics.median(values[half:]) <= FALL * statistics.median(values[:half])


def chance_streak(recent: deque[bool], least: int, spike: bool = False) -> int:
    """Spikes in a row needed before a streak is no longer chance, in a series whose recent
    readings spiked at this rate (at least ``least``): a noisy series (small batches on a
    converged model spike on 10 % of steps) makes three in a row every thousand steps.
    ``spike``: the newest reading in ``recent`` is the streak's first (it does not count)."""
    spikes = sum(recent) - (spike and bool(recent) and recent[-1])
    rate = spikes / max(len(recent), recent.maxlen or 1, 1)  # few readings: no evidence
    if rate <= 0.0:
        return least
    if rate >= 0.5:
        return max(least, 16)
    return max(least, math.ceil(math.log(CHANCE) / math.log(rate)))


@dataclass
class Probe:
    """A rollback on trial: the snapshot's losses on the next batches, before any update."""

    kind: str
    """``divergence`` (a persisting loss excursion) or ``nonfinite`` (a non-finite streak)."""
    to_step: int
    incident: int
    """First step of the trouble."""
    threshold: float | None
    """The spike threshold from before the trouble."""
    live: float | None
    """Median finite loss of the live weights over the trouble (None: all non-finite)."""
    left: int
    losses: list[float] = field(default_factory=list)
    recent: list[float] = field(default_factory=list)
    """The trouble's finite readings on the live weights (the new level, if it is one)."""

    def helped(self) -> bool:
        """Whether the snapshot does clearly better than the live weights on current batches."""
        finite = [v for v in self.losses if math.isfinite(v)]
        if 2 * len(finite) <= len(self.losses):
            return False  # the snapshot is non-finite on these batches too: they are to blame
        if self.live is None:
            return True  # the live weights gave nothing finite, the snapshot does
        score = statistics.median(finite)
        under = self.threshold is not None and score < self.threshold
        return under or score * 1.5 <= self.live

    def moved(self) -> bool:
        """The snapshot did better, but is still above the old threshold: the level moved."""
        score = self.score()
        return score is not None and self.threshold is not None and score >= self.threshold

    def score(self) -> float | None:
        finite = [v for v in self.losses if math.isfinite(v)]
        return statistics.median(finite) if finite else None

    def state(self) -> dict[str, Any]:
        return asdict(self)
