"""Isolated worker processes: units run where a crashing reader cannot take the scan down.

Each worker is a child process that runs one job at a time, sent over a pipe: a few small
units together (:func:`~datacheck.execute._base.batches`: a folder of JPEGs is thousands of
units of a millisecond each, and a message each way per unit would cost the parent as much
CPU as a worker), or one big unit.  Small jobs are queued behind the running one
(:data:`QUEUE_JOBS`, :data:`QUEUE_BYTES`), so a worker never waits on the parent between them.
Before each unit the worker notes in memory shared with the parent which unit it starts and
when (:mod:`~datacheck.execute._child`), so every unit has its own time limit and any fault is
pinned on the unit that caused it.  The parent watches every busy worker's pipe and process
sentinel, and a unit ends in one of four ways:

- a result comes back (with the rest of its job);
- the unit function raised (a datacheck bug, since reader errors are already findings): the
  exception is re-raised here, with the worker's traceback as its cause;
- the worker process died (a segfault or abort in a native reader, the OOM killer): the unit is
  run once more, alone, in a fresh process, and if that one dies too, the caller's
  ``on_poison`` builds its result ("the reader crashed (SIGSEGV) on this file"); the other
  units of its job (those before it lost their results with the process) and the jobs queued
  behind it run again, blameless;
- the unit ran past its time limit or its memory limit: the worker is killed and the unit is
  poison ("the reader timed out after N s"), without a retry; the others run again.

Idle workers are kept for the next run in this process (a notebook, a test session, an API
caller scanning folder after folder), so only the first scan pays for starting them.
"""

from __future__ import annotations

import math
import os
import pickle
import signal
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from multiprocessing.connection import Connection, wait
from typing import Any

from datacheck.execute._base import OnPoison, Unit, UnitFn, batches
from datacheck.execute._child import JOB, STARTED, UNIT, context
from datacheck.execute._launch import WorkerProcess, can_fork, start_worker

__all__ = ["RemoteTraceback", "memory_limit", "prestart", "run_isolated", "unit_time_limit"]

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
QUEUE_JOBS = 2
"""Jobs a worker may hold queued behind the one it runs, when they are small."""
QUEUE_BYTES = 16 << 20
"""Data (of the units' own sizes) a worker may hold, running and queued: past this a job is
long enough that a round trip to the parent costs nothing, and queueing it would only
unbalance the end of the run (a worker idle while another still has a big unit waiting)."""
QUEUE_PICKLE = 32 << 10
"""Pickled bytes of queued jobs a pipe may hold: far below the socket's buffer, so a send to a
busy worker never blocks while that worker blocks sending its results back."""
_JOBS = count(1)
"""Job numbers, unique in this process: what a worker's progress names."""


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


@dataclass
class _Job:
    """Units sent to a worker as one message: their places in the run and time limits."""

    number: int
    indices: list[int]
    units: list[Any]
    limits: list[float]
    size: int
    """The units' data per part (bytes): how long the job may keep the worker busy."""
    message: bytes
    """The pickled message: its length is what it holds of the pipe while queued."""


