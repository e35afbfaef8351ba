"""What the gate fails first, file by file: the one ranking the views share (plots, HTML).

A corrupt file first (it has to be re-generated), then the files the gate fails whole (a file-
or column-level error: ``schema``, ``drift``, ``unnormalized``, ``null_column``), then files with
row errors (most first), then files with warnings only; by path within a tier.  Raw counts
never outrank what gates: one drift error is a whole file, 1,396 warnings are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datacheck.report._data import ReportData

__all__ = ["Shard", "gate_order", "whole_file_check"]


@dataclass(frozen=True)
class Shard:
    """One file with findings, as the gate sees it."""

    path: str
    status: str
    rows: int
    errors: dict[str, int]
    """check -> error-level findings."""
    warnings: dict[str, int]
    """check -> warning-level findings."""
    whole: tuple[str, ...]
    """The checks that fail this file whole (``corrupt``; file- or column-level errors)."""
    error: str
    """The reader's error of a corrupt file."""

    @property
    def tier(self) -> int:
        """0 corrupt, 1 failed whole, 2 row errors, 3 warnings only."""
        if self.status == "corrupt":
            return 0
        return 1 if self.whole else 2 if self.errors else 3

    @property
    def rank(self) -> tuple[int, int, int, str]:
        """What gates first: corrupt, failed whole, most row errors, most warnings."""
        return (self.tier, -sum(self.errors.values()), -sum(self.warnings.values()), self.path)


def whole_file_check(check: str) -> bool:
    """A check whose finding is about the whole file or a whole column (row null)."""
    from datacheck.checks import CHECKS

    spec = CHECKS.get(check)
    return spec is not None and spec.level in ("file", "column")


def gate_order(report: ReportData) -> list[Shard]:
    """Every file with a finding (or corrupt), ranked by what the gate fails first."""
    out = []
    for f in report.data["files"]:
        if not f["sites"] and f["status"] != "corrupt":
            continue
        sites = f["sites"]
        errors = {c: int(s.get("error", 0)) for c, s in sites.items() if s.get("error")}
        warnings = {c: int(s.get("warning", 0)) for c, s in sites.items() if s.get("warning")}
        whole = tuple(c for c in errors if whole_file_check(c))
        if f["status"] == "corrupt" and "corrupt" not in whole:
            whole = ("corrupt", *whole)
        error = str(f.get("error") or "")
        out.append(Shard(f["path"], f["status"], int(f["rows"]), errors, warnings, whole, error))
    return sorted(out, key=lambda s: s.rank)
