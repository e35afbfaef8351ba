"""Isolated worker processes: units run where a crashing reader cannot take the scan down.

Each worker is a child process that runs one unit at a time, sent over a pipe.  Small units are
queued a few deep behind the running one (:data:`QUEUE_UNITS`, :data:`QUEUE_BYTES`), so a
worker never waits on the parent between them: a folder of JPEGs is thousands of units of a
millisecond each.  The parent watches every busy worker's pipe and process sentinel, and a
unit ends in one of four ways:

- a result comes back;
- the unit function raised (a datacheck bug, since reader errors are already findings): the
  exception is re-raised here, with the worker's traceback as its cause;
- the worker process died (a segfault or abort in a native reader, the OOM killer): the unit is
  run once more in a fresh process, and if that one dies too, the caller's ``on_poison`` builds
  its result ("the reader crashed (SIGSEGV) on this file"); the units queued behind it had not
  started and go back to the queue, blameless;
- the unit ran past its time limit: the worker is killed and the unit is poison ("the reader
  timed out after N s"), without a retry.

Idle workers are kept for the next run in this process (a notebook, a test session, an API
caller scanning folder after folder), so only the first scan pays for starting them.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import uuid
import warnings
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from datacheck.execute._base import OnPoison, Unit, UnitFn
from datacheck.execute._child import context, serve

__all__ = ["RemoteTraceback", "memory_limit", "prestart", "run_isolated", "unit_time_limit"]

_SPAWN = mp.get_context("spawn")
_IDLE: list[_Worker] = []
"""Healthy idle workers, kept for the next run in this process."""
_MAX_IDLE = 64

TIMEOUT_BASE_S = 300.0
"""Default time limit of a unit: this, plus one second per :data:`TIMEOUT_BYTES_PER_S`."""
TIMEOUT_BYTES_PER_S = 4 << 20
MEMORY_POLL_S = 0.2
"""How often a busy worker's memory is read against its limit."""
MIN_MEMORY = 2 << 30
STARTUP_S = 120.0
"""Extra time a worker has to start and import before its unit's time limit counts."""
QUEUE_UNITS = 8
"""Units a worker may hold queued behind the one it runs, when they are small."""
QUEUE_BYTES = 8 << 20
"""Data (of the units' own sizes) a worker may hold queued: past this a unit is long enough
that a round trip to the parent costs nothing, and queueing it would only unbalance the end of
the scan (a worker idle while another still has a big unit waiting)."""
QUEUE_PICKLE = 32 << 10
"""Pickled bytes of queued units a pipe may hold: far below the socket's buffer, so a send to a
busy worker never blocks while that worker blocks sending its result back."""


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


def _start_method() -> Any:
    """``fork`` while this process runs no other Python thread (a CLI scan: the worker starts
    with everything imported, in milliseconds), else ``spawn`` (a notebook or a dask client:
    another thread may hold a lock a forked child would inherit held).  Native helper threads
    (OpenBLAS, jemalloc, Arrow's pools) re-initialise themselves in a forked child."""
    if sys.platform == "linux" and threading.active_count() == 1:
        return mp.get_context("fork")
    return _SPAWN


@dataclass
class _Job:
    """A unit sent to a worker: its place in the run, its time limit, what it weighs."""

    index: int
    unit: Any
    limit: float
    size: int
    """The unit's data per part (bytes): how long it may keep the worker busy."""
    message: bytes
    """The pickled message: its length is what it holds of the pipe while queued."""


