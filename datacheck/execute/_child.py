"""What runs inside an isolated worker process: receive the unit function, then jobs (a few
small units, or one big one); send back one message per job, its results in order.

Before each unit the worker writes, into memory it shares with the parent (``progress``), the
job's number, the unit's place in it and the time it started: when the worker dies, hangs or
outgrows its memory limit in the middle of a job, the parent knows which unit did it, and each
unit's time limit counts from its own start.

Only this side runs in the child; :mod:`~datacheck.execute._workers` is the parent's side.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import mmap
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["PARENT_CHECK_S", "PROGRESS_SLOTS", "context", "main", "serve"]

PROGRESS_SLOTS = 3
JOB, UNIT, STARTED = range(PROGRESS_SLOTS)
"""The slots of a worker's ``progress`` array: job number, unit's place in it, start time
(``time.monotonic()``, the same clock in every process of the machine)."""

PARENT_CHECK_S = 2.0
"""How often an idle worker checks that the process that started it is still there."""


def _import_all(modules: Sequence[str]) -> None:
    for name in modules:
        with contextlib.suppress(Exception):  # a module that fails shows up when a unit needs it
            importlib.import_module(name)


def context() -> dict[str, Any]:
    """What a worker kept from an earlier run must match here: environment, folder, path."""
    return {"env": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path)}


def _enter(context: dict[str, Any]) -> None:
    if os.environ != context["env"]:
        os.environ.clear()
        os.environ.update(context["env"])
    os.chdir(context["cwd"])
    sys.path[:] = context["path"]


def _release_memory() -> None:
    """Hand the memory Arrow's allocator kept from the job back to the system: mimalloc and
    jemalloc hold freed pages for reuse, so a worker that read a CSV shard (~100 MB of Arrow
    buffers at its peak) stayed at that size for the rest of the scan (171 -> 55 MB)."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        with contextlib.suppress(Exception):  # best effort: never a reason to fail a job
            pa.default_memory_pool().release_unused()


def serve(conn: Connection, preload: tuple[str, ...], progress: Any) -> None:
    """A worker's loop: receive the function once per run, then jobs; send back results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker has the parent's handler
    if not os.environ.get("PYTHONFAULTHANDLER"):  # a crash on a damaged file is a finding:
        faulthandler.disable()  # no dump of a forked worker's stack on the user's terminal
    _import_all(preload)
    fn: Any = None
    parent = os.getppid()
    while (msg := _next_message(conn, parent)) is not None:
        if msg[0] == "stop":
            return
        if msg[0] == "fn":
            _enter(msg[3])
            _import_all(msg[2])
            fn = _load_fn(msg[1])
            continue
        if msg[0] == "undecodable":
            reply: tuple[Any, ...] = ("error", msg[1], msg[2])
        elif isinstance(fn, BaseException):
            reply = ("error", fn, "")
        else:
            reply = _run_job(fn, msg[1], msg[2], progress)
        try:
            conn.send(reply)
        except Exception:  # noqa: BLE001 - an unpicklable result or exception
            conn.send(("error", None, traceback.format_exc()))
        del reply
        _release_memory()


def _next_message(conn: Connection, parent: int) -> tuple[Any, ...] | None:
    """The parent's next message (None: the parent is gone); a job whose units cannot be
    unpickled here is ``("undecodable", exception, traceback)``, answered as an error."""
    while True:
        try:
            if not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:  # killed outright: a forked sibling may still hold
                    return None  # our pipe's other end open, so no EOF would ever come
                continue
            raw = conn.recv_bytes()
        except (EOFError, OSError):  # the parent is gone
            return None
        try:
            return tuple(pickle.loads(raw))
        except Exception as exc:  # noqa: BLE001 - e.g. a class only the parent's __main__ has
            return ("undecodable", exc, traceback.format_exc())


def _load_fn(payload: bytes) -> Any:
    """The run's unit function, or the error to answer every job with when it cannot load."""
    try:
        return pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - becomes one clear error in the parent
        from datacheck.errors import UsageError

        return UsageError(
            f"a worker process could not load what the scan runs ({type(exc).__name__}: "
            f"{exc}); define custom checks and formats in an importable module, or scan with "
            "isolate=False (executor='inprocess') to run them in this process"
        )


def _run_job(fn: Any, job: int, units: Sequence[Any], progress: Any) -> tuple[Any, ...]:
    results = []
    try:
        for i, unit in enumerate(units):
            progress[STARTED] = time.monotonic()
            progress[UNIT] = i
            progress[JOB] = job
            results.append(fn(unit))
        return ("ok", results)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which re-raises it
        return ("error", exc, traceback.format_exc())


def main() -> None:
    """A fresh worker's entry point (:mod:`~datacheck.execute._launch`): its pipe, its progress
    slots and what to preload come as arguments; the user's ``__main__`` is never run."""
    conn_fd, memory_fd, preload = int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    progress = memoryview(mmap.mmap(memory_fd, 8 * PROGRESS_SLOTS)).cast("d")
    os.close(memory_fd)
    serve(Connection(conn_fd), tuple(preload), progress)