class _Worker:
    """One worker process, its pipe, and the jobs sent to it: the first is running, the
    others are queued behind it (the worker reads the next as soon as it sends results)."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        started = start_worker(preload)
        self.proc: WorkerProcess = started.proc
        self.progress: Any = started.progress
        """Job number, unit's place in it, start time: written by the worker before each unit."""
        self.base_memory = 0
        """Anonymous memory the worker held between jobs (a forked worker shares its
        parent's pages): the memory limit counts what a job adds."""
        self.measured = {True: -math.inf, False: -math.inf}
        """When the base (True) and the memory in use (False) were last read: each at most
        every :data:`MEMORY_POLL_S` (/proc is read once per poll, not once per job)."""
        self.conn: Connection = started.conn
        self.fn_token = ""
        self.jobs: deque[_Job] = deque()
        self.deadline = math.inf
        """When the running job's first unit must end, until the worker says it started."""

    @property
    def job(self) -> _Job:
        """The job running (the first sent and not finished)."""
        return self.jobs[0]

    def assign(self, token: str, payload: bytes, modules: tuple[str, ...]) -> None:
        if self.fn_token != token:
            self.conn.send(("fn", payload, modules, context()))
            self.fn_token = token

    def room_for(self, job: _Job) -> bool:
        """Whether ``job`` may go to this worker now: at once when it is idle; queued behind
        small jobs only, within :data:`QUEUE_JOBS`, :data:`QUEUE_BYTES`, :data:`QUEUE_PICKLE`."""
        if not self.jobs:
            return True
        queued = list(self.jobs)[1:]
        return (
            len(queued) < QUEUE_JOBS
            and sum(j.size for j in self.jobs) + job.size <= QUEUE_BYTES
            and sum(len(j.message) for j in queued) + len(job.message) <= QUEUE_PICKLE
        )

    def run(self, job: _Job) -> None:
        self.conn.send_bytes(job.message)
        if not self.jobs:  # it starts now, maybe in a worker still starting up
            self.deadline = time.monotonic() + job.limits[0] + STARTUP_S
            self._measure(base=True)
        self.jobs.append(job)

    def finished(self) -> _Job:
        """The first job's results came back: the next one, queued, starts now."""
        job = self.jobs.popleft()
        self.deadline = time.monotonic() + self.job.limits[0] if self.jobs else math.inf
        if self.jobs:
            self._measure(base=True)
        return job

    def running(self) -> tuple[int, float] | None:
        """The running unit's place in the running job and its start time, once the worker
        started that job (None before)."""
        p = self.progress
        now = (p[JOB], p[UNIT], p[STARTED])
        while (again := (p[JOB], p[UNIT], p[STARTED])) != now:  # not torn by a write
            now = again
        job, unit, started = now
        return (int(unit), started) if job == self.job.number else None

    def ends(self) -> float:
        """When the running unit runs out of time."""
        running = self.running()
        if running is None:
            return self.deadline
        unit, started = running
        return started + self.job.limits[unit]

    def culprit(self) -> int:
        """The place in the running job of the unit that was running (the first, if none had
        started): the one to blame when the worker dies or is killed."""
        running = self.running()
        return 0 if running is None else running[0]

    def over(self, memory: float) -> bool:
        """Whether the running job holds more than ``memory`` bytes beyond the base."""
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
    if can_fork():  # a forked worker starts at once, with all imported
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
    """``fn`` pickled for a worker, by value where it lives in ``__main__`` or is a lambda or a
    local function (a pandera schema built in a script or a notebook: a fresh worker never
    runs the user's ``__main__``), by reference elsewhere (cloudpickle); None when it cannot."""
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - a dependency of datacheck
        cloudpickle = None
    if cloudpickle is not None:
        try:
            return bytes(cloudpickle.dumps(fn))
        except Exception:  # noqa: BLE001 - e.g. a lock or an open file in a check's closure
            return None
    try:  # pragma: no cover - without cloudpickle
        return pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError):  # pragma: no cover
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
    size = min(workers, len(units))
    todo: deque[list[int]] = deque(batches(units, size))
    crashes: Counter[int] = Counter()
    idle = _take(size, modules)
    busy: dict[Connection, _Worker] = {}
    memory = memory_limit(workers, unit_memory)

    def job(indices: list[int]) -> _Job:
        some = [units[i] for i in indices]
        number = next(_JOBS)
        message = pickle.dumps(("units", number, some), protocol=pickle.HIGHEST_PROTOCOL)
        limits = [unit_time_limit(u, unit_timeout) for u in some]
        weight = sum(u.size // max(u.n_parts, 1) for u in some)
        return _Job(number, indices, some, limits, weight, message)

    nxt: _Job | None = None
    try:
        while todo or busy or nxt is not None:
            while todo or nxt is not None:
                if nxt is None:
                    nxt = job(todo.popleft())
                w = _next_worker(nxt, idle, busy, size, modules)
                if w is None:
                    break
                try:
                    w.assign(token, payload, modules)
                    w.run(nxt)
                except OSError:  # it died: start another for this job, or (busy) notice below
                    if w.jobs:
                        break
                    w.kill()
                    continue
                busy[w.conn], nxt = w, None
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
    todo: deque[list[int]],
    crashes: Counter[int],
    on_poison: OnPoison,
    memory: float = math.inf,
) -> Iterator[Any]:
    """Wait for the next busy workers to finish jobs, die, run out of time or of memory;
    yield what ends."""
    now = time.monotonic()
    timeout = max(0.0, min(w.ends() for w in busy.values()) - now)
    if not math.isinf(memory):
        timeout = min(timeout, MEMORY_POLL_S)
    sentinels: dict[Any, _Worker] = {w.proc.sentinel: w for w in busy.values()}
    ready = wait([*busy, *sentinels], timeout=None if math.isinf(timeout) else timeout)
    for w in {busy[r] if r in busy else sentinels[r] for r in ready}:
        yield from _drain(w, busy, idle, todo, crashes, on_poison)
    now = time.monotonic()
    for w in list(busy.values()):
        if w.ends() <= now:
            limit = w.job.limits[w.culprit()]
            yield _end(w, busy, todo, on_poison, f"the reader timed out after {limit:g} s")
        elif not math.isinf(memory) and w.over(memory):
            mib = memory / (1 << 20)
            message = f"the reader needed more than {mib:,.0f} MiB on this file"
            yield _end(w, busy, todo, on_poison, message)


