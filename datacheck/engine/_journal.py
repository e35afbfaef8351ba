"""The resume journal: finished work units, recorded in the output folder as they finish.

``OUT/journal.jsonl`` holds a header line (the scan's fingerprint: inputs, schema, unit size)
and then one JSON line per finished unit: its :class:`~datacheck.engine._unit.UnitResult` without the
findings, which live in ``OUT/parts/<hash>.parquet`` (written, atomically, before the line).
Each line is flushed as the unit finishes (fsync'ed at most once a second, and when the scan
stops), so after a Ctrl-C or a pre-empted job the journal lists every unit whose findings are
on disk, and after a machine crash nearly all of them (a torn last line is ignored; a lost
line only means that unit is scanned again).

``scan(..., resume=True)`` keeps the journal and parts, skips the units listed there whose key
(path, size, mtime or ETag, part) still matches the file as it is now, and merges their stored
results with the new ones, so the final report equals an uninterrupted run's.  A finished scan
deletes the journal and the parts: ``quarantine.parquet`` then holds the findings.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from datacheck import findings as fnd
from datacheck._jsonl import JsonlWriter, read_records
from datacheck.engine._unit import UnitResult
from datacheck.errors import UsageError
from datacheck.formats import WorkUnit

__all__ = ["JOURNAL", "Journal"]

JOURNAL = "journal.jsonl"
_VERSION = 1
_FSYNC_EVERY_S = 1.0
"""Journal lines are flushed one by one but fsync'ed at most this often: a machine crash loses
at most the last second of lines, and those units are simply scanned again (their parts are
written before their lines, so a line never points at findings that are not on disk)."""
_STORED = tuple(f.name for f in fields(UnitResult) if f.name not in ("table", "seconds"))


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
        if fresh:
            self._write({"journal": _VERSION, "scan": self._fingerprint})

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
        entry = {k: v for k, v in _fields_of(res).items() if k in _STORED}
        if res.part_file is not None:
            entry["part_file"] = os.path.relpath(res.part_file, self.parts)
        self._write(entry)

    def _write(self, entry: dict[str, Any]) -> None:
        # flushed: survives Ctrl-C, SIGTERM, SIGKILL of this process; fsync'ed once a second
        self._writer.write([entry])

    def close(self) -> None:
        self._writer.close()

    def finish(self) -> None:
        """The scan is complete and its manifest written: drop the journal and the parts."""
        self.close()
        self.path.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)


def _fields_of(res: UnitResult) -> dict[str, Any]:
    """The result's fields without deep-copying its findings table."""
    return {f.name: getattr(res, f.name) for f in fields(res) if f.name != "table"}
