"""One spike detector for a training series, shared by ``datacheck logs`` and ``TrainingGuard``.

Offline (a log read after the fact) and online (the guard deciding each step) run the same
code with the same defaults, so they agree on what a spike is.  Pure Python, no torch, no
pandas; each update costs O(1) in the length of the run (a sorted window of fixed size; the
spread is computed only when the ratio test already passed).

A reading is judged against the series' own recent past (a window of finite readings):

* **ratio**: ``value >= ratio x level``, where ``level`` is the window's median (skipped when
  the level is not positive: a ratio means nothing there);
* **spread**: ``value - level >= sigma x spread``, where ``spread`` is the robust standard
  deviation ``1.4826 x MAD`` (floored at ``mad_floor x |level|`` so a flat series does not turn
  rounding into spikes).

A spike needs both.  The warm-up adapts to short logs: from ``min_readings`` readings on the
ratio test alone judges; from ``min_spread`` readings on the spread test joins it (a MAD of a
handful of readings is too unstable to divide by).  A log of four readings, then a 10x jump,
is judged; a noisy converged run is judged against its own noise.

Readings above the threshold form an *episode*, judged against the baseline frozen at its
start (spikes never enter the window, so a spike cannot raise its own bar):

    ok -> spike (first reading above) -> sustained (each further reading above) -> recovered

An episode of one reading that is followed *at once* (within ``blip_gap`` times the usual
step interval) by a reading back below the threshold was a **blip**: one bad batch, not
divergence.  The guard skips a spike and rolls back on ``sustained``; the log timeline reports
blips apart and names the first non-blip episode.

Offline, :meth:`SpikeDetector.feed` takes an array of readings and returns the verdicts
:meth:`~SpikeDetector.update` would give them one by one, leaving the same state: it takes in
the runs of readings :func:`_provably_ok` vouches for with NumPy, and calls ``update`` on the
others (a 1 GB nanoGPT log: 20 M readings, ~40 s of ``update`` calls before, ~2 s after).

How the defaults were chosen (measured on the 18 public logs studied for issue 13 and the
test fixtures): every spike the BigScience chronicles document is a loss jump of 1.64x
(104B tr8b, step 17062), 1.77x (104B tr8, 7010), 2.3x (BLOOM-176B, 31219) and 2.65x (13B,
29050), after 1 to 5 readings, so the loss ``ratio`` is 1.5 and the ratio test judges from
the first reading on.  ``sigma=6`` over ``window=128`` readings follows OLMo-core's loss-spike
rule (6 standard deviations over 128 steps), made robust (median/MAD instead of mean/std so
the spike itself does not widen the band).  The grad norm is noisier and its spikes are early
warnings, not actions: its ``ratio`` is 5 (BLOOM's grad norm went 0.24, 0.95, 2.4, 15.9, 145,
960: the 16.8x reading at 31217 is flagged, two readings before the loss).  None of the healthy
logs (modded-nanogpt, a Hugging Face ``trainer_state.json``, YOLOv5 results and events, a
sentence-transformers run) has a reading flagged with these defaults.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from datacheck.errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["GRAD_NORM", "LOSS", "SpikeConfig", "SpikeDetector", "Verdict"]

Kind = Literal["warmup", "ok", "spike", "sustained", "nonfinite"]

_MAD_TO_SIGMA = 1.4826  # MAD x this estimates the standard deviation of a normal series
_STATE_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class SpikeConfig:
    """How far above its own recent past a reading must be to count as a spike."""

    window: int = 128
    """Finite, non-spike readings kept for the level (median) and the spread (MAD)."""
    sigma: float = 6.0
    """Robust standard deviations (1.4826 x MAD) above the median a spike must reach."""
    ratio: float = 1.5
    """And times the median it must reach (when the median is positive)."""
    min_readings: int = 1
    """Readings needed before anything is judged (the ratio test alone, at first)."""
    min_spread: int = 8
    """Readings needed before the spread test joins the ratio test."""
    mad_floor: float = 1e-3
    """Floor on the spread, as a fraction of ``|median|``, so a flat series has a band."""
    blip_gap: float = 2.0
    """A return counts as "at once" within this many usual step intervals of the spike."""
    min_level: int = 2
    """Readings a level needs for an episode judged against it to stand once it persists.  An
    episode opened against fewer that is still up at a later step says the level was the odd
    reading (a low first loss), not the series: its readings join the window instead."""

    def __post_init__(self) -> None:
        if self.window < 2:
            raise UsageError(f"spike config: window={self.window!r} must be >= 2 (e.g. 128)")
        if not self.sigma > 0:
            raise UsageError(f"spike config: sigma={self.sigma!r} must be > 0 (e.g. 6.0)")
        if not self.ratio > 1:
            raise UsageError(f"spike config: ratio={self.ratio!r} must be > 1 (e.g. 1.5)")
        if not 1 <= self.min_readings <= self.window:
            raise UsageError(
                f"spike config: min_readings={self.min_readings!r} must be in [1, window]"
            )
        if not self.min_readings <= self.min_spread <= self.window:
            raise UsageError(
                f"spike config: min_spread={self.min_spread!r} must be in [min_readings, window]"
            )
        if not self.mad_floor >= 0:
            raise UsageError(f"spike config: mad_floor={self.mad_floor!r} must be >= 0")
        if not self.blip_gap >= 1:
            raise UsageError(f"spike config: blip_gap={self.blip_gap!r} must be >= 1")
        if not 1 <= self.min_level <= self.window:
            raise UsageError(f"spike config: min_level={self.min_level!r} must be in [1, window]")


LOSS = SpikeConfig()
"""Defaults for a loss series (see the module docstring for how they were chosen)."""
GRAD_NORM = SpikeConfig(ratio=5.0)
"""Defaults for a grad-norm series: noisier, and its spikes are early warnings."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one reading is, against the baseline it was judged by."""

    kind: Kind
    """``warmup`` (nothing to judge against yet), ``ok``, ``spike`` (first reading of an
    episode), ``sustained`` (a further reading above), or ``nonfinite`` (NaN/Inf)."""
    level: float | None = None
    """The baseline median the reading was judged against."""
    ratio: float | None = None
    """``value / level`` (``None`` when the level is not positive)."""
    z: float | None = None
    """``(value - level) / spread``, when the spread test applied."""
    episode_start: float | None = None
    """Step (or reading number) of the episode's first spike, for spike/sustained/recovered."""
    recovered: bool = False
    """This reading ended an episode: the series is back below the threshold."""
    blip_step: float | None = None
    """Set when this reading ended a one-reading episode at once: that spike was a blip."""
    rebased: bool = False
    """This reading ended an episode opened against a level of fewer than ``min_level``
    readings: the episode's readings became the level (it was no spike)."""

    @property
    def above(self) -> bool:
        """The reading is above the threshold (a spike or a sustained reading)."""
        return self.kind in ("spike", "sustained")