def _drain(
    w: _Worker,
    busy: dict[Connection, _Worker],
    idle: list[_Worker],
    todo: deque[list[int]],
    crashes: Counter[int],
    on_poison: OnPoison,
) -> Iterator[Any]:
    """The results ``w`` sent back; then, if it died, the unit it was running is run once more,
    alone, in a fresh process (or is poison the second time), and the rest run again."""
    while w.jobs:
        msg = _receive(w)
        if msg is None:
            if w.proc.is_alive():
                return  # nothing more yet
            msg = _receive(w)  # what it sent just before dying
        if msg is None:
            culprit = w.job.indices[w.culprit()]
            crashes[culprit] += 1
            cause = w.cause_of_death()
            if crashes[culprit] < 2:
                _requeue(w, busy, todo, retry=True)  # once more, in a fresh process
                return
            yield _end(w, busy, todo, on_poison, f"the reader crashed ({cause}) on this file")
            return
        w.finished()
        if msg[0] == "error":
            _raise_remote(msg)
        yield from msg[1]
    del busy[w.conn]
    idle.append(w)


def _requeue(
    w: _Worker, busy: dict[Connection, _Worker], todo: deque[list[int]], retry: bool
) -> None:
    """Drop the ended worker ``w``; the unit it was running runs again alone first (``retry``)
    or not at all (it is poison); the others of its jobs run again, in their jobs."""
    culprit = w.culprit()
    del busy[w.conn]
    w.kill()
    first, *queued = w.jobs
    rest = [i for k, i in enumerate(first.indices) if k != culprit]
    again = [*([[first.indices[culprit]]] if retry else []), *([rest] if rest else [])]
    todo.extendleft(reversed([*again, *(j.indices for j in queued)]))


def _end(
    w: _Worker,
    busy: dict[Connection, _Worker],
    todo: deque[list[int]],
    on_poison: OnPoison,
    message: str,
) -> Any:
    """Kill ``w`` for the unit it was running, which is poison (``message``); the rest run
    again."""
    unit = w.job.units[w.culprit()]
    _requeue(w, busy, todo, retry=False)
    return on_poison(unit, message)


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
