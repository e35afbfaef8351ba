"""Isolated worker processes: units run where a crashing reader cannot take the scan down.

Each worker is a spawned child process that runs one unit at a time, sent over a pipe.  The
parent watches every busy worker's pipe and process sentinel, and a unit ends in one of four
ways:

- a result comes back;
- the unit function raised (a datacheck bug, since reader errors are already findings): the
  exception is re-raised here, with the worker's traceback as its cause;
- the worker process died (a segfault or abort in a native reader, the OOM killer): the unit is
  run once more in a fresh process, and if that one dies too, the caller's ``on_poison`` builds
  its result ("the reader crashed (SIGSEGV) on this file");
- the unit ran past its time limit: the worker is killed and the unit is poison ("the reader
  timed out after N s"), without a retry.

Idle workers are kept for the next run in this process (a notebook, a test session, an API
caller scanning folder after folder), so only the first scan pays for starting them.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import math
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import uuid
import warnings
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from datacheck.execute._base import OnPoison, Unit, UnitFn

__all__ = ["RemoteTraceback", "memory_limit", "prestart", "run_isolated", "unit_time_limit"]

_SPAWN = mp.get_context("spawn")
_IDLE: list[_Worker] = []
"""Healthy idle workers, kept for the next run in this process."""
_MAX_IDLE = 64

TIMEOUT_BASE_S = 300.0
"""Default time limit of a unit: this, plus one second per :data:`TIMEOUT_BYTES_PER_S`."""
TIMEOUT_BYTES_PER_S = 4 << 20
PARENT_CHECK_S = 2.0
"""How often an idle worker checks that the process that started it is still there."""
MEMORY_POLL_S = 0.2
"""How often a busy worker's memory is read against its limit."""
MIN_MEMORY = 2 << 30
STARTUP_S = 120.0
"""Extra time a worker has to start and import before its unit's time limit counts."""


