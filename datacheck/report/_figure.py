"""What every plot shares: a Figure outside pyplot's registry, and short shard names.

matplotlib is imported on first use only; without a display and without a backend chosen by
the user, the Agg backend is selected.
"""

from __future__ import annotations

import functools
import io
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from datacheck._extras import needs
from datacheck.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["new_figure", "power_label", "short_names", "symlog_axis"]


def new_figure(width: float, height: float) -> Figure:
    """A Figure outside pyplot's registry (Agg when there is no display)."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise UsageError(needs("plots", "matplotlib", "notebook")) from exc

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


def short_names(paths: Sequence[str]) -> list[str]:
    """Paths relative to their common folder (the file names when they share one)."""
    if len(paths) < 2:
        return [os.path.basename(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in paths])
    return [os.path.relpath(p, root) for p in paths]


def symlog_axis(
    ax: Axes,
    linthresh: float,
    axis: str = "x",
    *,
    low: float | None = None,
    high: float | None = None,
) -> None:
    """A symlog axis whose tick labels never crowd: 0 and the decades at or above
    ``linthresh`` only (none inside the linear region, where they would pile up), thinned to
    at most 9, written ``100`` / ``-10⁶``."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("symlog", linthresh=linthresh)
    if low is not None or high is not None:
        getattr(ax, f"set_{axis}lim")(low, high)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(_symlog_ticks_class()(linthresh))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(FuncFormatter(lambda x, _: power_label(x)))


def power_label(x: float) -> str:
    """``0``, ``0.01``, ``100``, ``-1000``, ``$10^{6}$``: short labels for decades."""
    if x == 0:
        return "0"
    k = math.log10(abs(x))
    if abs(k - round(k)) > 1e-9 or -2 <= k < 4:
        return f"{x:g}".replace("-", "\N{MINUS SIGN}")
    sign = "\N{MINUS SIGN}" if x < 0 else ""
    return f"{sign}$10^{{{round(k)}}}$"


@functools.cache
def _symlog_ticks_class() -> type:
    from matplotlib.ticker import Locator

    class _SymlogTicks(Locator):
        """0 and ±10^k for every decade at or above ``linthresh`` in view, at most ``most``."""

        def __init__(self, linthresh: float, most: int = 9) -> None:
            self.linthresh, self.most = linthresh, most

        def __call__(self) -> list[float]:
            if self.axis is None:
                return []
            lo, hi = self.axis.get_view_interval()
            return self.tick_values(lo, hi)

        def tick_values(self, vmin: float, vmax: float) -> list[float]:
            lo, hi = min(vmin, vmax), max(vmin, vmax)
            first = math.ceil(math.log10(self.linthresh))
            pos = [10.0**k for k in range(first, _top_decade(hi) + 1)]
            neg = [-(10.0**k) for k in range(first, _top_decade(-lo) + 1)]
            step = max(1, math.ceil((len(pos) + len(neg)) / max(self.most - 1, 1)))
            zero = [0.0] if lo <= 0 <= hi else []
            return sorted(neg[::step] + zero + pos[::step])

    return _SymlogTicks


def _top_decade(x: float) -> int:
    """The largest k with 10^k <= x (very negative when x <= 0: no decade)."""
    return math.floor(math.log10(x)) if x > 0 else -(10**6)
