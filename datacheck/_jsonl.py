"""Our append-only JSON Lines files: reader, writer and crash repair in one place.

Three files of ours have this format: the training guard's event log, the runtime quarantine
(one file per rank) and the scan's resume journal.  One record is one JSON object on one line,
UTF-8, ended by ``\\n``.  A writer appends each batch of records with one ``write`` and flushes
it (or holds whole lines in memory until a later flush, when the caller says so), so a crash
(even SIGKILL) can only tear the *last* line.  Hence one rule for every reader and every writer:

- **read**: the last non-blank line that does not parse is a torn record and is dropped;
  an unparseable line anywhere else is damage, not a crash, and raises :class:`InputError`
  (or is skipped with ``skip_bad=True``, for tolerant views such as plots).
- **append**: before the first append, a last line without its ``\\n`` is repaired: a whole
  record (it parses) gets its newline, anything else is cut off, so the new record starts a
  line of its own and nothing is glued onto a fragment.

This module imports no torch: ``datacheck logs`` reads guard logs without it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from datacheck.errors import InputError

__all__ = [
    "TOO_DEEP",
    "JsonlWriter",
    "iter_records",
    "json_safe",
    "read_records",
    "repair_tail",
]

_TAIL_CHUNK = 1 << 16


def iter_records(
    path: str | os.PathLike[str],
    *,
    skip_bad: bool = False,
    too_deep: list[int] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each record of a JSON Lines file of ours.

    Args:
        path: the file.
        skip_bad: skip damaged lines instead of raising (a torn last line is always dropped).
        too_deep: where to list the line numbers of records nested deeper than Python's
            recursion limit lets ``json`` decode: they are skipped, not damage (without it
            they are damage like any line that does not parse).

    Raises:
        InputError: a line other than the last is not a JSON object (unless ``skip_bad``).
        OSError: the file cannot be read.
    """
    bad: tuple[int, str] | None = None  # raised once another line follows: not the last
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):  # streamed: the file is never held whole
            if not line.strip():
                continue
            if bad is not None and not skip_bad:
                raise InputError(f"'{os.fspath(path)}', line {bad[0]}: not JSON ({bad[1]})")
            rec, error = _parse(line)
            if rec is None and error == TOO_DEEP and too_deep is not None:
                too_deep.append(n)
                continue
            bad = None if rec is not None else (n, error)
            if rec is not None:
                yield n, rec


def read_records(path: str | os.PathLike[str], *, skip_bad: bool = False) -> list[dict[str, Any]]:
    """Every record of a JSON Lines file of ours (see :func:`iter_records`)."""
    return [rec for _, rec in iter_records(path, skip_bad=skip_bad)]


TOO_DEEP = "nested deeper than Python's recursion limit lets json decode"


def _parse(line: str) -> tuple[dict[str, Any] | None, str]:
    try:
        rec = json.loads(line)
    except ValueError as exc:
        return None, getattr(exc, "msg", str(exc))
    except RecursionError:
        return None, TOO_DEEP
    return (rec, "") if isinstance(rec, dict) else (None, f"a {type(rec).__name__}, not an object")


def repair_tail(path: str | os.PathLike[str]) -> None:
    """Make ``path`` safe to append to after a crash (see the module docstring).

    A last line without its newline is ended when it is a whole record and cut off otherwise.
    A missing or empty file is left alone.
    """
    try:
        fh = open(path, "rb+")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        start = _last_line_start(fh, size)
        fh.seek(start)
        rec, _ = _parse(fh.read(size - start).decode("utf-8", errors="replace"))
        if rec is None:
            fh.truncate(start)
        else:
            fh.seek(size)
            fh.write(b"\n")


def _last_line_start(fh: IO[bytes], size: int) -> int:
    pos = size
    while pos > 0:
        n = min(_TAIL_CHUNK, pos)
        pos -= n
        fh.seek(pos)
        cut = fh.read(n).rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1
    return 0


def json_safe(obj: Any) -> Any:
    """``obj`` with NaN/Inf as the strings "nan"/"inf"/"-inf", so every line is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


class JsonlWriter:
    """Appends records to one JSON Lines file of ours; opens (and repairs) it lazily.

    Args:
        path: the file; its folder is created on the first write.
        fresh: start the file afresh (truncate) instead of appending to what is there.
        fsync: ``True``: fsync after every write; a number: at most once per that many
            seconds (and on close); ``False``: flush only (survives a killed process, not a
            machine crash).
        default: ``json.dumps``'s ``default`` for values JSON does not know.
        nan_as_text: write NaN/Inf as "nan"/"inf" (strict JSON); ``False`` keeps Python's
            ``NaN`` literals, which :func:`read_records` reads back as floats.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fresh: bool = False,
        fsync: bool | float = False,
        default: Any = None,
        nan_as_text: bool = True,
    ) -> None:
        self.path = Path(path)
        self._fresh = fresh
        self._fsync_every = 0.0 if fsync is True else (None if fsync is False else float(fsync))
        self._nan_as_text = nan_as_text
        # one encoder for every record: json.dumps with options builds a new one per call
        self._encode = json.JSONEncoder(
            separators=(",", ":"), allow_nan=not nan_as_text, default=default
        ).encode
        self._fh: IO[str] | None = None
        self._synced = -math.inf
        self._held: list[str] = []

    def write(self, records: Iterable[Mapping[str, Any]], *, flush: bool = True) -> None:
        """Append ``records`` with one write, then flush.

        ``flush=False`` holds their lines in memory instead, until a later write that flushes,
        :meth:`flush` or :meth:`close`: a process killed meanwhile loses those lines (whole
        lines: the file never holds half of one it did not tear itself).
        """
        if self._nan_as_text:
            lines = [self._encode(json_safe(r)) + "\n" for r in records]
        else:
            lines = [self._encode(r if isinstance(r, dict) else dict(r)) + "\n" for r in records]
        self._held.extend(lines)
        if flush:
            self.flush()

    def flush(self) -> None:
        """Write the held lines with one write, flush, and fsync when it is time to."""
        if not self._held:
            return
        text = "".join(self._held)
        self._held.clear()
        fh = self._open()
        fh.write(text)
        fh.flush()
        if self._fsync_every is not None:
            now = time.monotonic()
            if now - self._synced >= self._fsync_every:
                os.fsync(fh.fileno())
                self._synced = now

    def _open(self) -> IO[str]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._fresh:
                repair_tail(self.path)
            self._fh = open(self.path, "w" if self._fresh else "a", encoding="utf-8")  # noqa: SIM115
        return self._fh

    def close(self) -> None:
        """Write what is held, flush (fsync when asked) and close; writing again reopens for
        append."""
        self.flush()
        if self._fh is not None:
            if self._fsync_every is not None:
                os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh, self._fresh = None, False
