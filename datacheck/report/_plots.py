"""Plots of a scan report and of a guard log: ``report.plot.by_shard()``, ``.column(name)``,
``.stats(name)``, ``.timeline(log)``.

Every method returns a :class:`matplotlib.figure.Figure` that is not registered with pyplot:
nothing leaks when a notebook draws hundreds, and Jupyter shows it once (save it elsewhere
with ``fig.savefig(...)``).  The column plots live in :mod:`._plots_column`, the training
timeline in :mod:`._plots_timeline`, the Figure they share in :mod:`._figure`.

Plots rank by what gates, not by raw counts: a file the gate fails whole (corrupt, or a
file- or column-level error such as ``schema``, ``drift``, ``unnormalized``) comes first and is
drawn in :data:`WHOLE_COLOR`, then files with row errors (red), then files with warnings only
(amber); one error is never a pale cell beside a thousand warnings.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from datacheck.errors import UsageError
from datacheck.report._figure import new_figure, short_names, symlog_axis
from datacheck.report._rank import Shard, gate_order, whole_file_check

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from datacheck.report._data import ReportData

__all__ = ["ERROR_COLOR", "WARNING_COLOR", "WHOLE_COLOR", "ReportPlots"]

WHOLE_COLOR = "#7f0000"
"""A file the gate fails whole: corrupt, or a file- or column-level error."""
ERROR_COLOR = "#d62728"
WARNING_COLOR = "#e8a33d"
_WHOLE_LABEL = {"corrupt": "corrupt"}
"""What a whole-file cell says (other checks: ``whole file``)."""


def _check_order(shards: list[Shard]) -> list[str]:
    """``corrupt``, the other whole-file checks (by the files they fail), then checks by their
    errors, then warning-only checks."""
    checks = {c for s in shards for c in (*s.errors, *s.warnings, *s.whole)}
    errors = {c: sum(s.errors.get(c, 0) for s in shards) for c in checks}
    failed = {c: sum(c in s.whole for s in shards) for c in checks}

    def key(c: str) -> tuple[bool, bool, bool, int, int, str]:
        whole = whole_file_check(c)
        return (c != "corrupt", not whole, errors[c] == 0, -failed[c], -errors[c], c)

    return sorted(checks, key=key)


# -- findings per shard ----------------------------------------------------------------------


def _cells(shards: list[Shard], checks: list[str]) -> np.ndarray:
    """RGBA per (shard, check): whole-file dark red, errors red (never pale), warnings amber."""
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm, to_rgba

    def norm(values: list[int]) -> LogNorm:
        return LogNorm(vmin=1, vmax=max([10, *values]))

    errors = norm([n for s in shards for n in s.errors.values()])
    warnings = norm([n for s in shards for n in s.warnings.values()])
    reds, ambers = colormaps["Reds"], colormaps["YlOrBr"]
    image = np.ones((len(shards), len(checks), 4))
    for i, s in enumerate(shards):
        for j, c in enumerate(checks):
            if c in s.whole:
                image[i, j] = to_rgba(WHOLE_COLOR)
            elif s.errors.get(c):
                image[i, j] = reds(0.55 + 0.35 * float(errors(s.errors[c])))
            elif s.warnings.get(c):
                image[i, j] = ambers(0.12 + 0.3 * float(warnings(s.warnings[c])))
    return image


def _cell_text(s: Shard, check: str) -> tuple[str, str, str]:
    """(text, color, weight) written in a cell."""
    n_err, n_warn = s.errors.get(check, 0), s.warnings.get(check, 0)
    if check in s.whole:
        return _WHOLE_LABEL.get(check, "whole file"), "white", "bold"
    if n_err:
        more = f" +{n_warn:,}w" if n_warn else ""
        return f"{n_err:,}{more}", "white", "bold"
    if n_warn:
        return f"{n_warn:,}w", "black", "normal"
    return "", "black", "normal"


def _heatmap(ax: Axes, names: list[str], shards: list[Shard], checks: list[str]) -> None:
    from matplotlib.patches import Rectangle

    ax.imshow(_cells(shards, checks), aspect="auto", interpolation="nearest")
    for i, s in enumerate(shards):  # a whole-file check at warning level: hatched, its own mark
        for j, c in enumerate(checks):
            if whole_file_check(c) and c not in s.whole and s.warnings.get(c):
                ax.add_patch(
                    Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        fill=False,
                        hatch="///",
                        lw=0,
                        edgecolor=WHOLE_COLOR,
                    )
                )
    ax.set_xticks(range(len(checks)), checks, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    for label, s in zip(ax.get_yticklabels(), shards, strict=True):
        if s.tier <= 1:
            label.set_color(WHOLE_COLOR)
            label.set_fontweight("bold")
    for i, s in enumerate(shards):
        if s.status == "corrupt":  # one band across the row: the file must be re-generated
            ax.add_patch(Rectangle((-0.5, i - 0.5), len(checks), 1, color=WHOLE_COLOR, zorder=2))
            why = f"corrupt: {s.error}" if s.error else "corrupt"
            ax.text(
                -0.4,
                i,
                why[:90],
                color="white",
                fontweight="bold",
                fontsize=8,
                va="center",
                ha="left",
                zorder=3,
                clip_on=True,
            )
            continue
        for j, c in enumerate(checks):
            text, color, weight = _cell_text(s, c)
            if text:
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=8, color=color, fontweight=weight
                )
    ax.set_xlabel("check")
    ax.set_ylabel("shard (file), what gates first")


def _bars(ax: Axes, shards: list[Shard]) -> None:
    """Errors and warnings per shard on a symlog axis (1 beside 1,000 stays visible); a file
    that fails whole is a full-width band."""
    y = np.arange(len(shards))
    errors = np.array([sum(s.errors.values()) for s in shards], float)
    warnings = np.array([sum(s.warnings.values()) for s in shards], float)
    ax.barh(y, errors, color=ERROR_COLOR, label="errors")
    ax.barh(y, warnings, left=errors, color=WARNING_COLOR, label="warnings")
    symlog_axis(ax, 1.0, "x", low=0.0, high=max(float((errors + warnings).max()), 10.0) * 1.5)
    for i, s in enumerate(shards):
        if s.tier <= 1:
            ax.axhspan(i - 0.4, i + 0.4, color=WHOLE_COLOR, zorder=2)
            text = "corrupt" if s.tier == 0 else "fails whole"
            ax.text(
                0.03,
                i,
                text,
                transform=ax.get_yaxis_transform(),
                color="white",
                fontweight="bold",
                fontsize=8,
                va="center",
                zorder=3,
            )
    ax.set_xlabel("findings (count, symlog)")
    ax.set_title("per shard")


def _legend(fig: Figure) -> None:
    from matplotlib.patches import Patch

    handles = [
        Patch(color=WHOLE_COLOR, label="fails the whole file (corrupt, schema, drift, ...)"),
        Patch(color=ERROR_COLOR, label="errors (count; darker: more)"),
        Patch(color=WARNING_COLOR, label="warnings only (count, w)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)


def _by_shard(report: ReportData, top: int) -> Figure:
    ranked = gate_order(report)
    shards = ranked[:top]
    total = len(report.data["files"])
    fig = new_figure(10, 2.2 + 0.35 * max(len(shards), 3))
    if not shards:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"no findings: all {total} files are clean", ha="center", va="center")
        ax.set_title("Findings per shard and check")
        return fig
    heat, bars = fig.subplots(1, 2, width_ratios=[3, 1], sharey=True)
    _heatmap(heat, short_names([s.path for s in shards]), shards, _check_order(shards))
    _bars(bars, shards)
    tiers = [sum(s.tier == t for s in ranked) for t in range(4)]
    shown = f"top {len(shards)} of " if len(shards) < len(ranked) else ""
    heat.set_title(
        f"Findings per shard and check ({shown}{len(ranked)} flagged of {total} files)\n"
        f"{tiers[0]} corrupt · {tiers[1]} fail whole · {tiers[2]} with row errors · "
        f"{tiers[3]} warnings only",
        fontsize=10,
    )
    _legend(fig)
    return fig


class ReportPlots:
    """``report.plot``: plots of one scan report (each method returns a matplotlib Figure)."""

    def __init__(self, report: ReportData) -> None:
        self._report = report

    def by_shard(self, top: int = 30) -> Figure:
        """Findings per shard and check, ranked by what gates: corrupt files and files the
        gate fails whole first (dark red), then row errors (red), then warnings (amber); the
        ``top`` first files, with their errors and warnings per shard beside them."""
        if top < 1:
            raise UsageError(f"top={top!r} must be >= 1")
        return _by_shard(self._report, top)

    def column(self, name: str, *, bins: int = 60, max_values: int = 2_000_000) -> Figure:
        """Distribution of column ``name`` over every readable file, with the scan's
        thresholds (dashed) and the flagged finite values (red marks); NaN/Inf/null counts in
        the corner.  At most ``max_values`` finite values are read into the histogram.
        """
        from datacheck.report._plots_column import column

        if bins < 1 or max_values < 1:
            raise UsageError(f"bins={bins!r} and max_values={max_values!r} must be >= 1")
        return column(self._report, name, bins, max_values)

    def stats(self, name: str) -> Figure:
        """Each shard's mean and std of column ``name`` against what ``drift`` and
        ``unnormalized`` compared them with (the schema's ``reference_stats`` / ``normalized``
        target, or the median of the shards), the allowed band shaded, flagged shards in red;
        a shard with no value (all null) is marked at the axis.
        Needs ``profile.json`` (a scan with ``--profile`` or a profile-based schema).
        """
        from datacheck.report._plots_column import stats

        return stats(self._report, name)

    def timeline(self, path: str | os.PathLike[str]) -> Figure:
        """Loss and grad norm per step from a training log (the TrainingGuard's JSON Lines log,
        or any log ``datacheck logs`` reads), with the guard's events, the loss-spike
        threshold and the suggested restart step.
        """
        from datacheck.report._plots_timeline import timeline

        return timeline(path)

    def __repr__(self) -> str:
        return "<plots: by_shard(), column(name), stats(name), timeline(guard_log)>"
