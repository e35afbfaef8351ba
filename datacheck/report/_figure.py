"""What every plot shares: a Figure outside pyplot's registry, and short shard names.

matplotlib is imported on first use only; without a display and without a backend chosen by
the user, the Agg backend is selected.
"""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from datacheck.errors import UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["new_figure", "short_names"]


def new_figure(width: float, height: float) -> Figure:
    """A Figure outside pyplot's registry (Agg when there is no display)."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise UsageError("plots need matplotlib: pip install 'datacheck-ml[notebook]'") from exc

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