@dataclass(slots=True)
class _Episode:
    start: float
    level: float
    spread: float | None
    readings: int = 1
    """Steps of the episode (several readings of one step count once)."""
    interval: float | None = None
    thin: list[float] | None = None
    """The episode's readings while its level rests on fewer than ``min_level`` readings."""


class SpikeDetector:
    """Median/MAD + ratio spike detector over one series; ``update`` once per reading.

    Example:
        >>> det = SpikeDetector(LOSS)
        >>> [det.update(v, step=s).kind for s, v in enumerate([2.45, 2.43, 2.44, 25.8, 842.0])]
        ['warmup', 'ok', 'ok', 'spike', 'sustained']
    """

    def __init__(self, config: SpikeConfig = LOSS) -> None:
        self.config = config
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []
        self._seen = 0
        self._count = 0
        self._episode: _Episode | None = None
        self._last_step: float | None = None
        self._interval: float | None = None

    # -- reading the state --------------------------------------------------------------

    @property
    def level(self) -> float | None:
        """The median of the window (the baseline during an episode), or ``None`` in warm-up."""
        if self._episode is not None:
            return self._episode.level
        if len(self._sorted) < self.config.min_readings:
            return None
        return self._median()

    @property
    def readings(self) -> int:
        """Finite, non-spike readings seen so far (not only those in the window)."""
        return self._seen

    @property
    def in_episode(self) -> bool:
        """The last finite reading was above the threshold."""
        return self._episode is not None

    @property
    def threshold(self) -> float | None:
        """The smallest finite reading :meth:`check` would judge above (``None``: in warm-up, or
        no test applies yet).  The guard compares losses with it on the device."""
        level = self.level
        if level is None:
            return None
        spread = self._episode.spread if self._episode is not None else self._spread(level)
        bounds = [self.config.ratio * level] if level > 0 else []
        if spread is not None:
            bounds.append(level + self.config.sigma * spread)
        return max(bounds) if bounds else None

    def _median(self) -> float:
        s, n = self._sorted, len(self._sorted)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    def _spread(self, level: float) -> float | None:
        if len(self._sorted) < self.config.min_spread:
            return None
        mad = statistics.median(abs(v - level) for v in self._sorted)
        return max(_MAD_TO_SIGMA * mad, self.config.mad_floor * abs(level), 1e-12)

    # -- judging ------------------------------------------------------------------------

    def check(self, value: float) -> Verdict:
        """Judge ``value`` without changing the state (``recovered``/``blip`` not set)."""
        return self._judge(value)[0]

    def _judge(self, value: float) -> tuple[Verdict, float | None]:
        if not math.isfinite(value):
            return Verdict("nonfinite", level=self.level), None
        ep = self._episode
        if ep is not None:
            level, spread = ep.level, ep.spread
        elif len(self._sorted) < self.config.min_readings:
            return Verdict("warmup"), None
        else:
            level, spread = self._median(), None
        ratio = value / level if level > 0 else None
        if ratio is not None and ratio < self.config.ratio:
            return Verdict("ok", level=level, ratio=ratio), None
        if ep is None:
            spread = self._spread(level)
        if spread is None and ratio is None:  # no positive level and too few readings
            return Verdict("ok", level=level), None
        z = None if spread is None else (value - level) / spread
        if z is not None and z < self.config.sigma:
            return Verdict("ok", level=level, ratio=ratio, z=z), spread
        kind: Kind = "spike" if ep is None else "sustained"
        start = None if ep is None else ep.start
        return Verdict(kind, level=level, ratio=ratio, z=z, episode_start=start), spread

    def update(self, value: float, step: float | None = None) -> Verdict:
        """Judge ``value`` (at ``step``, default: the reading's number) and take it in."""
        value = float(value)
        verdict, spread = self._judge(value)
        if verdict.kind == "nonfinite":
            return verdict
        self._count += 1
        step = float(self._count - 1) if step is None else float(step)
        gap = None if self._last_step is None else step - self._last_step
        if verdict.kind == "spike":
            assert verdict.level is not None
            usual = self._interval if self._interval is not None else gap
            thin = [value] if len(self._sorted) < self.config.min_level else None
            self._episode = _Episode(step, verdict.level, spread, interval=usual, thin=thin)
            verdict = replace(verdict, episode_start=step)
        elif verdict.kind == "sustained":
            ep = self._episode
            assert ep is not None
            if gap != 0:
                ep.readings += 1
            if ep.thin is not None:
                ep.thin.append(value)
                if ep.readings > 1:  # still up at a later step: the level was the odd one
                    verdict = self._rebase(verdict, ep)
        else:
            verdict = self._end_episode(verdict, gap)
            self._push(value)
            if gap is not None and gap > 0:
                self._interval = gap
        self._last_step = step
        return verdict

    def _rebase(self, verdict: Verdict, ep: _Episode) -> Verdict:
        """Close a thin-level episode without a spike: its readings join the window."""
        self._episode = None
        for v in (ep.thin or [])[-self.config.window :]:
            self._push(v)
        return Verdict("ok", level=self._median(), episode_start=ep.start, rebased=True)

    def _end_episode(self, verdict: Verdict, gap: float | None) -> Verdict:
        ep, self._episode = self._episode, None
        if ep is None:
            return verdict
        at_once = gap is None or ep.interval is None or gap <= self.config.blip_gap * ep.interval
        blip = ep.start if ep.readings == 1 and at_once else None
        return replace(verdict, episode_start=ep.start, recovered=True, blip_step=blip)

    def _push(self, value: float) -> None:
        self._seen += 1
        self._fifo.append(value)
        bisect.insort(self._sorted, value)
        if len(self._fifo) > self.config.window:
            old = self._fifo.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    # -- offline, many readings at once ---------------------------------------------------

    def feed(
        self, values: NDArray[np.float64], steps: NDArray[np.float64]
    ) -> list[tuple[int, Verdict]]:
        """:meth:`update` on each reading in turn; returns the verdicts that say something.

        Returns ``(index, verdict)`` for each reading whose verdict is not a plain ``ok`` or
        ``warmup`` (a spike, sustained, nonfinite, or the end of an episode) and leaves the
        state the ``update`` calls would.  Readings :func:`_provably_ok` vouches for are taken
        in without being judged one by one.
        """
        n, w = len(values), self.config.window
        bad = (~_provably_ok(self, values)).nonzero()[0].tolist()
        out: list[tuple[int, Verdict]] = []
        i, at, trusted = 0, 0, 0  # the flags hold from ``trusted`` on (see _provably_ok)
        while i < n:
            if self._episode is None and i >= trusted:
                while at < len(bad) and bad[at] < i:
                    at += 1
                j = bad[at] if at < len(bad) else n
                if j > i:
                    self._absorb(values, steps, i, j)
                    i = j
                    continue
            verdict = self.update(float(values[i]), float(steps[i]))
            if verdict.kind in ("spike", "sustained", "nonfinite"):
                trusted = i + w + 1  # a reading kept out of the window
            if verdict.kind not in ("ok", "warmup") or verdict.recovered or verdict.rebased:
                out.append((i, verdict))
            i += 1
        return out

    def _absorb(
        self, values: NDArray[np.float64], steps: NDArray[np.float64], i: int, j: int
    ) -> None:
        """Take in readings ``i:j``, each a plain ``ok``, as ``update`` would."""
        import numpy as np

        w = self.config.window
        self._seen += j - i
        self._count += j - i
        window = list(self._fifo) + values[max(i, j - w) : j].tolist()
        self._fifo = deque(window[-w:])
        self._sorted = sorted(self._fifo)  # all positive: no -0.0 and 0.0 whose order counts
        run = steps[i:j]
        gaps = np.diff(run)
        if self._last_step is not None:
            gaps = np.concatenate(([run[0] - self._last_step], gaps))
        positive = (gaps > 0).nonzero()[0]
        if len(positive):
            self._interval = float(gaps[positive[-1]])
        self._last_step = float(run[-1])

    # -- resuming -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state as plain JSON-able values (finite floats, ints, ``None``, lists, dicts)."""
        ep = self._episode
        return {
            "version": _STATE_VERSION,
            "window": list(self._fifo),
            "seen": self._seen,
            "count": self._count,
            "episode": None if ep is None else asdict(ep),
            "last_step": self._last_step,
            "interval": self._interval,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (a window longer than this config's keeps its tail)."""
        if state.get("version") != _STATE_VERSION:
            raise UsageError(
                f"spike detector state: version {state.get('version')!r} is not "
                f"{_STATE_VERSION} (saved by another datacheck version?)"
            )
        values = [float(v) for v in state["window"]][-self.config.window :]
        self._fifo = deque(values)
        self._sorted = sorted(values)
        self._seen = int(state["seen"])
        self._count = int(state.get("count", self._seen))
        ep = state.get("episode")
        self._episode = None if ep is None else _Episode(**ep)
        self._last_step = state.get("last_step")
        self._interval = state.get("interval")


def _provably_ok(det: SpikeDetector, values: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Which readings are surely a plain ``ok``, *if* no episode is open and none of the
    ``window`` readings before them in ``values`` was kept out of the window.

    Then the window of reading ``i`` is the last ``window`` values of the detector's window
    followed by ``values[:i]``, and NumPy has its minimum ``lo`` (a sliding minimum).  If
    ``0 < lo``, ``0 < value`` and ``value / lo < ratio``, the ratio test passes: the median is
    at least ``lo`` (also the mean of the two middle readings, both at least ``lo``), and
    rounded division is monotonic, so ``value / median <= value / lo``.  Such windows hold
    positive values only, so the sorted window has no ``-0.0`` and ``0.0`` whose order counts.
    """
    import numpy as np

    cfg, n, f = det.config, len(values), len(det._fifo)
    w = cfg.window
    ext = np.concatenate((np.fromiter(det._fifo, np.float64, f), values))
    # reading i is at k = f + i in ext; its window is ext[max(0, k - w):k]
    first = min(w - f + 1, n)  # the readings whose window starts at ext[0]
    lo = np.empty(n)
    lo[:first] = np.concatenate(([np.nan], np.minimum.accumulate(ext[: f + first])))[f : f + first]
    if first < n:
        lo[first:] = _sliding_min(ext, w)[f + first - w : f + n - w]
    with np.errstate(all="ignore"):
        ok = (lo > 0) & (values > 0) & (values / lo < cfg.ratio) & np.isfinite(values)
    return ok & (np.minimum(np.arange(f, f + n), w) >= cfg.min_readings)


def _sliding_min(a: NDArray[np.float64], w: int) -> NDArray[np.float64]:
    """``out[j] = min(a[j:j + w])`` for ``j`` in ``0 .. len(a) - w`` (van Herk/Gil-Werman)."""
    import numpy as np

    n = len(a)
    blocks = -(-n // w)
    padded = np.full(blocks * w, np.inf)
    padded[:n] = a
    grid = padded.reshape(blocks, w)
    pre = np.minimum.accumulate(grid, axis=1).ravel()
    suf = np.minimum.accumulate(grid[:, ::-1], axis=1)[:, ::-1].ravel()
    return np.minimum(suf[: n - w + 1], pre[w - 1 : n])
