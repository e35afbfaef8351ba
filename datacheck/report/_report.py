"""The :class:`Report` a scan returns: its data (:mod:`._data`) plus the views over it.

The views (:mod:`._text`, :mod:`._html`, :mod:`._plots`, :mod:`._explore`) depend only on
:class:`~datacheck.report._data.ReportData`; :class:`Report` sits above them and delegates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datacheck.report._data import ReportData

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Report", "load_report"]


class Report(ReportData):
    """A scan's results, read from its output folder, with exploration, plots and HTML.

    Attributes:
        dir: the output folder.
        data: the parsed ``report.json``.
    """

    def flagged_rows(self, path: str | os.PathLike[str], context: int = 0) -> pd.DataFrame:
        """The flagged rows of one file (plus ``context`` neighbours), indexed by row number.

        ``path`` is the path as the report has it, or a unique suffix such as the file name.
        Only the Parquet row groups holding those rows are read.  See
        :func:`datacheck.report._explore.flagged_rows`.
        """
        from datacheck.report._explore import flagged_rows

        return flagged_rows(self, path, context)

    def exclusion_list(self, order: Any = None, *, severity: str = "error") -> pd.DataFrame:
        """The (path, row, dataset index) triples a loader should skip: rows with a finding
        at or above ``severity`` (``"error"``, the default, or ``"warning"``), and every row
        of a file the gate fails whole.  See
        :func:`datacheck.report._explore.exclusion_list`."""
        from datacheck.report._explore import exclusion_list

        return exclusion_list(self, order, severity=severity)

    def clean_copy(
        self, dest: str | os.PathLike[str], *, severity: str = "error", overwrite: bool = False
    ) -> pd.DataFrame:
        """Write the scanned files into ``dest`` without their rows that have a finding at or
        above ``severity`` (``"error"``, the default, or ``"warning"``), same format, and
        without the files the gate fails whole (corrupt; ``drift``, ``schema``,
        ``unnormalized``); returns what was copied and dropped per file.  See
        :func:`datacheck.report._explore_copy.clean_copy`."""
        from datacheck.report._explore_copy import clean_copy

        return clean_copy(self, dest, severity=severity, overwrite=overwrite)

    def samples(self, per: str = "check", k: int = 5) -> pd.DataFrame:
        """The first ``k`` findings of each check (``per="check"``) or file (``per="path"``),
        errors first: path, row, column, check, severity, value (or message), count."""
        import pandas as pd

        from datacheck.errors import UsageError
        from datacheck.report._samples import COLUMNS, sample_findings

        if per not in ("check", "path") or k < 1:
            raise UsageError(f"samples(per={per!r}, k={k!r}): per is 'check' or 'path', k >= 1")
        rows = sample_findings(self, per, k)
        return pd.DataFrame(rows, columns=COLUMNS).astype({"row": "Int64", "count": "Int64"})

    @property
    def plot(self) -> Any:
        """Plots (matplotlib Figures): ``by_shard()``, ``column(name)``, ``stats(name)``,
        ``timeline(log)``."""
        from datacheck.report._plots import ReportPlots

        return ReportPlots(self)

    def write_html(self, dest: str | os.PathLike[str] | None = None) -> Path:
        """Write a self-contained ``report.html`` (default: into the report folder)."""
        from datacheck.report._html import write_html

        return write_html(self, dest)

    def _repr_html_(self) -> str:
        from datacheck.report._html import summary_html

        return summary_html(self)


def load_report(directory: str | os.PathLike[str]) -> Report:
    """Load a scan's report folder (``report.json`` + ``quarantine.parquet``).

    Raises:
        InputError: the folder holds no readable report.
    """
    return Report(directory)
