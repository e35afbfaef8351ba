"""One column's plots: its distribution (``report.plot.column``) and its per-shard statistics
against the reference (``report.plot.stats``, what ``drift`` and ``unnormalized`` compare)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck.errors import InputError, UsageError
from datacheck.report._figure import new_figure, short_names, symlog_axis

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from datacheck.report._data import ReportData

__all__ = ["COLUMN_LEVEL", "column", "column_level_findings", "stats"]

COLUMN_LEVEL = ("drift", "unnormalized")
"""Checks on a shard's statistics (one finding per column and shard, row null)."""
MAX_MARKS = 5000
"""Flagged values drawn as marks (the extremes are always kept); the legend counts them all."""
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


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
    from datacheck.formats import get_format
    from datacheck.report._explore import reader_options

    fmt = get_format(entry["format"])
    for _, table in fmt.tables(report.local_path(entry), reader_options(report), columns=[name]):
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
        self.cap, self.kept = cap, 0
        self.parts: list[np.ndarray] = []
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
    rules = default_rules(is_float, True)
    if report.schema is not None:
        rules = report.schema.rules_for(name, is_float, True)
    out: list[tuple[float, str]] = []
    for b in rules.bounds:
        out += [(b.max_abs, f"|x| = {b.max_abs:g} ({b.check})"), (-b.max_abs, "")]
    for r in rules.ranges:
        if r.min is not None:
            out.append((r.min, f"min = {r.min:g} ({r.check})"))
        if r.max is not None:
            out.append((r.max, f"max = {r.max:g} ({r.check})"))
    return out


_NO_VALUE = ("nan", "inf", "null", "corrupt", *COLUMN_LEVEL)
_KEPT = 1 << 17
"""Flagged values kept for the marks: evenly spaced in sorted order, smallest and largest
included (the marks are :data:`MAX_MARKS` of them)."""


def _flagged_values(report: ReportData, name: str) -> np.ndarray:
    """The finite bad values the manifest recorded at rows of this column (extreme, out of
    range, ...).  Column- and file-level findings (row null) carry a message, not a value."""
    from datacheck.report._manifest import iter_manifest

    # NaN, Inf and null findings carry no finite value: their row groups are skipped unread
    valued = [c for c in report.summary["sites"] if c not in _NO_VALUE]
    if not valued:
        return np.empty(0)
    where = {"column": [name], "check": valued}
    kept = np.empty(0)
    for table in iter_manifest(report.manifest_path, ["value"], where, rows_only=True):
        values = table["value"].filter(pc.match_substring_regex(table["value"], _NUMBER))
        x = np.asarray(values.cast(pa.float64()).to_numpy(), dtype=np.float64)
        kept = np.concatenate([kept, x[np.isfinite(x)]])
        if len(kept) > 2 * _KEPT:  # bounded: the quantiles _marks draws from, ends exact
            kept = np.sort(kept)[np.linspace(0, len(kept) - 1, _KEPT).round().astype(np.int64)]
    return kept


def _marks(x: np.ndarray) -> np.ndarray:
    """At most ``MAX_MARKS`` of the flagged values, the smallest and largest included."""
    if len(x) <= MAX_MARKS:
        return x
    x = np.sort(x)
    return x[np.linspace(0, len(x) - 1, MAX_MARKS).round().astype(np.int64)]


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
                bins=np.arange(lo - 0.5, hi + 1.5).tolist(),
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
    ax.hist(finite, bins=edges.tolist(), color="#4c72b0", label="values")
    symlog_axis(ax, linthresh, "x")
    return True


def column(report: ReportData, name: str, bins: int, max_values: int) -> Figure:
    """Distribution of one column over every readable file (see ``ReportPlots.column``)."""
    entries = _column_entries(report, name)
    values = _Values(max_values)
    for e in entries:
        for arr in _column_arrays(report, e, name):
            values.add(arr)
    finite, flagged = values.finite, _flagged_values(report, name)
    marks = _marks(flagged)
    fig = new_figure(9, 4.5)
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
            label=f"flagged values ({len(flagged):,})",
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


# -- one column's statistics per shard (drift, unnormalized) ---------------------------------


def column_level_findings(report: ReportData, name: str | None = None) -> list[dict[str, Any]]:
    """The ``drift`` / ``unnormalized`` findings (path, column, check, severity, value)."""
    from datacheck.report._manifest import iter_manifest

    where: dict[str, list[str]] = {"check": list(COLUMN_LEVEL)}
    if name is not None:
        where["column"] = [name]
    columns = ["path", "column", "check", "severity", "value"]
    return [
        {k: (str(v) if v is not None else None) for k, v in r.items()}
        for table in iter_manifest(report.manifest_path, columns, where)
        for r in table.to_pylist()
    ]


def _shard_stats(report: ReportData, name: str) -> dict[str, dict[str, Any]]:
    from datacheck.profile._stats import read_profile

    doc = read_profile(report.dir)
    shards = {path: cols[name] for path, cols in doc["files"].items() if name in cols}
    if not any(s.get("mean") is not None for s in shards.values()):
        known = sorted({c for cols in doc["files"].values() for c in cols})
        raise InputError(
            f"report {str(report.dir)!r}: profile.json has no statistics of a numeric column "
            f"{name!r}; columns: {', '.join(known[:20]) or 'none'}"
        )
    return shards


