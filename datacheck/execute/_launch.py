"""How a worker process starts: forked, or as a fresh interpreter that never runs ``__main__``.

A fork starts in milliseconds with everything imported, but is only safe while this process
runs no other Python thread (another thread may hold a lock the child would inherit held).
Otherwise (a notebook, a dask client, a script with a tqdm or logging thread) the worker is a
fresh interpreter running datacheck's own entry point, :func:`~datacheck.execute._child.main`.
Not ``multiprocessing``'s ``spawn`` or ``forkserver``: their children re-run the user's
``__main__`` module first, so a script without ``if __name__ == "__main__":`` would start its
own scan again inside every worker, which then dies, and every file would be reported as the
reader crashing.  The fresh worker imports only datacheck and the modules the run names; what
it runs comes pickled by value where it lives in ``__main__`` (cloudpickle).

Both kinds look the same to the parent (:class:`Started`): a duplex pipe, a process handle with
a waitable ``sentinel``, and a three-slot float array shared with the worker (``progress``).
"""

from __future__ import annotations

import atexit
import json
import mmap
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from datacheck.execute._child import PROGRESS_SLOTS, serve

__all__ = ["PROGRESS_SLOTS", "Started", "can_fork", "start_worker"]

_ENTRY = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from datacheck.execute._child import main; main()"
)
"""What a fresh worker runs: datacheck's entry point, with the parent's import path."""


class WorkerProcess(Protocol):
    """What the parent uses of a worker process (``multiprocessing.Process`` has it all)."""

    @property
    def pid(self) -> int | None: ...
    @property
    def sentinel(self) -> int: ...
    @property
    def exitcode(self) -> int | None: ...
    def is_alive(self) -> bool: ...
    def kill(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...


@dataclass
class Started:
    """A worker just started: its process, the parent's end of its pipe, its progress slots."""

    proc: WorkerProcess
    conn: Connection
    progress: Any


def can_fork() -> bool:
    """Fork while this process runs no other Python thread (Linux: where fork is the norm)."""
    return sys.platform == "linux" and threading.active_count() == 1


def start_worker(preload: tuple[str, ...]) -> Started:
    """Start one worker that imports ``preload`` and serves jobs on its pipe."""
    return _forked(preload) if can_fork() else _fresh(preload)


def _forked(preload: tuple[str, ...]) -> Started:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    progress = ctx.RawArray("d", PROGRESS_SLOTS)
    proc = ctx.Process(
        target=serve, args=(child, preload, progress), daemon=True, name="datacheck-worker"
    )
    with warnings.catch_warnings():  # Python >= 3.12 warns about fork beside any thread
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
    child.close()
    return Started(proc, parent, progress)


class _Fresh:
    """A fresh interpreter running :func:`~datacheck.execute._child.main`."""

    def __init__(self, args: list[str], pass_fds: tuple[int, ...]) -> None:
        dead_r, dead_w = os.pipe()  # the worker holds the write end: EOF here when it ends
        try:
            self._popen = subprocess.Popen(
                [sys.executable, *_interpreter_flags(), "-c", _ENTRY, *args],
                pass_fds=(*pass_fds, dead_w),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(dead_r)
            raise
        finally:
            os.close(dead_w)
        self.sentinel = dead_r
        self.pid: int | None = self._popen.pid
        _LIVE.add(self)

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def kill(self) -> None:
        if self._popen.poll() is None:
            self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1

    def __del__(self) -> None:
        if getattr(self, "sentinel", -1) >= 0:
            os.close(self.sentinel)


_LIVE: weakref.WeakSet[_Fresh] = weakref.WeakSet()
"""Fresh workers not yet ended: stopped when this process exits, as multiprocessing stops its
daemon processes (an idle worker would otherwise wait for its parent's pipe to close)."""


@atexit.register
def _stop_all() -> None:
    for proc in list(_LIVE):
        proc.kill()
        proc.join(timeout=5)


def _fresh(preload: tuple[str, ...]) -> Started:
    parent, child = mp.Pipe()
    progress, memory_fd = _shared_progress()
    try:
        proc = _Fresh(
            [json.dumps(sys.path), str(child.fileno()), str(memory_fd), json.dumps(preload)],
            (child.fileno(), memory_fd),
        )
    finally:
        child.close()
        os.close(memory_fd)
    return Started(proc, parent, progress)


def _shared_progress() -> tuple[Any, int]:
    """Three float64 slots in memory the worker maps too, and the file descriptor to map."""
    size = 8 * PROGRESS_SLOTS
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("datacheck-progress")
    else:  # pragma: no cover - not Linux
        with tempfile.TemporaryFile() as fh:
            fd = os.dup(fh.fileno())
    os.ftruncate(fd, size)
    return memoryview(mmap.mmap(fd, size)).cast("d"), fd


def _interpreter_flags() -> list[str]:
    """The parent's interpreter flags (``-X dev``, ``-W``, ``-O``), as multiprocessing passes them."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    return list(flags()) if flags is not None else []
