"""Plots of a scan report and of a guard log: ``report.plot.by_shard()``, ``.column(name)``,
``.timeline(log)``.

Every method returns a :class:`matplotlib.figure.Figure` that is not registered with pyplot:
nothing leaks when a notebook draws hundreds, and Jupyter shows it once (save it elsewhere
with ``fig.savefig(...)``).  matplotlib is imported on first use only; without a display and
without a backend chosen by the user, the Agg backend is selected.
"""

from __future__ import annotations

import functools
import io
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck._jsonl import read_records
from datacheck.errors import InputError, UsageError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from datacheck.report._data import ReportData

__all__ = ["ReportPlots", "read_guard_log"]

_NON_EVENTS = {"step", "checkpoint", "lr_restored", "scaler_overflow", "data_skip"}
"""Guard log kinds that are routine, not worth a line on the timeline."""


def _new_figure(width: float, height: float) -> Figure:
    """A Figure outside pyplot's registry (Agg when there is no display)."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise UsageError("plots need matplotlib: pip install 'datacheck[notebook]'") from exc

    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if headless and "MPLBACKEND" not in os.environ and "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    return _figure_class()(figsize=(width, height), layout="constrained")


@functools.cache
def _figure_class() -> type[Figure]:
    from matplotlib.figure import Figure

    class ReportFigure(Figure):
        """A Figure that Jupyter shows as PNG whatever the backend (it is not pyplot's)."""

        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            self.savefig(buf, format="png", bbox_inches="tight")
            return buf.getvalue()

    return ReportFigure


def _short_names(paths: Sequence[str]) -> list[str]:
    """Paths relative to their common folder (the file names when they share one)."""
    if len(paths) < 2:
        return [os.path.basename(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    return [os.path.relpath(p, root) for p in paths]


# -- findings per shard ----------------------------------------------------------------------


def _findings_matrix(report: ReportData, top: int) -> tuple[list[str], list[str], np.ndarray, int]:
    """(paths, checks, counts[path, check], flagged files): the ``top`` worst files."""
    flagged = [f for f in report.data["files"] if f["sites"]]
    totals = {
        f["path"]: sum(n for sev in f["sites"].values() for n in sev.values()) for f in flagged
    }
    worst = sorted(flagged, key=lambda f: (-totals[f["path"]], f["path"]))[:top]
    checks = sorted({c for f in worst for c in f["sites"]})
    matrix = np.array(
        [[sum(f["sites"].get(c, {}).values()) for c in checks] for f in worst], dtype=np.int64
    ).reshape(len(worst), len(checks))
    return [f["path"] for f in worst], checks, matrix, len(flagged)


def _heatmap(
    fig: Figure, ax: Axes, names: list[str], checks: list[str], matrix: np.ndarray
) -> None:
    from matplotlib.colors import LogNorm, Normalize

    shown = np.ma.masked_equal(matrix, 0)
    top = max(int(matrix.max()), 2)
    norm = LogNorm(vmin=1, vmax=top) if top > 20 else Normalize(vmin=0, vmax=top)
    image = ax.imshow(shown, aspect="auto", cmap="Reds", norm=norm)
    ax.set_xticks(range(len(checks)), checks, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("check")
    ax.set_ylabel("shard (file)")
    for (i, j), n in np.ndenumerate(matrix):
        if n:
            dark = n > math.sqrt(max(matrix.max(), 1))
            ax.text(
                j,
                i,
                f"{n:,}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if dark else "black",
            )
    scale = ", log scale" if top > 20 else ""
    fig.colorbar(image, ax=ax, label=f"findings (count{scale})", shrink=0.8)


def _by_shard(report: ReportData, top: int) -> Figure:
    paths, checks, matrix, n_flagged = _findings_matrix(report, top)
    total = len(report.data["files"])
    fig = _new_figure(10, 1.6 + 0.35 * max(len(paths), 3))
    if not paths:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"no findings: all {total} files are clean", ha="center", va="center")
        ax.set_title("Findings per shard and check")
        return fig
    heat, bars = fig.subplots(1, 2, width_ratios=[3, 1], sharey=True)
    names = _short_names(paths)
    _heatmap(fig, heat, names, checks, matrix)
    shown = f"top {len(paths)} of " if len(paths) < n_flagged else ""
    heat.set_title(f"Findings per shard and check ({shown}{n_flagged} flagged of {total} files)")
    status = {f["path"]: f["status"] for f in report.data["files"]}
    colors = ["#7f0000" if status[p] == "corrupt" else "#d62728" for p in paths]
    bars.barh(range(len(paths)), matrix.sum(axis=1), color=colors)
    bars.set_xlabel("findings (count)")
    bars.set_title("per shard")
    if "corrupt" in status.values():
        from matplotlib.patches import Patch

        bars.legend(
            handles=[
                Patch(color="#d62728", label="flagged"),
                Patch(color="#7f0000", label="corrupt"),
            ],
            loc="lower right",
        )
    return fig


# -- one column's distribution ---------------------------------------------------------------


def _column_entries(report: ReportData, name: str) -> list[dict[str, Any]]:
    files = [f for f in report.data["files"] if f["status"] != "corrupt"]
    having = [f for f in files if name in (f.get("columns") or {})]
    if having:
        return having
    import difflib

    known = sorted({c for f in files for c in (f.get("columns") or {})})
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(
        f"report {str(report.dir)!r}: no scanned file has a column {name!r}{hint}; "
        f"columns: {', '.join(known[:20]) or 'none'}"
    )


def _column_arrays(report: ReportData, entry: dict[str, Any], name: str) -> Iterator[pa.Array]:
    """The column's values in one file, chunk by chunk (Parquet: that column only)."""
    if entry["format"] == "parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(entry["path"]).iter_batches(columns=[name]):
            yield batch.column(0)
        return
    from datacheck.report._explore import _reader_options, _stream_chunks

    for _, table in _stream_chunks(entry, _reader_options(report)):
        if name in table.column_names:
            yield from table[name].chunks


def _leaves(arr: pa.Array) -> pa.Array:
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        arr = pc.list_flatten(arr)
    return arr


class _Values:
    """Finite values (capped), and counts of NaN, +Inf, -Inf and null, of one column."""

    def __init__(self, cap: int) -> None:
        self.cap, self.parts, self.kept = cap, [], 0
        self.nan = self.posinf = self.neginf = self.null = self.total = 0
        self.arrow_type: pa.DataType | None = None

    def add(self, arr: pa.Array) -> None:
        arr = _leaves(arr)
        self.arrow_type = self.arrow_type or arr.type
        if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
            raise UsageError(f"column of type {arr.type} is not numeric; plot.column draws numbers")
        self.total += len(arr)
        self.null += arr.null_count
        x = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
        if arr.null_count:
            x = x[np.asarray(arr.is_valid())]
        nan = np.isnan(x)
        self.nan += int(nan.sum())
        self.posinf += int(np.isposinf(x).sum())
        self.neginf += int(np.isneginf(x).sum())
        finite = x[np.isfinite(x)]
        take = finite[: max(self.cap - self.kept, 0)]
        self.parts.append(take)
        self.kept += len(take)

    @property
    def finite(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.empty(0)


def _thresholds(
    report: ReportData, name: str, arrow_type: pa.DataType | None
) -> list[tuple[float, str]]:
    """(x, label) of every bound the scan applied to this column (schema or defaults)."""
    from datacheck.checks._rules import default_rules

    is_float = arrow_type is not None and pa.types.is_floating(arrow_type)
    numeric = True
    rules = default_rules(is_float, numeric)
    spec = report.settings.get("schema")
    if spec:
        from datacheck.errors import DatacheckError
        from datacheck.schema import load_schema

        try:
            compiled = load_schema(spec)
            rules = compiled.rules_for(name, is_float, numeric) if compiled else rules
        except DatacheckError:
            pass
    out: list[tuple[float, str]] = []
    for b in rules.bounds:
        out += [(b.max_abs, f"|x| = {b.max_abs:g} ({b.check})"), (-b.max_abs, "")]
    for r in rules.ranges:
        if r.min is not None:
            out.append((r.min, f"min = {r.min:g} ({r.check})"))
        if r.max is not None:
            out.append((r.max, f"max = {r.max:g} ({r.check})"))
    return out


def _flagged_values(report: ReportData, name: str) -> np.ndarray:
    """The finite bad values the manifest recorded for this column (extreme, out of range)."""
    import pyarrow.parquet as pq

    if not report.manifest_path.exists():
        return np.empty(0)
    table = pq.read_table(
        report.manifest_path, columns=["column", "value"], filters=[("column", "==", name)]
    )
    values = (
        pc.cast(table["value"], pa.float64(), safe=False)
        if table.num_rows
        else pa.array([], pa.float64())
    )
    x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    return x[np.isfinite(x)]


def _histogram(
    ax: Axes, finite: np.ndarray, marks: np.ndarray, limits: list[float], bins: int, integer: bool
) -> bool:
    """Histogram on a linear axis, or a symlog one when a few values or the thresholds
    dwarf the bulk of the data (which would otherwise shrink to one bar)."""
    from matplotlib.scale import SymmetricalLogTransform

    span = np.concatenate([finite, marks]) if len(marks) else finite
    bulk = float(np.percentile(np.abs(finite), 99)) if len(finite) else 1.0
    reach = np.abs(np.concatenate([span, np.asarray(limits, dtype=float)]))
    wide = len(span) and float(reach.max()) > 20 * max(bulk, 1e-12)
    if not wide:
        lo, hi = (float(span.min()), float(span.max())) if len(span) else (0.0, 1.0)
        if integer and hi - lo <= 200:  # one bar per integer value
            ax.hist(
                finite,
                bins=np.arange(lo - 0.5, hi + 1.5),
                color="#4c72b0",
                label="values",
                rwidth=0.8,
            )
        else:
            ax.hist(finite, bins=bins, color="#4c72b0", label="values")
        return False
    linthresh = max(bulk, 1e-12)
    tr = SymmetricalLogTransform(10, linthresh, 1.0)
    lo, hi = tr.transform(np.array([[span.min()], [span.max()]])).ravel()
    edges = tr.inverted().transform(np.linspace(lo, hi, bins + 1).reshape(-1, 1)).ravel()
    edges[0], edges[-1] = span.min(), span.max()  # the round trip must not drop the extremes
    ax.hist(finite, bins=edges, color="#4c72b0", label="values")
    ax.set_xscale("symlog", linthresh=linthresh)
    return True


def _column(report: ReportData, name: str, bins: int, max_values: int) -> Figure:
    entries = _column_entries(report, name)
    values = _Values(max_values)
    for e in entries:
        for arr in _column_arrays(report, e, name):
            values.add(arr)
    finite, marks = values.finite, _flagged_values(report, name)
    fig = _new_figure(9, 4.5)
    ax = fig.add_subplot()
    integer = values.arrow_type is not None and pa.types.is_integer(values.arrow_type)
    thresholds = _thresholds(report, name, values.arrow_type)
    symlog = _histogram(ax, finite, marks, [x for x, _ in thresholds], bins, integer)
    ax.set_yscale("log")
    for x, label in thresholds:
        ax.axvline(x, color="#ff7f0e", ls="--", lw=1.2, label=label or None)
    if len(marks):
        ax.plot(
            marks,
            np.full(len(marks), 0.04),
            "^",
            color="#d62728",
            ms=9,
            clip_on=False,
            label=f"flagged values ({len(marks)})",
            transform=ax.get_xaxis_transform(),
        )
    scale = ", symlog scale" if symlog else ""
    ax.set_xlabel(f"{name} (value in data units{scale})")
    ax.set_ylabel("values per bin (count, log scale)")
    sampled = f", first {len(finite):,} finite" if values.kept >= max_values else ""
    notes = (
        f"NaN {values.nan:,}, +Inf {values.posinf:,}, -Inf {values.neginf:,}, null {values.null:,}"
    )
    ax.set_title(
        f"Distribution of {name!r}: {values.total:,} values in {len(entries)} files"
        f"{sampled}\nnot plotted: {notes}"
    )
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    return fig


# -- the training timeline -------------------------------------------------------------------


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
        hist = read_history(path)
    except InputError:  # e.g. a guard log with a torn last line: read what parses
        return (*read_guard_log(path), None)
    nums = {
        k: [math.nan if v is None else float(v) for v in getattr(hist, k)]
        for k in ("loss", "grad_norm", "lr")
    }
    return pd.DataFrame({"step": hist.steps, **nums}), list(hist.events), analyze(hist)


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


def _timeline(path: str | os.PathLike[str]) -> Figure:
    log, events, tl = _load_log(path)
    fig = _new_figure(10, 6)
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


class ReportPlots:
    """``report.plot``: plots of one scan report (each method returns a matplotlib Figure)."""

    def __init__(self, report: ReportData) -> None:
        self._report = report

    def by_shard(self, top: int = 30) -> Figure:
        """Findings per shard and check: a heatmap of the ``top`` worst files, and totals."""
        if top < 1:
            raise UsageError(f"top={top!r} must be >= 1")
        return _by_shard(self._report, top)

    def column(self, name: str, *, bins: int = 60, max_values: int = 2_000_000) -> Figure:
        """Distribution of column ``name`` over every readable file, with the scan's
        thresholds (dashed) and the flagged finite values (red marks); NaN/Inf/null counts in
        the corner.  At most ``max_values`` finite values are read into the histogram.
        """
        if bins < 1 or max_values < 1:
            raise UsageError(f"bins={bins!r} and max_values={max_values!r} must be >= 1")
        return _column(self._report, name, bins, max_values)

    def timeline(self, path: str | os.PathLike[str]) -> Figure:
        """Loss and grad norm per step from a training log (the TrainingGuard's JSON Lines log,
        or any log ``datacheck logs`` reads), with the guard's events, the loss-spike
        threshold and the suggested restart step.
        """
        return _timeline(path)

    def __repr__(self) -> str:
        return "<plots: by_shard(), column(name), timeline(guard_log)>"