def _target(label: str, spec: Any, color: str) -> dict[str, Any]:
    return {
        "label": label,
        "mean": float(spec.mean),
        "std": float(spec.std),
        "shift": float(spec.max_mean_shift),
        "ratio": float(spec.max_std_ratio),
        "color": color,
    }


def _targets(
    report: ReportData, name: str, shards: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """What the shards were compared with: the schema's reference_stats (drift), its
    normalized target (unnormalized), else the median of the shards (consensus drift)."""
    from types import SimpleNamespace

    from datacheck.checks._rules import Reference

    spec = report.schema.columns.get(name) if report.schema is not None else None
    rules = spec.rules if spec is not None else None
    out = []
    if rules is not None and rules.reference is not None:
        out.append(_target("reference", rules.reference, "#ff7f0e"))
    if rules is not None and rules.normalized is not None:
        out.append(_target("normalized target", rules.normalized, "#2ca02c"))
    if not out:
        valued = [s for s in shards.values() if s.get("mean") is not None]
        median = SimpleNamespace(
            mean=statistics.median(s["mean"] for s in valued),
            std=statistics.median(s["std"] for s in valued),
            max_mean_shift=Reference.max_mean_shift,
            max_std_ratio=Reference.max_std_ratio,
        )
        out.append(_target(f"median of {len(valued)} shards", median, "#7f7f7f"))
    return out


def _no_value_marks(ax: Axes, values: np.ndarray) -> None:
    """A shard with no value to average (all null) cannot sit on the data axis: a red cross
    at the axis's left edge, labelled, so it is drawn and not silently left out."""
    for i in map(float, np.flatnonzero(~np.isfinite(values))):
        where = ax.get_yaxis_transform()  # x in axes fraction, y in data
        ax.plot([0.02], [i], "X", color="#d62728", ms=10, transform=where, clip_on=False)
        ax.text(
            0.05,
            i,
            "all null: no value",
            color="#d62728",
            fontsize=8,
            va="center",
            fontweight="bold",
            transform=where,
        )


def _mean_panel(ax: Axes, means: np.ndarray, colors: list[str], targets: list[dict]) -> None:
    y = np.arange(len(means))
    for t in targets:
        lo, hi = t["mean"] - t["shift"] * t["std"], t["mean"] + t["shift"] * t["std"]
        ax.axvspan(lo, hi, color=t["color"], alpha=0.15)
        label = f"{t['label']} mean {t['mean']:.4g} ± {t['shift']:g} std"
        ax.axvline(t["mean"], color=t["color"], ls="--", lw=1.2, label=label)
    _no_value_marks(ax, means)
    ax.scatter(means, y, c=colors, s=40, zorder=3)
    scale = max(t["std"] for t in targets) or 1.0
    centre = targets[0]["mean"]
    finite = means[np.isfinite(means)]
    if len(finite) and float(np.abs(finite - centre).max()) > 20 * scale * targets[0]["shift"]:
        symlog_axis(ax, scale, "x")
    ax.set_xlabel("shard mean (data units)")
    ax.legend(loc="best", fontsize=8)


def _std_panel(ax: Axes, stds: np.ndarray, colors: list[str], targets: list[dict]) -> None:
    y = np.arange(len(stds))
    for t in targets:
        if t["std"] > 0:
            ax.axvspan(t["std"] / t["ratio"], t["std"] * t["ratio"], color=t["color"], alpha=0.15)
            label = f"{t['label']} std {t['std']:.4g}, within x{t['ratio']:g}"
            ax.axvline(t["std"], color=t["color"], ls="--", lw=1.2, label=label)
    _no_value_marks(ax, stds)
    ax.scatter(stds, y, c=colors, s=40, zorder=3)
    stds = stds[np.isfinite(stds)]
    if len(stds) and (stds > 0).all():
        ax.set_xscale("log")
    ax.set_xlabel("shard std (data units, log scale)")
    ax.legend(loc="best", fontsize=8)


def _stat(shards: dict[str, dict[str, Any]], paths: list[str], key: str) -> np.ndarray:
    """One statistic per shard; NaN where the shard has none (all null)."""
    return np.array([np.nan if shards[p].get(key) is None else shards[p][key] for p in paths])


def stats(report: ReportData, name: str) -> Figure:
    """Each shard's mean and std of one column against what the scan compared them with."""
    shards = _shard_stats(report, name)
    paths = sorted(shards)
    flagged: dict[str, list[str]] = {}
    for f in column_level_findings(report, name):
        flagged.setdefault(f["path"], []).append(f["check"])
    targets = _targets(report, name, shards)
    colors = ["#d62728" if p in flagged else "#1f77b4" for p in paths]
    fig = new_figure(10, 1.8 + 0.35 * max(len(paths), 3))
    left, right = fig.subplots(1, 2, sharey=True)
    _mean_panel(left, _stat(shards, paths, "mean"), colors, targets)
    _std_panel(right, _stat(shards, paths, "std"), colors, targets)
    names = [
        f"{n} ({', '.join(flagged[p])})" if p in flagged else n
        for n, p in zip(short_names(paths), paths, strict=True)
    ]
    left.set_yticks(range(len(paths)), names)
    left.set_ylabel("shard (file); red: flagged")
    left.invert_yaxis()
    fig.suptitle(
        f"Statistics of {name!r} per shard: {len(flagged)} of {len(paths)} shards flagged "
        f"(drift / unnormalized); band = allowed"
    )
    return fig
