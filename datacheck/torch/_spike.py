"""Loss-spike detection relative to the loss's own spread (robust: median and MAD).

Temporary home: replaced by the detector shared with ``datacheck logs`` once it lands.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

__all__ = ["SpikeDetector"]

MAD_TO_SIGMA = 1.4826
"""A normal distribution's standard deviation is 1.4826 times its median absolute deviation."""


class SpikeDetector:
    """A value is a spike when it is far above the median of the recent window.

    Far means: more than ``sigmas`` robust standard deviations above the median *and* at least
    ``ratio`` times it, or at least ``factor`` times it whatever the spread.  No verdict before
    ``warmup`` values.
    """

    def __init__(
        self, window: int, warmup: int, sigmas: float | None, ratio: float, factor: float
    ) -> None:
        self.values: deque[float] = deque(maxlen=window)
        self.warmup, self.sigmas, self.ratio, self.factor = warmup, sigmas, ratio, factor

    def level(self) -> float | None:
        """The window's median (None during warm-up)."""
        if not self.values or len(self.values) < min(self.warmup, self.values.maxlen or 0):
            return None
        return statistics.median(self.values)

    def threshold(self) -> float | None:
        """The smallest value that counts as a spike now (None during warm-up)."""
        med = self.level()
        if med is None:
            return None
        bound = math.inf
        if self.sigmas is not None:
            mad = statistics.median(abs(v - med) for v in self.values)
            bound = med + self.sigmas * MAD_TO_SIGMA * mad
            if med > 0:
                bound = max(bound, self.ratio * med)
        if med > 0:
            bound = min(bound, self.factor * med)
        return bound

    def check(self, value: float) -> tuple[bool, float | None]:
        """(is ``value`` a spike, the median it was judged against)."""
        bound = self.threshold()
        return (bound is not None and value >= bound), self.level()

    def push(self, value: float) -> None:
        """Add a healthy value to the window (non-finite values are ignored)."""
        if math.isfinite(value):
            self.values.append(value)

    def state(self) -> dict[str, Any]:
        return {"values": list(self.values)}

    def load(self, state: dict[str, Any]) -> None:
        self.values = deque(state["values"], maxlen=self.values.maxlen)
