"""Plots of a scan report and of a guard log: ``report.plot.by_shard()``, ``.column(name)``,
``.stats(name)``, ``.timeline(log)``.

Every method returns a :class:`matplotlib.figure.Figure` that is not registered with pyplot:
nothing leaks when a notebook draws hundreds, and Jupyter shows it once (save it elsewhere
with ``fig.savefig(...)``).  The column plots live in :mod:`._plots_column`, the training
timeline in :mod:`._plots_timeline`, the Figure they share in :mod:`._figure`.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np

from datacheck.errors import UsageError
from datacheck.report._figure import new_figure, short_names

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from datacheck.report._data import ReportData

__all__ = ["ReportPlots"]


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
    fig = new_figure(10, 1.6 + 0.35 * max(len(paths), 3))
    if not paths:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"no findings: all {total} files are clean", ha="center", va="center")
        ax.set_title("Findings per shard and check")
        return fig
    heat, bars = fig.subplots(1, 2, width_ratios=[3, 1], sharey=True)
    names = short_names(paths)
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
        from datacheck.report._plots_column import column

        if bins < 1 or max_values < 1:
            raise UsageError(f"bins={bins!r} and max_values={max_values!r} must be >= 1")
        return column(self._report, name, bins, max_values)

    def stats(self, name: str) -> Figure:
        """Each shard's mean and std of column ``name`` against what ``drift`` and
        ``unnormalized`` compared them with (the schema's ``reference_stats`` / ``normalized``
        target, or the median of the shards), the allowed band shaded, flagged shards in red.
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
