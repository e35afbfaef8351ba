"""``report.plot.timeline(log)``: loss and grad norm per step from a training log, with the
guard's events, the loss-spike threshold and the suggested restart step."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from datacheck._jsonl import read_records
from datacheck.errors import InputError
from datacheck.report._figure import new_figure

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["read_guard_log", "timeline"]

_NON_EVENTS = {
    "step",
    "checkpoint",
    "checkpoint_discarded",
    "lr_restored",
    "scaler_overflow",
    "data_skip",
    "excursion_end",
    "repeated_batch_end",
}
"""Guard log kinds that are routine (or the end of an event already drawn), not worth a line
on the timeline."""


def _number(value: Any) -> float:
    """A float from a log field: numbers, or the strings ``nan``/``inf`` the guard writes."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_guard_log(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """A JSON Lines training/guard log as (per-step loss, grad_norm, lr; event records).

    Tolerant: blank or unparseable lines and records without a ``step`` are skipped; records
    whose ``kind`` (or ``event``) is not ``step`` are events.  Used when ``datacheck._logs``
    (which also reads text, CSV and TensorBoard logs) is not available.

    Raises:
        InputError: the file is missing or holds no record with a step.
    """
    import pandas as pd

    try:
        recs = [
            r for r in read_records(path, skip_bad=True) if isinstance(r.get("step"), (int, float))
        ]
    except OSError as exc:
        raise InputError(
            f"log {os.fspath(path)!r}: {exc.strerror or exc}; pass the TrainingGuard's log= file"
        ) from exc
    if not recs:
        raise InputError(f"log {os.fspath(path)!r}: no JSON record with a 'step'")
    events = [r for r in recs if str(r.get("kind") or r.get("event") or "step") != "step"]
    for ev in events:
        ev.setdefault("kind", ev.get("event"))
    frame = pd.DataFrame(
        {
            "step": [float(r["step"]) for r in recs],
            **{k: [_number(r.get(k)) for r in recs] for k in ("loss", "grad_norm", "lr")},
        }
    )
    return frame.groupby("step", sort=True).first().reset_index(), events


def _load_log(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[dict[str, Any]], Any]:
    """(series, events, analysis) through ``datacheck._logs`` when present, else JSON Lines."""
    try:
        from datacheck._logs import analyze, read_history
    except ImportError:
        return (*read_guard_log(path), None)
    import pandas as pd

    try:
        hist = read_history(os.fspath(path))
    except InputError:  # e.g. a guard log with a torn last line: read what parses
        return (*read_guard_log(path), None)
    nums = {
        k: [math.nan if v is None else float(v) for v in getattr(hist, k)]
        for k in ("loss", "grad_norm", "lr")
    }
    return pd.DataFrame({"step": list(hist.steps), **nums}), list(hist.events), analyze(hist)


def _series(ax: Axes, log: pd.DataFrame, field: str, label: str) -> None:
    x, y = log["step"].to_numpy(dtype=float), log[field].to_numpy(dtype=float)
    ok = np.isfinite(y)
    ax.plot(x[ok], y[ok], color="#1f77b4", lw=1.2, marker=".", ms=3, label=label)
    bad = x[~ok & ~np.isnan(y)] if field == "lr" else x[~ok]
    if field != "lr" and len(bad) and ok.any():
        ax.plot(
            bad,
            np.full(len(bad), 0.97),
            "x",
            color="#d62728",
            ms=8,
            mew=2,
            clip_on=False,
            transform=ax.get_xaxis_transform(),
            label=f"non-finite {label} ({len(bad)})",
        )


def _events(axes: Sequence[Axes], events: list[dict[str, Any]]) -> None:
    import matplotlib as mpl

    by_kind: dict[str, set[float]] = {}
    for ev in events:
        kind = str(ev.get("kind"))
        if kind not in _NON_EVENTS and isinstance(ev.get("step"), (int, float)):
            by_kind.setdefault(kind, set()).add(float(ev["step"]))
    palette = mpl.colormaps["tab10"]
    for i, kind in enumerate(sorted(by_kind)):
        steps = sorted(by_kind[kind])
        for ax in axes:
            for j, step in enumerate(steps):
                label = f"guard: {kind} ({len(steps)})" if j == 0 and ax is axes[0] else None
                ax.axvline(step, color=palette((i + 4) % 10), ls=":", lw=1.6, label=label)


def _analysis(ax: Axes, tl: Any) -> str:
    """Draw the spike threshold and the restart step the analysis found; return its status."""
    if tl is None:
        return ""
    if tl.threshold and tl.level:
        ax.axhline(
            tl.threshold,
            color="#ff7f0e",
            ls="--",
            lw=1.2,
            label=f"spike threshold: {tl.threshold / tl.level:g} x median loss {tl.level:.3g}",
        )
    if tl.restart_step is not None:
        ax.axvline(
            tl.restart_step,
            color="#2ca02c",
            ls="-",
            lw=1.5,
            label=f"suggested restart: step {tl.restart_step:g}",
        )
    return f" ({tl.status})"


def timeline(path: str | os.PathLike[str]) -> Figure:
    """Loss and grad norm per step, the guard's events, spike threshold and restart step."""
    log, events, tl = _load_log(path)
    fig = new_figure(10, 6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    _series(top, log, "loss", "loss")
    _series(bottom, log, "grad_norm", "grad norm")
    grad = log["grad_norm"].to_numpy(dtype=float)
    if (np.isfinite(grad) & (grad > 0)).any():
        bottom.set_yscale("log")
    _events([top, bottom], events)
    status = _analysis(top, tl)
    top.set_title(f"Training timeline{status}: {os.path.basename(os.fspath(path))}")
    loss = log["loss"].to_numpy(dtype=float)
    loss = loss[np.isfinite(loss)]
    wide = len(loss) and loss.min() > 0 and loss.max() > 100 * np.median(loss)
    if wide:  # a spike would flatten the rest of the curve
        top.set_yscale("log")
    top.set_ylabel("loss (training objective" + (", log scale)" if wide else ")"))
    bottom.set_ylabel("grad norm (L2, log scale)")
    bottom.set_xlabel("optimizer step (count)")
    top.legend(loc="upper left", fontsize=8)
    bottom.legend(loc="upper left", fontsize=8)
    return fig
