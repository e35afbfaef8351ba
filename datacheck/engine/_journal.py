"""The resume journal: finished work units, recorded in the output folder as they finish.

``OUT/journal.jsonl`` holds a header line (the scan's fingerprint: inputs, schema, unit size)
and then one JSON line per finished unit: its :class:`~datacheck.engine._result.UnitResult` without the
findings, which live in ``OUT/parts/<hash>.arrow`` (written, atomically, before the line).
The lines of quick units are held in memory and written together (a write per 1 ms image is
CPU taken from the cores its workers decode on): a line is written, with those held, once the
held units took :data:`_FLUSH_WORK_S` of worker time (a unit that took that long is written at
once), :data:`_FLUSH_EVERY_S` after the last write, after a corrupt unit (it may have cost a
crash or a time-out), and always when the scan stops.  Lines are fsync'ed at most once a
second.  So after a Ctrl-C, a pre-empted job (SIGTERM) or an error the journal lists every unit
whose findings are on disk; a killed scan (SIGKILL, out of memory) loses the held lines, under
:data:`_FLUSH_WORK_S` of worker time to redo; a machine crash also loses up to about the last
second of written lines (a torn last line is ignored).  A lost line only means that unit is
scanned again; a line never names a part that is not on disk.

``scan(..., resume=True)`` keeps the journal and parts, skips the units listed there whose key
(path, size, mtime or ETag, part) still matches the file as it is now, and merges their stored
results with the new ones, so the final report equals an uninterrupted run's.  A finished scan
deletes the journal and the parts: ``quarantine.parquet`` then holds the findings.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import fields
from operator import attrgetter
from pathlib import Path
from typing import Any

from datacheck import findings as fnd
from datacheck._jsonl import JsonlWriter, read_records
from datacheck.engine._result import UnitResult
from datacheck.errors import UsageError
from datacheck.formats import WorkUnit

__all__ = ["JOURNAL", "Journal"]

JOURNAL = "journal.jsonl"
_VERSION = 1
_FSYNC_EVERY_S = 1.0
"""Journal lines are fsync'ed at most this often: a machine crash loses at most the last
second of lines, and those units are simply scanned again (their parts are written before
their lines, so a line never points at findings that are not on disk)."""
_FLUSH_WORK_S = 0.02
"""Held lines are written once the units they record took this many seconds of worker time (a
write costs ~2 us: nothing beside a unit this long); a killed scan makes its resume redo less
finished work than this..."""
_FLUSH_EVERY_S = 0.2
"""...or when a unit finishes this long after the last write (units of microseconds)."""
_STORED = tuple(f.name for f in fields(UnitResult) if f.name not in ("table", "seconds"))
_stored_values = attrgetter(*_STORED)


class Journal:
    """Append-only record of finished units for one output folder.

    Args:
        out: the scan's output folder.
        parts: the folder holding per-unit findings parts (``OUT/parts``).
        fingerprint: settings that must match for a resume to be valid.
        resume: keep and reuse what an earlier run recorded; else start afresh.
    """

    def __init__(self, out: Path, parts: Path, fingerprint: dict[str, Any], resume: bool) -> None:
        self.path = out / JOURNAL
        self.parts = parts
        self._fingerprint = json.loads(json.dumps(fingerprint, default=str))
        self._done: dict[str, UnitResult] = {}
        if resume and self.path.exists():
            self._done = self._load()
        else:
            shutil.rmtree(parts, ignore_errors=True)
        parts.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or not resume
        self._writer = JsonlWriter(
            self.path, fresh=fresh, fsync=_FSYNC_EVERY_S, default=str, nan_as_text=False
        )
        self._flushed = time.monotonic()
        self._held_s = 0.0  # worker seconds of the units whose lines are held
        if fresh:
            self._writer.write([{"journal": _VERSION, "scan": self._fingerprint}])

    def _load(self) -> dict[str, UnitResult]:
        done: dict[str, UnitResult] = {}
        records = read_records(self.path, skip_bad=True)  # a damaged line: rescan that unit
        header = records[0] if records else None
        if not header or header.get("journal") != _VERSION:
            return done
        if header.get("scan") != self._fingerprint:
            raise UsageError(
                f"--resume: {str(self.path)!r} was written by a scan with other settings "
                f"({header.get('scan')}); rerun without --resume, or with the same inputs, "
                "schema and --unit-mb"
            )
        for entry in records[1:]:
            res = self._result(entry)
            if res is not None:
                done[res.key] = res
        return done

    def _result(self, entry: dict[str, Any]) -> UnitResult | None:
        res = UnitResult(**{k: entry[k] for k in _STORED if k in entry})
        if res.part_file is not None:
            res.part_file = str(self.parts / res.part_file)
            if not fnd.part_is_readable(res.part_file):
                return None  # its findings are gone or damaged: scan the unit again
        return res

    def split(self, units: Sequence[WorkUnit]) -> tuple[list[UnitResult], list[WorkUnit]]:
        """Results already recorded for ``units``, and the units still to scan."""
        if not self._done:  # a fresh scan: no key to build
            return [], list(units)
        done = [self._done[u.key] for u in units if u.key in self._done]
        todo = [u for u in units if u.key not in self._done]
        return done, todo

    def record(self, res: UnitResult) -> None:
        """Persist a finished unit: its findings to a part file, then its journal line.

        Findings that came back inside the result (a worker that cannot see ``OUT/parts``,
        e.g. a remote cluster without a shared filesystem) are written to a part here, so the
        client holds at most one unit's findings at a time.
        """
        if res.table is not None and res.table.num_rows:
            res.part_file, res.table = fnd.write_part(res.table, self.parts, res.key), None
        entry = dict(zip(_STORED, _stored_values(res), strict=True))
        if res.part_file is not None:
            entry["part_file"] = os.path.relpath(res.part_file, self.parts)
        # held and written in batches (see the module docstring); close() writes the rest
        self._held_s += res.seconds
        now = time.monotonic()
        flush = (
            self._held_s >= _FLUSH_WORK_S
            or now - self._flushed >= _FLUSH_EVERY_S
            or res.corrupt is not None
        )
        self._writer.write([entry], flush=flush)
        if flush:
            self._flushed, self._held_s = now, 0.0

    def close(self) -> None:
        """Write the held lines and close the file (the scan stopped, or is complete)."""
        self._writer.close()

    def finish(self) -> None:
        """The scan is complete and its manifest written: drop the journal and the parts."""
        self.close()
        self.path.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)
