"""The timeline of a history: one pass with the shared spike detector, then the conclusions.

    stable -> early warning (sustained grad-norm spike, loss-scale collapse or repeated fp16
    overflow) -> loss warning (first spike that is not a one-reading blip) -> danger (it
    persists) -> NaN

The restart step is the last checkpoint the log names before the first sign of trouble, else
the last healthy step; the suggested LR is half the last *stable* LR before the trouble (an LR
raised more than 2x in one reading shortly before is not stable: the LR before the raise is).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from datacheck.checks._spike import GRAD_NORM, LOSS, SpikeConfig, SpikeDetector, Verdict
from datacheck.history._build import History
from datacheck.history._series import Floats
from datacheck.history._table import MISSING

__all__ = ["SCALE_REPEAT", "Timeline", "analyze"]

SCALE_REPEAT = 5
"""fp16 overflows within ten logging intervals that make a warning (the scaler handles one;
the first 100 steps, the scaler's initial calibration, do not count)."""
_LR_JUMP = 2.0
_GUARD_DIVERGED = ("rollback", "stop")


@dataclass(frozen=True)
class Timeline:
    """What the analysis found; steps are ``None`` where nothing was found."""

    status: str
    """``healthy``, ``warning`` (early warning only), ``spike``, ``diverging`` or ``nan``."""
    steps: int
    step_source: str = "row number"
    level: float | None = None
    """The loss level: the baseline median at the warning, else at the end."""
    threshold: float | None = None
    """The loss a spike had to reach against that level (the ratio test)."""
    warning_step: float | None = None
    warning_loss: float | None = None
    danger_step: float | None = None
    nan_step: float | None = None
    nan_signal: str | None = None
    """What was non-finite first: ``loss``, ``grad norm``, or a log line's words."""
    precursor_step: float | None = None
    precursor_grad_norm: float | None = None
    precursor_lead: float | None = None
    """Steps between the grad-norm precursor and the loss warning (or NaN)."""
    grad_warning_step: float | None = None
    """Onset of the first sustained grad-norm spike (an early warning on its own)."""
    grad_warning_norm: float | None = None
    scale_warning_step: float | None = None
    scale_warning: str | None = None
    """``loss scale collapsed to X`` or ``N fp16 overflows in a row``."""
    blips: tuple[float, ...] = ()
    """Loss spikes of one reading that returned to the level at once (not divergence)."""
    grad_blips: tuple[float, ...] = ()
    restart_step: float | None = None
    restart_from: str | None = None
    """``checkpoint`` (named in the log) or ``last healthy step``."""
    restart_lr: float | None = None
    """The last stable LR before the trouble."""
    lr_raised_step: float | None = None
    """Where the LR had just been raised more than 2x (``restart_lr`` is the LR before it)."""
    suggested_lr: float | None = None
    guard_events: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass
class _Scan:
    """What the pass over the series found (mutable; becomes a :class:`Timeline`)."""

    pending: tuple[float, float, float] | None = None  # (step, loss, level) of an open spike
    warning: tuple[float, float, float] | None = None
    danger_step: float | None = None
    nan: tuple[float, str] | None = None
    blips: list[float] = field(default_factory=list)
    grad_spikes: list[tuple[float, float]] = field(default_factory=list)
    grad_blips: list[float] = field(default_factory=list)
    grad_warning: tuple[float, float] | None = None
    grad_open: tuple[float, float] | None = None

    def loss(self, step: float, loss: float, v: Verdict) -> None:
        if v.kind == "spike" and self.warning is None:
            assert v.level is not None
            self.pending = (step, loss, v.level)
        elif v.kind == "sustained" and self.pending is not None:
            self.warning, self.pending, self.danger_step = self.pending, None, step
        elif v.kind == "sustained" and self.warning is not None and self.danger_step is None:
            self.danger_step = step
        elif v.recovered and self.pending is not None:
            if v.blip_step is not None:
                self.blips.append(v.blip_step)
            else:
                self.warning = self.pending
            self.pending = None

    def grad(self, step: float, gnorm: float, v: Verdict) -> None:
        if v.kind == "spike":
            self.grad_spikes.append((step, gnorm))
            self.grad_open = (step, gnorm)
        elif v.kind == "sustained":
            self.grad_spikes.append((step, gnorm))
            if self.grad_warning is None and self.grad_open is not None:
                self.grad_warning = self.grad_open
        elif v.blip_step is not None:
            self.grad_blips.append(v.blip_step)

    def close(self) -> None:
        """The log ended (or hit NaN) with a spike still open: it counts as the warning."""
        if self.pending is not None and self.warning is None:
            self.warning, self.pending = self.pending, None


def _event_nan(hist: History) -> tuple[float, str] | None:
    for ev in hist.events:
        if ev.get("kind") == "nonfinite" and not ev.get("dropped") and ev.get("step") is not None:
            what = ev.get("text") or (
                f"{ev['count']:g} NaN iteration(s)" if ev.get("count") else "guard: nonfinite"
            )
            return float(ev["step"]), str(what)
    return None


Walk = Callable[[History, _Scan, SpikeDetector, SpikeDetector], None]


def analyze(
    hist: History,
    *,
    loss: SpikeConfig = LOSS,
    grad_norm: SpikeConfig = GRAD_NORM,
    lookback: int = 200,
) -> Timeline:
    """Walk the history once with the shared spike detector (:mod:`datacheck.checks._spike`)."""
    return _analyze(hist, _walk_batch, loss, grad_norm, lookback)


def _analyze(
    hist: History, walk: Walk, loss: SpikeConfig, grad_norm: SpikeConfig, lookback: int
) -> Timeline:
    loss_det, grad_det = SpikeDetector(loss), SpikeDetector(grad_norm)
    scan = _Scan(nan=_event_nan(hist))
    walk(hist, scan, loss_det, grad_det)
    scan.close()
    return _conclude(hist, scan, loss_det.level, loss, lookback)


def _walk_each(
    hist: History, scan: _Scan, loss_det: SpikeDetector, grad_det: SpikeDetector
) -> None:
    """The pass, one ``update`` per reading, up to the first non-finite one (or the NaN the
    events name): what :func:`_walk_batch` must equal."""
    stop = math.inf if scan.nan is None else scan.nan[0]
    isfinite = math.isfinite
    for step, value, gnorm in zip(hist.steps, hist.loss, hist.grad_norm, strict=True):
        if step > stop:
            break
        loss_bad = value is not None and not isfinite(value)
        if loss_bad or (gnorm is not None and not isfinite(gnorm)):
            grad_bad = gnorm is not None and not isfinite(gnorm)
            bad = ("loss",) * loss_bad + ("grad norm",) * grad_bad
            scan.nan = (step, " and ".join(bad))
            break
        if gnorm is not None:
            scan.grad(step, gnorm, grad_det.update(gnorm, step))
        if value is not None:
            scan.loss(step, value, loss_det.update(value, step))


_CHUNK = 1 << 12
"""Rows walked at a time by :func:`_walk_batch` (NumPy temporaries of ~0.5 MB)."""


def _walk_batch(
    hist: History, scan: _Scan, loss_det: SpikeDetector, grad_det: SpikeDetector
) -> None:
    """:func:`_walk_each`, chunk by chunk with :meth:`SpikeDetector.feed` (the loss and the
    grad norm touch separate parts of the scan, so one may go before the other)."""
    import numpy as np

    n, stop = len(hist.steps), math.inf if scan.nan is None else scan.nan[0]
    if not n:
        return
    steps, loss, gnorm = (
        np.frombuffer(s.data, np.float64) for s in (hist.steps, hist.loss, hist.grad_norm)
    )
    for a in range(0, n, _CHUNK):
        st, lv, gv = steps[a : a + _CHUNK], loss[a : a + _CHUNK], gnorm[a : a + _CHUNK]
        has_l, has_g = lv != MISSING, gv != MISSING
        l_bad, g_bad = has_l & ~np.isfinite(lv), has_g & ~np.isfinite(gv)
        ends = ((st > stop) | l_bad | g_bad).nonzero()[0]
        end = int(ends[0]) if len(ends) else len(st)
        for has, vals, det, take in (
            (has_g, gv, grad_det, scan.grad),
            (has_l, lv, loss_det, scan.loss),
        ):
            rows = has[:end].nonzero()[0]
            for i, verdict in det.feed(vals[rows], st[rows]):
                take(float(st[rows[i]]), float(vals[rows[i]]), verdict)
        if len(ends):
            if not st[end] > stop:
                bad = ("loss",) * bool(l_bad[end]) + ("grad norm",) * bool(g_bad[end])
                scan.nan = (float(st[end]), " and ".join(bad))
            return


def _usual_gap(steps: Floats) -> float:
    """The median interval between steps (the upper middle one of an even count), or 1."""
    import numpy as np

    gaps = np.diff(np.frombuffer(steps.data, dtype=np.float64))
    gaps = gaps[gaps > 0]
    return float(np.partition(gaps, len(gaps) // 2)[len(gaps) // 2]) if len(gaps) else 1.0


def _scale_warning(hist: History) -> tuple[float, str] | None:
    overflows = [
        e for e in hist.events if e.get("kind") == "overflow" and e.get("step") is not None
    ]
    width = 10 * _usual_gap(hist.steps) if overflows else 10
    window: list[tuple[float, float]] = []
    for ev in overflows:
        step = float(ev["step"])
        scale = ev.get("scale")
        if isinstance(scale, (int, float)) and scale <= 1:
            return step, f"loss scale collapsed to {scale:g}"
        if step < 100:
            continue
        window = [(s, c) for s, c in window if s > step - width] + [
            (step, float(ev.get("count") or 1))
        ]
        if sum(c for _, c in window) >= SCALE_REPEAT:
            return step, f"{sum(c for _, c in window):g} fp16 overflows within {width:g} steps"
    for ev in hist.events:
        if ev.get("kind") == "scaler_collapse" and ev.get("step") is not None:
            return float(ev["step"]), "guard: loss scale collapsed"
    return None


def _guard(hist: History, found: dict[str, Any]) -> None:
    """Guard events raise the status: a rollback or a stop is divergence, a loss_spike a spike."""
    for ev in hist.events:
        step = ev.get("step")
        if not isinstance(step, (int, float)):
            continue
        if ev.get("kind") in _GUARD_DIVERGED and found.get("danger_step") is None:
            found["danger_step"] = float(step)
        if ev.get("kind") == "loss_spike" and found.get("warning_step") is None:
            found.update(warning_step=float(step), warning_loss=ev.get("loss"))


def _conclude(
    hist: History, scan: _Scan, level: float | None, cfg: SpikeConfig, lookback: int
) -> Timeline:
    found: dict[str, Any] = {"level": level, "danger_step": scan.danger_step}
    if scan.warning is not None:
        step, value, base = scan.warning
        found.update(warning_step=step, warning_loss=value, level=base)
    if scan.nan is not None:
        found.update(nan_step=scan.nan[0], nan_signal=scan.nan[1])
    if scan.grad_warning is not None:
        found.update(grad_warning_step=scan.grad_warning[0], grad_warning_norm=scan.grad_warning[1])
    if (scale := _scale_warning(hist)) is not None:
        found.update(scale_warning_step=scale[0], scale_warning=scale[1])
    _guard(hist, found)
    trouble = found.get("warning_step", found.get("nan_step"))
    if trouble is not None:
        onset = _precursor(scan.grad_spikes, trouble, lookback)
        if onset is not None:
            found.update(
                precursor_step=onset[0],
                precursor_grad_norm=onset[1],
                precursor_lead=trouble - onset[0],
            )
    signs = (
        "warning_step",
        "nan_step",
        "danger_step",
        "precursor_step",
        "grad_warning_step",
        "scale_warning_step",
    )
    first = min((found[k] for k in signs if found.get(k) is not None), default=None)
    if first is not None:
        _restart(hist, found, first, lookback)
    status = next(
        (
            s
            for s, k in (
                ("nan", "nan_step"),
                ("diverging", "danger_step"),
                ("spike", "warning_step"),
            )
            if found.get(k) is not None
        ),
        "warning" if found.get("grad_warning_step") is not None or scale is not None else "healthy",
    )
    counts: dict[str, int] = {}
    for ev in hist.events:
        if "rank" in ev:  # a guard's record
            counts[str(ev.get("kind"))] = counts.get(str(ev.get("kind")), 0) + 1
    base = found["level"]
    return Timeline(
        status=status,
        steps=len(hist.steps),
        step_source=hist.step_source,
        threshold=None if base is None or base <= 0 else cfg.ratio * base,
        blips=tuple(scan.blips),
        grad_blips=tuple(scan.grad_blips),
        guard_events=counts,
        notes=tuple(hist.notes),
        **found,
    )


def _precursor(
    spikes: list[tuple[float, float]], trouble: float, gap: int
) -> tuple[float, float] | None:
    """Onset of the run of grad-norm spikes leading into the trouble (no gap over ``gap`` steps)."""
    onset = None
    for step, gnorm in reversed(spikes):
        if step >= trouble:  # the same step is no early warning
            continue
        if step < (trouble if onset is None else onset[0]) - gap:
            break
        onset = (step, gnorm)
    return onset


def _checkpoints(hist: History) -> list[float]:
    out = []
    for ev in hist.events:
        if ev.get("kind") != "checkpoint":
            continue
        at = ev.get(
            "at_step", ev.get("step")
        )  # the guard's checkpoint holds the state before at_step
        if isinstance(at, (int, float)):
            out.append(float(at))
    return out


def _finite_lrs(hist: History, end: int) -> Iterator[tuple[float, float]]:
    """``(step, lr)`` of the readings before position ``end`` with a finite LR, last first."""
    steps, lrs = hist.steps.data, hist.lr.data
    for i in range(end - 1, -1, -1):
        lr = lrs[i]
        if lr != MISSING and math.isfinite(lr):
            yield steps[i], lr


def _restart(hist: History, found: dict[str, Any], first_sign: float, lookback: int) -> None:
    steps = hist.steps.data  # sorted, one per step
    before = bisect.bisect_left(steps, first_sign)
    good = [c for c in _checkpoints(hist) if c < first_sign]
    if not before and not good:
        return
    restart = max(good) if good else steps[before - 1]
    found["restart_step"] = restart
    found["restart_from"] = "checkpoint" if good else "last healthy step"
    # A guard checkpoint "at step N" holds the state before step N ran: its LR is step N-1's.
    end = (bisect.bisect_left if good else bisect.bisect_right)(steps, restart)
    lrs = _finite_lrs(hist, end)
    last = next(lrs, None)
    if last is None:
        return
    stable = last[1]
    s, b = last
    for prev_step, a in lrs:
        if s < first_sign - lookback:
            break
        if a > 0 and b >= _LR_JUMP * a:
            stable, found["lr_raised_step"] = a, s
            break
        s, b = prev_step, a
    found.update(restart_lr=stable, suggested_lr=stable / 2)
