"""What a work unit sends back (:class:`UnitResult`) and the collector that gathers a unit's
findings as it is checked, spilling them to its part file past :data:`SPILL_ROWS`.

:mod:`~datacheck.engine._unit` checks a unit; this module holds what crosses back to the
scan (results, parts), so the checking code and the result's shape change apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import pyarrow as pa

from datacheck import findings as fnd
from datacheck.checks._numpy import Hits
from datacheck.checks._registry import Severity
from datacheck.formats import WorkUnit

__all__ = ["SPILL_ROWS", "Collector", "UnitResult", "finish", "poison_result", "worker_parts_dir"]


@dataclass
class UnitResult:
    """What a work unit sends back: counts and where its findings are (never raw data)."""

    key: str
    path: str
    format: str
    part: int
    n_parts: int
    rows: int = 0
    bytes: int = 0
    columns: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """Bad values per check (every element of a vector counted)."""
    sites: dict[str, dict[str, int]] = field(default_factory=dict)
    """Manifest rows per check and severity."""
    corrupt: str | None = None
    findings_rows: int = 0
    part_file: str | None = None
    table: pa.Table | None = None
    seconds: float = 0.0
    profile: dict[str, dict[str, Any]] | None = None
    """Per-column statistics (``ColumnProfile.state()``: plain, small), when the scan profiles."""
    nulls: dict[str, int] = field(default_factory=dict)
    """Null rows per column where a null is a finding (``null_column`` is judged on them)."""
    shapes: dict[str, list[int] | None] | None = None
    """Tensor files: each key's shape past the sample axis (None for a 0-d value), which tells
    the shards of one array from arrays that only sit side by side."""
    part_on_worker: bool = False
    """``part_file`` is on the worker that ran the unit, which could not see the output folder
    (a cluster without a shared filesystem): the executor brings it over
    (:class:`datacheck.execute.WorkerFiles`)."""
    dialect: dict[str, str] = field(default_factory=dict)
    """How a text file was read (:attr:`datacheck.formats.Opened.dialect`)."""

    def worker_files(self) -> list[str]:
        """Files on the worker that the client must fetch (the findings' part)."""
        return [self.part_file] if self.part_on_worker and self.part_file else []

    def localised(self, moved: dict[str, str]) -> UnitResult:
        """This result with its worker files replaced by the client's copies."""
        if self.part_file in moved:
            self.part_file, self.part_on_worker = moved[self.part_file], False
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # The field values in order, not a dict naming each: a worker sends one result per
        # image, and the parent builds them back with one call.
        return (UnitResult, _values(self))


_values = attrgetter(*(f.name for f in fields(UnitResult)))


def poison_result(unit: WorkUnit, message: str) -> UnitResult:
    """The result of a unit no process could read (it crashed them): one ``corrupt`` finding.

    The scan hands this to the executor as its ``on_poison`` callback.
    """
    res = UnitResult(unit.key, unit.path, unit.format, unit.part, unit.n_parts)
    res.bytes = unit.size // max(unit.n_parts, 1)
    res.corrupt = message
    res.counts = {"corrupt": 1}
    res.sites = {"corrupt": {Severity.ERROR.value: 1}}
    res.table = fnd.findings_table(
        [fnd.Finding(unit.path, "corrupt", Severity.ERROR, value=message)]
    )
    res.findings_rows = 1
    return res


SPILL_ROWS = 1 << 20
"""Findings a unit holds in memory before it writes them to its part file (~32 MiB)."""


class Collector:
    """Accumulates findings of one unit as Arrow tables plus counters (exact).

    With a part file to write (``parts_dir``), findings past :data:`SPILL_ROWS` are streamed
    to it as they come, so a file of 2**26 NaN never holds all its findings in memory.
    """

    __slots__ = (
        "_parts_checked",
        "_parts_dir",
        "counts",
        "fallback",
        "spills",
        "held",
        "key",
        "nulls",
        "part",
        "path",
        "sites",
        "tables",
    )

    def __init__(self, path: str, parts_dir: str | None = None, key: str = "") -> None:
        self.path = path
        self.tables: list[pa.Table] = []
        self.held = 0
        """Findings in ``tables``."""
        self.counts: dict[str, int] = {}
        self.sites: dict[str, dict[str, int]] = {}
        self._parts_dir = parts_dir
        self._parts_checked = parts_dir is None
        """Whether ``parts_dir`` was looked for (when first needed: most units of a clean
        dataset never write a part)."""
        self.key = key
        self.part: fnd.PartWriter | None = None
        self.spills = parts_dir is not None
        """Whether findings past :data:`SPILL_ROWS` go to a part (the scan gave a folder)."""
        self.fallback: str | None = None
        """Where parts go when this worker cannot see ``parts_dir`` (its own temp folder)."""
        self.nulls: dict[str, int] = {}
        """Null rows per column a null rule applies to (a column all or mostly null is a
        finding of its own, once the file's units are merged)."""

    @property
    def parts_dir(self) -> str | None:
        """The folder for part files, None when there is none this worker can see."""
        if not self._parts_checked:
            self._parts_checked = True
            if not os.path.isdir(self._parts_dir or ""):
                self._parts_dir = None
        return self._parts_dir

    def _count(self, check: str, n: int, severity: str, sites: int) -> None:
        self.counts[check] = self.counts.get(check, 0) + n
        by_sev = self.sites.setdefault(check, {})
        by_sev[severity] = by_sev.get(severity, 0) + sites

    def _add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.held += table.num_rows
        if self.held >= SPILL_ROWS and self.spills:
            self.spill()

    def spill(self) -> None:
        """Write the findings held so far to the part file: in ``parts_dir``, or, on a worker
        that cannot see it, in a folder of the worker's own, fetched by the executor."""
        if self.part is None:
            folder = self.parts_dir
            if folder is None:
                folder = self.fallback = worker_parts_dir()
            self.part = fnd.PartWriter(folder, self.key)
        self.part.write(fnd.concat(self.tables))
        self.tables, self.held = [], 0

    def hits(self, column: str | None, hits: Hits, row_offset: int) -> None:
        self._count(hits.check, hits.total, hits.severity.value, len(hits.rows))
        self._add(fnd.hits_table(self.path, column, hits, row_offset))

    def finding(self, f: fnd.Finding) -> None:
        self._count(f.check, f.count, f.severity.value, 1)
        self._add(fnd.findings_table([f]))

    def findings(self, fs: list[fnd.Finding]) -> None:
        """Many scalar findings as one table."""
        if not fs:
            return
        for f in fs:
            self._count(f.check, f.count, f.severity.value, 1)
        self._add(fnd.findings_table(fs))


def worker_parts_dir() -> str:
    """A folder of this worker process's own for parts the client will fetch."""
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"datacheck-parts-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    return folder


def finish(res: UnitResult, col: Collector) -> None:
    res.counts = col.counts
    res.sites = col.sites
    res.nulls = col.nulls
    if col.part is not None:  # spilled already: the rest joins the part
        col.spill()
        res.findings_rows = col.part.rows
        res.part_file = col.part.close()
        res.part_on_worker = col.fallback is not None
        return
    if not col.tables:  # most units of a clean dataset (one per image): no table to build
        return
    table = fnd.concat(col.tables)
    res.findings_rows = table.num_rows
    # A worker that cannot see parts_dir (remote cluster, no shared filesystem) sends a few
    # findings (under SPILL_ROWS) back with the result; the client's journal writes them to a
    # part on arrival.  More were spilled to the worker's own folder (above), fetched from it.
    parts_dir = col.parts_dir
    if parts_dir is None or table.num_rows == 0:
        res.table = table if table.num_rows else None
        return
    res.part_file = fnd.write_part(table, parts_dir, res.key)