def unit_time_limit(unit: Unit, unit_timeout: float | None) -> float:
    """Seconds ``unit`` may run: ``unit_timeout`` if given (0: no limit), else the default
    (:data:`TIMEOUT_BASE_S` plus a second per 4 MiB of the unit, for slow storage)."""
    if unit_timeout is None:
        return TIMEOUT_BASE_S + (unit.size // max(unit.n_parts, 1)) / TIMEOUT_BYTES_PER_S
    return unit_timeout if unit_timeout > 0 else math.inf


def memory_limit(workers: int, unit_memory: int | None) -> float:
    """Bytes of anonymous memory a worker may hold: ``unit_memory`` if given (0: no limit),
    else half this machine's memory shared by the workers, at least 2 GiB."""
    if unit_memory is not None:
        return unit_memory if unit_memory > 0 else math.inf
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return math.inf
    return max(MIN_MEMORY, total // 2 // max(workers, 1))


def _anon_bytes(pid: int | None) -> int:
    """A process's anonymous resident memory (mapped file pages excluded: they are the page
    cache's); 0 where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (set as the re-raised one's cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


def _import_all(modules: Sequence[str]) -> None:
    for name in modules:
        with contextlib.suppress(Exception):  # a module that fails shows up when a unit needs it
            importlib.import_module(name)


def _context() -> dict[str, Any]:
    """What a worker kept from an earlier run must match here: environment, folder, path."""
    return {"env": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path)}


def _enter(context: dict[str, Any]) -> None:
    if os.environ != context["env"]:
        os.environ.clear()
        os.environ.update(context["env"])
    os.chdir(context["cwd"])
    sys.path[:] = context["path"]


def _serve(conn: Connection, preload: tuple[str, ...]) -> None:
    """A worker's loop: receive the function once per run, then units; send back results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker has the parent's handler
    if not os.environ.get("PYTHONFAULTHANDLER"):  # a crash on a damaged file is a finding:
        faulthandler.disable()  # no dump of a forked worker's stack on the user's terminal
    _import_all(preload)
    fn: Any = None
    parent = os.getppid()
    while True:
        try:
            if not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:  # killed outright: a forked sibling may still hold
                    return  # our pipe's other end open, so no EOF would ever come
                continue
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg[0] == "stop":
            return
        if msg[0] == "fn":
            _enter(msg[3])
            _import_all(msg[2])
            fn = pickle.loads(msg[1])
            continue
        conn.send(("start",))  # the time limit counts from here, not from our own start-up
        try:
            reply: tuple[Any, ...] = ("ok", fn(msg[1]))
        except Exception as exc:  # noqa: BLE001 - sent to the parent, which re-raises it
            reply = ("error", exc, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception:  # noqa: BLE001 - an unpicklable result or exception
            conn.send(("error", None, traceback.format_exc()))


def _start_method() -> Any:
    """``fork`` while this process runs no other Python thread (a CLI scan: the worker starts
    with everything imported, in milliseconds), else ``spawn`` (a notebook or a dask client:
    another thread may hold a lock a forked child would inherit held).  Native helper threads
    (OpenBLAS, jemalloc, Arrow's pools) re-initialise themselves in a forked child."""
    if sys.platform == "linux" and threading.active_count() == 1:
        return mp.get_context("fork")
    return _SPAWN


class _Worker:
    """One worker process, its pipe, and the unit it is running (if any)."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        ctx = _start_method()
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_serve, args=(child, preload), daemon=True, name="datacheck-worker"
        )
        with warnings.catch_warnings():  # Python >= 3.12 warns about fork beside any thread
            warnings.simplefilter("ignore", DeprecationWarning)
            self.proc.start()
        child.close()
        self.base_memory = 0
        """Anonymous memory the worker held when its unit started (a forked worker shares
        its parent's pages): the memory limit counts what the unit adds."""
        self.conn: Connection = parent
        self.fn_token = ""
        self.index = -1
        self.unit: Any = None
        self.limit = math.inf
        self.deadline = math.inf

    def assign(self, token: str, payload: bytes, modules: tuple[str, ...]) -> None:
        if self.fn_token != token:
            self.conn.send(("fn", payload, modules, _context()))
            self.fn_token = token

    def run(self, index: int, unit: Any, limit: float) -> None:
        self.index, self.unit, self.limit = index, unit, limit
        self.deadline = time.monotonic() + limit + STARTUP_S
        self.conn.send(("unit", unit))

    def alive(self) -> bool:
        return self.proc.is_alive() and not self.conn.closed

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()

    def cause_of_death(self) -> str:
        """``SIGSEGV``, ``SIGABRT``, ``exit code 13``: how the process ended."""
        self.proc.join(timeout=10)
        self.conn.close()
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"


def _take(n: int, preload: tuple[str, ...]) -> list[_Worker]:
    """``n`` workers: idle ones kept from an earlier run first, then new ones."""
    out: list[_Worker] = []
    while _IDLE and len(out) < n:
        w = _IDLE.pop()
        if w.alive():
            out.append(w)
        else:
            w.kill()
    out.extend(_Worker(preload) for _ in range(n - len(out)))
    return out


def prestart(preload: Sequence[str] = ()) -> None:
    """Start a worker now, importing ``preload``, unless one is idle: its start-up then
    overlaps whatever the caller does before running units (listing files, loading a schema)."""
    if _start_method() is not _SPAWN:  # a forked worker starts at once, with all imported
        return
    if not any(w.alive() for w in _IDLE):
        _IDLE.append(_Worker(tuple(preload)))


def _keep(idle: list[_Worker]) -> None:
    for w in idle:
        if len(_IDLE) < _MAX_IDLE and w.alive():
            _IDLE.append(w)
        else:
            w.kill()


def _dumps(fn: UnitFn) -> bytes | None:
    """``fn`` pickled for a worker; by value (cloudpickle) when it holds a lambda or a local
    function (a pandera schema built in a notebook); None when neither can."""
    try:
        return pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError):
        pass
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - a dependency of datacheck
        return None
    try:
        return bytes(cloudpickle.dumps(fn))
    except Exception:  # noqa: BLE001 - e.g. a lock or an open file in a check's closure
        return None


def _module_of(fn: UnitFn) -> str:
    return str(getattr(getattr(fn, "func", fn), "__module__", "") or "")


def run_isolated(
    fn: UnitFn,
    units: Sequence[Unit],
    workers: int,
    on_poison: OnPoison,
    *,
    unit_timeout: float | None = None,
    unit_memory: int | None = None,
    preload: Sequence[str] = (),
) -> Iterator[Any]:
    """Run ``fn`` over ``units`` on ``workers`` isolated processes, yielding results as they
    finish; a unit that kills two processes, runs past its time limit or holds more memory than
    its limit yields ``on_poison(unit, message)``.

    Args:
        preload: modules every worker imports first (formats registered by plugins).
        unit_timeout: seconds a unit may run (0: no limit; None: :func:`unit_time_limit`).
        unit_memory: bytes a worker may hold (0: no limit; None: :func:`memory_limit`).
    """
    if not units:
        return
    token = uuid.uuid4().hex
    payload = _dumps(fn)
    if payload is None:  # nothing can send it to another process: run it here, unisolated
        yield from (fn(unit) for unit in units)
        return
    main = _module_of(fn)
    modules = tuple(dict.fromkeys([*preload, *([main] if main != "__main__" else [])]))
    todo: deque[int] = deque(range(len(units)))
    crashes: Counter[int] = Counter()
    size = min(workers, len(units))
    idle = _take(size, modules)
    busy: dict[Connection, _Worker] = {}
    memory = memory_limit(workers, unit_memory)
    try:
        while todo or busy:
            while todo and (idle or len(busy) < size):
                w = idle.pop() if idle else _Worker(modules)  # a fresh one after a death
                i = todo.popleft()
                try:
                    w.assign(token, payload, modules)
                    w.run(i, units[i], unit_time_limit(units[i], unit_timeout))
                except OSError:  # it died while idle: start another for this unit
                    w.kill()
                    todo.appendleft(i)
                    continue
                busy[w.conn] = w
            yield from _collect(busy, idle, todo, crashes, on_poison, memory)
    finally:
        for w in busy.values():  # an early close, Ctrl-C, SIGTERM: abandon the running units
            w.kill()
        _keep(idle)


def _collect(
    busy: dict[Connection, _Worker],
    idle: list[_Worker],
    todo: deque[int],
    crashes: Counter[int],
    on_poison: OnPoison,
    memory: float = math.inf,
) -> Iterator[Any]:
    """Wait for the next busy workers to finish, die, run out of time or of memory; yield
    what ends."""
    now = time.monotonic()
    timeout = max(0.0, min(w.deadline for w in busy.values()) - now)
    if not math.isinf(memory):
        timeout = min(timeout, MEMORY_POLL_S)
    sentinels = {w.proc.sentinel: w for w in busy.values()}
    ready = wait([*busy, *sentinels], timeout=None if math.isinf(timeout) else timeout)
    ended = {busy[r] if r in busy else sentinels[r] for r in ready}
    for w in ended:
        msg = _receive(w)
        if msg is not None and msg[0] == "start":
            w.deadline = time.monotonic() + w.limit
            w.base_memory = _anon_bytes(w.proc.pid)
            continue
        del busy[w.conn]
        if msg is None:  # the process died with the unit
            crashes[w.index] += 1
            cause = w.cause_of_death()
            if crashes[w.index] < 2:
                todo.appendleft(w.index)  # once more, in a fresh process
                continue
            yield on_poison(w.unit, f"the reader crashed ({cause}) on this file")
            continue
        idle.append(w)
        if msg[0] == "error":
            _raise_remote(msg)
        yield msg[1]
    now = time.monotonic()
    for conn, w in list(busy.items()):
        if w.deadline <= now:
            del busy[conn]
            w.kill()
            yield on_poison(w.unit, f"the reader timed out after {w.limit:g} s")
        elif not math.isinf(memory) and _anon_bytes(w.proc.pid) - w.base_memory > memory:
            del busy[conn]
            w.kill()
            mib = memory / (1 << 20)
            yield on_poison(w.unit, f"the reader needed more than {mib:,.0f} MiB on this file")


def _receive(w: _Worker) -> tuple[Any, ...] | None:
    """The worker's reply, or None if it died before sending one."""
    try:
        if w.conn.poll():
            return tuple(w.conn.recv())
    except (EOFError, OSError, pickle.UnpicklingError):
        pass
    return None


def _raise_remote(msg: tuple[Any, ...]) -> None:
    _, exc, text = msg
    if exc is None:
        raise RuntimeError(f"a worker failed to send its result back:\n{text}")
    raise exc from RemoteTraceback(text)
