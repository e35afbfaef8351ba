"""The timeline of a history: one pass with the shared spike detector, then the conclusions.

    stable -> early warning (sustained grad-norm spike, loss-scale collapse or repeated fp16
    overflow) -> loss warning (first spike that is not a one-reading blip) -> danger (it
    persists) -> NaN

The restart step is the last checkpoint the log names before the first sign of trouble, else
the last healthy step; the suggested LR is half the last *stable* LR before the trouble (an LR
raised more than 2x in one reading shortly before is not stable: the LR before the raise is).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datacheck.checks._spike import GRAD_NORM, LOSS, SpikeConfig, SpikeDetector, Verdict
from datacheck.history._build import History
from datacheck.history._restart import restart
from datacheck.history._series import Floats
from datacheck.history._table import MISSING

__all__ = ["SCALE_REPEAT", "Timeline", "analyze"]

SCALE_REPEAT = 5
"""fp16 overflows within ten logging intervals that make a warning (the scaler handles one;
the first 100 steps, the scaler's initial calibration, do not count)."""
_GUARD_DIVERGED = ("rollback", "stop")


@dataclass(frozen=True)
class Timeline:
    """What the analysis found; steps are ``None`` where nothing was found."""

    status: str
    """``healthy``, ``warning`` (early warning only), ``spike``, ``diverging`` or ``nan``."""
    steps: int
    """Distinct steps."""
    readings: int = 0
    """Readings judged (a step with several readings counts each)."""
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
    """What the pass over the series found, by reading position (becomes a :class:`Timeline`)."""

    steps: array[float]
    pending: tuple[int, float, float] | None = None  # (index, loss, level) of an open spike
    warning: tuple[int, float, float] | None = None
    danger: int | None = None
    nan: tuple[int, str] | None = None
    blips: list[int] = field(default_factory=list)
    grad_spikes: list[tuple[int, float]] = field(default_factory=list)
    grad_blips: list[int] = field(default_factory=list)
    grad_warning: tuple[int, float] | None = None
    grad_open: tuple[int, float] | None = None
    at_step: dict[int, float] = field(default_factory=dict)
    """The step of a sign that came at no reading (an event line after the last one, a NaN in
    a field on a row without the chosen series), by the index it sorts at."""

    def loss(self, at: int, loss: float, v: Verdict) -> None:
        if v.rebased:  # the level was one reading, and it was the odd one out
            self.pending = None
        elif v.kind == "spike" and self.warning is None:
            assert v.level is not None
            self.pending = (at, loss, v.level)
        elif v.kind == "sustained" and self._later(at, self.pending):
            assert self.pending is not None
            self.warning, self.pending, self.danger = self.pending, None, at
        elif v.kind == "sustained" and self.warning is not None and self.danger is None:
            if self._later(at, self.warning):
                self.danger = at
        elif v.recovered and self.pending is not None:
            if v.blip_step is not None:
                self.blips.append(self.pending[0])
            else:
                self.warning = self.pending
            self.pending = None

    def _later(self, at: int, episode: tuple[int, float, float] | None) -> bool:
        """A reading at a later step than the episode's start (more readings of the same
        step are the same step: micro-batches, ranks)."""
        return episode is not None and self.steps[at] != self.steps[episode[0]]

    def grad(self, at: int, gnorm: float, v: Verdict) -> None:
        if v.rebased:
            self.grad_open = None
        elif v.kind == "spike":
            self.grad_spikes.append((at, gnorm))
            self.grad_open = (at, gnorm)
        elif v.kind == "sustained":
            self.grad_spikes.append((at, gnorm))
            opened = self.grad_open
            if self.grad_warning is None and opened and self.steps[at] != self.steps[opened[0]]:
                self.grad_warning = opened
        elif v.blip_step is not None and self.grad_open is not None:
            self.grad_blips.append(self.grad_open[0])

    def close(self) -> None:
        """The log ended (or hit NaN) with a spike still open: it counts as the warning."""
        if self.pending is not None and self.warning is None:
            self.warning, self.pending = self.pending, None


def _event_nan(hist: History) -> tuple[int, str, float] | None:
    for ev in hist.events:
        if ev.get("kind") == "nonfinite" and not ev.get("dropped") and ev.get("step") is not None:
            what = ev.get("text") or (
                f"{ev['count']:g} NaN iteration(s)" if ev.get("count") else "guard: nonfinite"
            )
            index = ev.get("index")
            if index is None:
                index = hist.index_of_step(float(ev["step"]))
            return int(index), str(what), float(ev["step"])
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
    scan = _Scan(hist.steps.data)
    if (event := _event_nan(hist)) is not None:
        scan.nan, scan.at_step[event[0]] = event[:2], event[2]
    judged = hist.format == "guard log"
    if judged:  # the guard judged every step; its log holds every 10th healthy one
        _walk_nonfinite(hist, scan)
    else:
        walk(hist, scan, loss_det, grad_det)
        scan.close()
    _nonfinite_fields(hist, scan)
    level = _median_loss(hist) if judged else loss_det.level
    return _conclude(hist, scan, level, loss, lookback)


def _nonfinite_fields(hist: History, scan: _Scan) -> None:
    """Never healthy over a NaN: a field that could be the objective or the grad norm and went
    NaN/Inf (the chosen loss, or one beside it: ``nll_loss``, ``ppl``, ...) names the NaN
    when it comes first."""
    first = next(iter(hist.nonfinite), None)
    if first is None:
        _nonfinite_eval(hist, scan)
        return
    if scan.nan is not None and scan.nan[0] <= first["index"]:
        return
    what = "NaN" if math.isnan(first["value"]) else "Inf" if first["value"] > 0 else "-Inf"
    scan.nan = (int(first["index"]), f"{first['key']} is {what}")
    scan.at_step[int(first["index"])] = float(first["step"])


def _nonfinite_eval(hist: History, scan: _Scan) -> None:
    """An evaluation loss that went NaN/Inf over a finite training loss (fp16 overflow in the
    forward pass, an empty or broken eval set): never healthy either, named as evaluation."""
    if scan.nan is not None:
        return
    for step, value in zip(hist.eval_steps, hist.eval_loss, strict=False):
        if not math.isfinite(value):
            what = "NaN" if math.isnan(value) else "Inf" if value > 0 else "-Inf"
            index = min(hist.index_of_step(step), len(hist.steps))
            scan.nan = (
                index,
                f"{hist.keys.get('eval_loss') or 'eval loss'} is {what} (evaluation)",
            )
            scan.at_step[index] = float(step)
            return


def _median_loss(hist: History) -> float | None:
    import numpy as np

    arr = np.frombuffer(hist.loss.data, np.float64) if len(hist.loss) else np.empty(0)
    arr = arr[(arr != MISSING) & np.isfinite(arr)]
    return float(np.median(arr)) if len(arr) else None


def _walk_nonfinite(hist: History, scan: _Scan) -> None:
    """Only the first non-finite reading (a guard log: the guard's events are the verdicts)."""
    import numpy as np

    for series, name in ((hist.loss, "loss"), (hist.grad_norm, "grad norm")):
        if not len(series):
            continue
        arr = np.frombuffer(series.data, np.float64)
        bad = np.flatnonzero((arr != MISSING) & ~np.isfinite(arr))
        if len(bad) and (scan.nan is None or int(bad[0]) < scan.nan[0]):
            scan.nan = (int(bad[0]), name)


def _walk_each(
    hist: History, scan: _Scan, loss_det: SpikeDetector, grad_det: SpikeDetector
) -> None:
    """The pass, one ``update`` per reading, up to the first non-finite one (or the NaN the
    events name): what :func:`_walk_batch` must equal."""
    stop = math.inf if scan.nan is None else scan.nan[0]
    isfinite = math.isfinite
    for i, (step, value, gnorm) in enumerate(
        zip(hist.steps, hist.loss, hist.grad_norm, strict=True)
    ):
        if i > stop:
            break
        loss_bad = value is not None and not isfinite(value)
        if loss_bad or (gnorm is not None and not isfinite(gnorm)):
            grad_bad = gnorm is not None and not isfinite(gnorm)
            bad = ("loss",) * loss_bad + ("grad norm",) * grad_bad
            scan.nan = (i, " and ".join(bad))
            break
        if gnorm is not None:
            scan.grad(i, gnorm, grad_det.update(gnorm, step))
        if value is not None:
            scan.loss(i, value, loss_det.update(value, step))


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
        beyond = np.arange(a, a + len(st)) > stop
        ends = (beyond | l_bad | g_bad).nonzero()[0]
        end = int(ends[0]) if len(ends) else len(st)
        for has, vals, det, take in (
            (has_g, gv, grad_det, scan.grad),
            (has_l, lv, loss_det, scan.loss),
        ):
            rows = has[:end].nonzero()[0]
            for i, verdict in det.feed(vals[rows], st[rows]):
                take(a + int(rows[i]), float(vals[rows[i]]), verdict)
        if len(ends):
            if not beyond[end]:
                bad = ("loss",) * bool(l_bad[end]) + ("grad norm",) * bool(g_bad[end])
                scan.nan = (a + end, " and ".join(bad))
            return


def _usual_gap(steps: Floats) -> float:
    """The median interval between steps (the upper middle one of an even count), or 1."""
    import numpy as np

    gaps = np.diff(np.frombuffer(steps.data, dtype=np.float64))
    gaps = gaps[gaps > 0]
    return float(np.partition(gaps, len(gaps) // 2)[len(gaps) // 2]) if len(gaps) else 1.0


def _scale_warning(hist: History) -> tuple[int, str] | None:
    """(index, what): the loss scale fell to 1 or below, or fp16 overflows keep coming."""
    overflows = [
        e for e in hist.events if e.get("kind") == "overflow" and e.get("step") is not None
    ]
    width = 10 * _usual_gap(hist.steps) if overflows else 10
    window: list[tuple[float, float]] = []
    stayed = 0
    for ev in overflows:
        step = float(ev["step"])
        scale = ev.get("scale")
        if ev.get("fell", True) and isinstance(scale, (int, float)) and scale <= 1:
            return _index(hist, ev), f"loss scale collapsed to {scale:g}"
        stayed = stayed + 1 if ev.get("same") else 0
        if ev.get("floor") or (
            isinstance(scale, (int, float))
            and ((stayed and scale <= 1) or stayed > _DELAYED_SHIFTS)
        ):
            shown = "" if scale is None else f" ({scale:g})"
            return _index(hist, ev), (
                f"loss scale at its floor{shown}: overflowing steps are skipped and it cannot "
                "fall further"
            )
        if step < 100:
            continue
        count = ev.get("count", 1)  # a fall of the printed scale alone is no overflow more
        window = [(s, c) for s, c in window if s > step - width] + [(step, float(count or 0))]
        if sum(c for _, c in window) >= SCALE_REPEAT:
            total = sum(c for _, c in window)
            return _index(hist, ev), f"{total:g} fp16 overflows within {width:g} steps"
    for ev in hist.events:
        if ev.get("kind") == "scaler_collapse" and ev.get("step") is not None:
            return _index(hist, ev), "guard: loss scale collapsed"
    return None


_DELAYED_SHIFTS = 4
"""Overflows in a row at one scale that a delayed shift (DeepSpeed's hysteresis, default 2)
explains; more, with no fall between, is the floor."""


def _scale_step(hist: History, index: int) -> float:
    """The step of the first overflow event at reading ``index`` (a log of overflows alone)."""
    for ev in hist.events:
        if (
            ev.get("kind") == "overflow"
            and ev.get("step") is not None
            and _index(hist, ev) == index
        ):
            return float(ev["step"])
    return math.nan


def _index(hist: History, ev: dict[str, Any]) -> int:
    index = ev.get("index")
    if index is None:
        index = hist.index_of_step(float(ev["step"]))
    return min(int(index), max(len(hist.steps) - 1, 0))


def _guard(hist: History, found: dict[str, Any]) -> None:
    """Guard events raise the status: a rollback or a stop is divergence, a loss_spike a
    spike, a grad_spike an early warning (the guard's own verdicts, in a guard log)."""
    for ev in hist.events:
        if not isinstance(ev.get("step"), (int, float)) or "rank" not in ev:
            continue
        kind, index = ev.get("kind"), _index(hist, ev)
        if kind in _GUARD_DIVERGED and found.get("danger") is None:
            found["danger"] = index
        if kind == "loss_spike" and found.get("warning") is None:
            found["warning"], found["warning_loss"] = index, ev.get("loss")
        if kind == "grad_spike" and found.get("grad_warning") is None:
            found["grad_warning"], found["grad_warning_norm"] = index, ev.get("grad_norm")


_SIGNS = ("warning", "nan", "danger", "precursor", "grad_warning", "scale_warning")


def _conclude(
    hist: History, scan: _Scan, level: float | None, cfg: SpikeConfig, lookback: int
) -> Timeline:
    found: dict[str, Any] = {"level": level, "danger": scan.danger}
    if scan.warning is not None:
        at, value, base = scan.warning
        found.update(warning=at, warning_loss=value, level=base)
    if scan.nan is not None:
        found.update(nan=scan.nan[0], nan_signal=scan.nan[1])
    if scan.grad_warning is not None:
        found.update(grad_warning=scan.grad_warning[0], grad_warning_norm=scan.grad_warning[1])
    if (scale := _scale_warning(hist)) is not None:
        found.update(scale_warning=scale[0], scale_text=scale[1])
        if scale[0] >= len(hist.steps):  # no reading at or after it: the event's own step
            scan.at_step.setdefault(scale[0], _scale_step(hist, scale[0]))
    _guard(hist, found)
    steps = hist.steps.data

    def step_at(i: int) -> float:
        """The step of a sign at reading ``i`` (or the step it named, past the readings)."""
        return scan.at_step[i] if i in scan.at_step or i >= len(steps) else steps[i]

    trouble = found.get("warning", found.get("nan"))
    if trouble is not None:
        onset = _precursor(scan.grad_spikes, trouble, steps, lookback, step_at(trouble))
        if onset is not None:
            found.update(precursor=onset[0], precursor_grad_norm=onset[1])
            found["precursor_lead"] = step_at(trouble) - steps[onset[0]]
    first = min((found[k] for k in _SIGNS if found.get(k) is not None), default=None)
    if first is not None:
        restart(hist, found, first, found["level"], cfg.ratio, lookback, step_at(first))
    status = next(
        (
            s
            for s, k in (("nan", "nan"), ("diverging", "danger"), ("spike", "warning"))
            if k in found and found[k] is not None
        ),
        "warning"
        if found.get("grad_warning") is not None or found.get("scale_warning") is not None
        else "healthy",
    )
    counts: dict[str, int] = {}
    for ev in hist.events:
        if "rank" in ev:  # a guard's record
            counts[str(ev.get("kind"))] = counts.get(str(ev.get("kind")), 0) + 1
    base = found["level"]
    when: dict[str, float | None] = {
        k: (None if found.get(k) is None else step_at(found[k])) for k in _SIGNS
    }
    return Timeline(
        status=status,
        steps=_distinct(hist.steps),
        readings=len(hist.steps),
        step_source=hist.step_source,
        level=base,
        threshold=None if base is None or base <= 0 else cfg.ratio * base,
        warning_step=when["warning"],
        warning_loss=found.get("warning_loss"),
        danger_step=when["danger"],
        nan_step=when["nan"],
        nan_signal=found.get("nan_signal"),
        precursor_step=when["precursor"],
        precursor_grad_norm=found.get("precursor_grad_norm"),
        precursor_lead=found.get("precursor_lead"),
        grad_warning_step=when["grad_warning"],
        grad_warning_norm=found.get("grad_warning_norm"),
        scale_warning_step=when["scale_warning"],
        scale_warning=found.get("scale_text"),
        blips=tuple(steps[i] for i in scan.blips),
        grad_blips=tuple(steps[i] for i in scan.grad_blips),
        restart_step=found.get("restart_step"),
        restart_from=found.get("restart_from"),
        restart_lr=found.get("restart_lr"),
        lr_raised_step=found.get("lr_raised_step"),
        suggested_lr=found.get("suggested_lr"),
        guard_events=counts,
        notes=tuple(hist.notes),
    )


def _distinct(steps: Floats) -> int:
    import numpy as np

    if not len(steps):
        return 0
    arr = np.frombuffer(steps.data, np.float64)
    if bool(np.all(arr[1:] >= arr[:-1])):
        return int(np.count_nonzero(arr[1:] != arr[:-1])) + 1
    return int(np.unique(arr).size)


def _precursor(
    spikes: list[tuple[int, float]], trouble: int, steps: array[float], gap: int, at: float
) -> tuple[int, float] | None:
    """Onset of the run of grad-norm spikes leading into the trouble (reading ``trouble``, at
    step ``at``), with no gap over ``gap`` steps."""
    onset = None
    for i, gnorm in reversed(spikes):
        if i >= trouble or steps[i] >= at:  # the same step is no early warning
            continue
        if steps[i] < (at if onset is None else steps[onset[0]]) - gap:
            break
        onset = (i, gnorm)
    return onset