class _Worker:
    """One worker process, its pipe, and the units sent to it: the first is running, the
    others are queued behind it (the worker reads the next as soon as it sends a result)."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        ctx = _start_method()
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=serve, args=(child, preload), daemon=True, name="datacheck-worker"
        )
        with warnings.catch_warnings():  # Python >= 3.12 warns about fork beside any thread
            warnings.simplefilter("ignore", DeprecationWarning)
            self.proc.start()
        child.close()
        self.base_memory = 0
        """Anonymous memory the worker held between units (a forked worker shares its
        parent's pages): the memory limit counts what a unit adds."""
        self.measured = {True: -math.inf, False: -math.inf}
        """When the base (True) and the memory in use (False) were last read: each at most
        every :data:`MEMORY_POLL_S` (/proc is read once per poll, not once per unit)."""
        self.conn: Connection = parent
        self.fn_token = ""
        self.jobs: deque[_Job] = deque()
        self.deadline = math.inf

    @property
    def job(self) -> _Job:
        """The unit running (the first sent and not finished)."""
        return self.jobs[0]

    def assign(self, token: str, payload: bytes, modules: tuple[str, ...]) -> None:
        if self.fn_token != token:
            self.conn.send(("fn", payload, modules, context()))
            self.fn_token = token

    def room_for(self, job: _Job) -> bool:
        """Whether ``job`` may go to this worker now: at once when it is idle; queued behind
        small units only, within :data:`QUEUE_UNITS`, :data:`QUEUE_BYTES`, :data:`QUEUE_PICKLE`."""
        if not self.jobs:
            return True
        queued = list(self.jobs)[1:]
        return (
            len(queued) < QUEUE_UNITS
            and sum(j.size for j in self.jobs) + job.size <= QUEUE_BYTES
            and sum(len(j.message) for j in queued) + len(job.message) <= QUEUE_PICKLE
        )

    def run(self, job: _Job) -> None:
        self.conn.send_bytes(job.message)
        if not self.jobs:  # it starts now, maybe in a worker still starting up
            self.deadline = time.monotonic() + job.limit + STARTUP_S
            self._measure(base=True)
        self.jobs.append(job)

    def finished(self) -> _Job:
        """The first unit's result came back: the next one, queued, starts now."""
        job = self.jobs.popleft()
        self.deadline = time.monotonic() + self.job.limit if self.jobs else math.inf
        if self.jobs:
            self._measure(base=True)
        return job

    def over(self, memory: float) -> bool:
        """Whether the running unit holds more than ``memory`` bytes beyond the base."""
        used = self._measure(base=False)
        return used is not None and used - self.base_memory > memory

    def _measure(self, base: bool) -> int | None:
        now = time.monotonic()
        if now - self.measured[base] < MEMORY_POLL_S:
            return None
        self.measured[base] = now
        used = _anon_bytes(self.proc.pid)
        if base:
            self.base_memory = used
        return used

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

    def job(i: int) -> _Job:
        per_part = units[i].size // max(units[i].n_parts, 1)
        message = pickle.dumps(("unit", units[i]), protocol=pickle.HIGHEST_PROTOCOL)
        return _Job(i, units[i], unit_time_limit(units[i], unit_timeout), per_part, message)

    try:
        while todo or busy:
            while todo:
                nxt = job(todo[0])
                w = _next_worker(nxt, idle, busy, size, modules)
                if w is None:
                    break
                todo.popleft()
                try:
                    w.assign(token, payload, modules)
                    w.run(nxt)
                except OSError:  # it died: start another for this unit, or (busy) notice below
                    todo.appendleft(nxt.index)
                    if w.jobs:
                        break
                    w.kill()
                    continue
                busy[w.conn] = w
            yield from _collect(busy, idle, todo, crashes, on_poison, memory)
    finally:
        for w in busy.values():  # an early close, Ctrl-C, SIGTERM: abandon the running units
            w.kill()
        _keep(idle)


def _next_worker(
    job: _Job,
    idle: list[_Worker],
    busy: dict[Connection, _Worker],
    size: int,
    modules: tuple[str, ...],
) -> _Worker | None:
    """Where ``job`` goes: an idle worker, a fresh one (after a death), else the busy worker
    with the shortest queue that has room for it; None when it must wait."""
    if idle:
        return idle.pop()
    if len(busy) < size:
        return _Worker(modules)
    fits = [w for w in busy.values() if w.room_for(job)]
    return min(fits, key=lambda w: len(w.jobs)) if fits else None


def _collect(
    busy: dict[Connection, _Worker],
    idle: list[_Worker],
    todo: deque[int],
    crashes: Counter[int],
    on_poison: OnPoison,
    memory: float = math.inf,
) -> Iterator[Any]:
    """Wait for the next busy workers to finish units, die, run out of time or of memory;
    yield what ends."""
    now = time.monotonic()
    timeout = max(0.0, min(w.deadline for w in busy.values()) - now)
    if not math.isinf(memory):
        timeout = min(timeout, MEMORY_POLL_S)
    sentinels = {w.proc.sentinel: w for w in busy.values()}
    ready = wait([*busy, *sentinels], timeout=None if math.isinf(timeout) else timeout)
    for w in {busy[r] if r in busy else sentinels[r] for r in ready}:
        yield from _drain(w, busy, idle, todo, crashes, on_poison)
    now = time.monotonic()
    for w in list(busy.values()):
        if w.deadline <= now:
            yield _end(w, busy, todo, on_poison, f"the reader timed out after {w.job.limit:g} s")
        elif not math.isinf(memory) and w.over(memory):
            mib = memory / (1 << 20)
            message = f"the reader needed more than {mib:,.0f} MiB on this file"
            yield _end(w, busy, todo, on_poison, message)


def _drain(
    w: _Worker,
    busy: dict[Connection, _Worker],
    idle: list[_Worker],
    todo: deque[int],
    crashes: Counter[int],
    on_poison: OnPoison,
) -> Iterator[Any]:
    """The results ``w`` sent back; then, if it died, its running unit is run once more in a
    fresh process (or is poison the second time), and the units queued behind it run again."""
    while w.jobs:
        msg = _receive(w)
        if msg is None:
            if w.proc.is_alive():
                return  # nothing more yet
            msg = _receive(w)  # what it sent just before dying
        if msg is None:
            crashes[w.job.index] += 1
            cause = w.cause_of_death()
            if crashes[w.job.index] < 2:
                _requeue(w, busy, todo, head=True)  # once more, in a fresh process
                return
            yield _end(w, busy, todo, on_poison, f"the reader crashed ({cause}) on this file")
            return
        w.finished()
        if msg[0] == "error":
            _raise_remote(msg)
        yield msg[1]
    del busy[w.conn]
    idle.append(w)


def _requeue(w: _Worker, busy: dict[Connection, _Worker], todo: deque[int], head: bool) -> None:
    """Drop the ended worker ``w``; its queued units (that never started) run again."""
    del busy[w.conn]
    w.kill()
    jobs = list(w.jobs) if head else list(w.jobs)[1:]
    todo.extendleft(reversed([j.index for j in jobs]))


def _end(
    w: _Worker,
    busy: dict[Connection, _Worker],
    todo: deque[int],
    on_poison: OnPoison,
    message: str,
) -> Any:
    """Kill ``w`` for its first unit, which is poison (``message``); the rest run again."""
    _requeue(w, busy, todo, head=False)
    return on_poison(w.job.unit, message)


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
