"""A scan's output folder: never read as data, written by one scan at a time, replaced whole.

* **Never read as data.** A folder holding a datacheck ``report.json`` (or the resume journal
  of an interrupted scan) is a scan's output: discovery lists it under ``ignored`` with the
  reason instead of scanning its ``quarantine.parquet`` and ``report.json`` as data
  (:func:`output_folder`).
* **One writer.** While a scan writes ``--out`` it holds an exclusive lock on ``OUT/.lock``
  (``flock``: released by the kernel when the process ends, however it ends); a second scan
  into the same folder stops at once with one line naming the first (:func:`out_lock`).
* **Replaced whole.** ``report.json`` is the commit point: the old one is removed before the new
  manifest takes its place, and the new one is written last (:func:`retire_report`), so a
  reader finds either the old pair, no report, or the new pair, never one scan's report beside
  another's manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from datacheck.errors import UsageError

__all__ = ["LOCK", "out_lock", "output_folder", "retire_report"]

LOCK = ".lock"
_MARKERS = ("report.json", "journal.jsonl")
_HEAD = 256


def output_folder(names: set[str], folder: str) -> str | None:
    """Why ``folder`` (whose entries are ``names``) is a datacheck scan's output, or None."""
    for marker in _MARKERS:
        if marker not in names:
            continue
        try:
            with open(os.path.join(folder, marker), "rb") as fh:
                head = fh.read(_HEAD)
        except OSError:
            continue
        if b'"tool": "datacheck' in head or _journal(head):
            what = "report" if marker == "report.json" else "resume journal"
            return f"a datacheck scan's output folder (its {marker}: a {what}), not data"
    return None


def _journal(head: bytes) -> bool:
    """The resume journal's header line: ``{"journal": N, "scan": {"inputs": ...``."""
    return head.startswith(b'{"journal":') and b'"scan":{"inputs":' in head


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another process"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on {info.get('host')}, since {since}: {info.get('command')}"


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.lock`` exclusively for the block.

    Raises:
        UsageError: another scan holds it (the message names that process).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield
        return
    path = out / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"--out {str(out)!r} is being written by another scan ({_holder(path)}); "
                "wait for it to finish, or pass another --out"
            ) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
            "command": " ".join(["datacheck", *sys.argv[1:]])[:200],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def retire_report(out: Path, report_json: str) -> None:
    """Remove the old ``report.json`` before its manifest is replaced (see the module doc)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out / report_json)
