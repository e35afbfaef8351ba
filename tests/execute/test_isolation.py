"""Isolated workers: retries in a fresh process, time limits, bugs re-raised, workers reused."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck.errors import UsageError
from datacheck.execute import _launch, _workers, run_units
from datacheck.execute._base import BATCH_BYTES, batches
from datacheck.execute._workers import RemoteTraceback, memory_limit, unit_time_limit
from datacheck.formats import WorkUnit


@pytest.fixture(params=["forked", "fresh"])
def worker_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Workers forked, or fresh interpreters (what a process with other threads starts)."""
    for w in _workers._IDLE:
        w.kill()
    _workers._IDLE.clear()
    forks = request.param == "forked"
    monkeypatch.setattr(_launch, "can_fork", lambda: forks)
    monkeypatch.setattr(_workers, "can_fork", lambda: forks)
    return str(request.param)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    import _poison_format  # noqa: F401 - discovery must recognise the test formats

    root = tmp_path / "data"
    root.mkdir()
    pq.write_table(pa.table({"x": [1.0, np.nan]}), root / "ok.parquet")
    return root


def test_a_unit_whose_process_died_once_is_retried_in_a_fresh_one(
    data: Path, worker_kind: str
) -> None:
    (data / "once.flaky").write_bytes(b"")
    report = datacheck.scan(data, out=data.parent / "out", executor="inprocess")
    files = report.files.set_index("path")
    assert (data / "once.flaky.seen").exists()  # it did die once
    # read on the retry: not corrupt (its 0 rows are an `empty` warning)
    flaky = next(e for e in report.data["files"] if e["path"].endswith("once.flaky"))
    assert flaky["counts"] == {"empty": 1}
    assert files.loc[str(data / "once.flaky"), "status"] == "flagged"
    assert files.loc[str(data / "ok.parquet"), "status"] == "flagged"


@pytest.mark.parametrize("executor", ["inprocess", "processes"])
def test_a_reader_past_its_time_limit_is_corrupt(data: Path, executor: str) -> None:
    (data / "stuck.hang").write_bytes(b"")
    report = datacheck.scan(
        data, out=data.parent / "out", executor=executor, workers=2, unit_timeout=1.5
    )
    files = report.files.set_index("path")
    assert files.loc[str(data / "stuck.hang"), "error"] == "the reader timed out after 1.5 s"
    assert files.loc[str(data / "ok.parquet"), "status"] == "flagged"


@pytest.mark.parametrize("executor", ["inprocess", "processes"])
def test_a_reader_past_its_memory_limit_is_corrupt(
    data: Path, executor: str, worker_kind: str
) -> None:
    (data / "bomb.hog").write_bytes(b"")
    report = datacheck.scan(
        data, out=data.parent / "out", executor=executor, workers=2, unit_memory_mb=400
    )
    files = report.files.set_index("path")
    error = files.loc[str(data / "bomb.hog"), "error"]
    assert error == "the reader needed more than 400 MiB on this file"
    assert files.loc[str(data / "ok.parquet"), "status"] == "flagged"


def test_default_time_limit_grows_with_the_unit() -> None:
    small = WorkUnit("a", "parquet", 1000, 0.0)
    big = WorkUnit("b", "parquet", 8 << 30, 0.0, n_parts=2)
    assert unit_time_limit(small, None) == pytest.approx(300, abs=1)
    assert unit_time_limit(big, None) == 300 + 1024
    assert unit_time_limit(big, 5) == 5 and unit_time_limit(big, 0) == float("inf")
    with pytest.raises(UsageError, match="unit_timeout"):
        datacheck.ScanConfig(unit_timeout=-1)
    with pytest.raises(UsageError, match="unit_memory_mb"):
        datacheck.ScanConfig(unit_memory_mb=-1)
    assert memory_limit(4, None) >= 2 << 30 and memory_limit(4, 0) == float("inf")


def _buggy(unit: int) -> int:
    if unit == 2:
        raise ZeroDivisionError("a bug in datacheck")
    return unit * 10


def _poison(unit: object, message: str) -> str:
    return f"poison {unit!r}: {message}"


def test_an_exception_in_the_unit_function_is_raised_with_the_worker_traceback(
    worker_kind: str,
) -> None:
    units = [_U(i) for i in range(4)]
    with pytest.raises(ZeroDivisionError, match="a bug") as info:
        list(run_units(partial(_call, _buggy), units, "processes", 2, on_poison=_poison))
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "_buggy" in str(info.value.__cause__)


class _U:
    size = 10
    n_parts = 1

    def __init__(self, i: int) -> None:
        self.i = i

    def __repr__(self) -> str:
        return str(self.i)


def _call(fn, unit: _U):  # type: ignore[no-untyped-def]
    return fn(unit.i)


def _pid(unit: _U) -> int:
    return os.getpid()


def test_workers_are_reused_by_the_next_run_and_none_is_this_process(worker_kind: str) -> None:
    units = [_U(i) for i in range(3)]
    first = set(run_units(_pid, units, "inprocess", 1, on_poison=_poison))
    second = set(run_units(_pid, units, "inprocess", 1, on_poison=_poison))
    assert first == second and os.getpid() not in first and len(first) == 1
    here = set(run_units(_pid, units, "inprocess", 1, on_poison=_poison, isolate=False))
    assert here == {os.getpid()}
    mains = set(run_units(_main_file, units, "inprocess", 1, on_poison=_poison))
    # a fresh worker runs datacheck's entry point (``-c``), never this process's __main__
    assert mains == ({None} if worker_kind == "fresh" else {sys.modules["__main__"].__file__})


def _main_file(unit: _U) -> str | None:
    return getattr(sys.modules["__main__"], "__file__", None)


def _dies_or_hangs(unit: int) -> int:
    if unit in (5, 23):
        os.abort()  # a native crash, every time
    if unit == 11:
        import time

        time.sleep(60)  # past its time limit
    return unit * 10


def test_only_the_unit_that_crashed_or_hung_is_poison_the_rest_of_its_job_runs_again(
    worker_kind: str,
) -> None:
    """Small units go to workers several per job, and jobs queue behind the running one: when a
    unit crashes or hangs, at the start of its job (5) or inside it (11, 23), only it is
    poison; every other unit of its job, and of the jobs queued behind, runs exactly once."""
    units = [_U(i) for i in range(40)]
    jobs = batches(units, 2)
    assert (jobs[1][0], jobs[2][1], jobs[4][3]) == (5, 11, 23)
    got = list(
        run_units(
            partial(_call, _dies_or_hangs), units, "processes", 2, on_poison=_poison, unit_timeout=3
        )
    )
    poison = sorted(g for g in got if isinstance(g, str))
    assert poison == [
        "poison 11: the reader timed out after 3 s",
        "poison 23: the reader crashed (SIGABRT) on this file",
        "poison 5: the reader crashed (SIGABRT) on this file",
    ]
    assert sorted(g for g in got if isinstance(g, int)) == [
        i * 10 for i in range(40) if i not in (5, 11, 23)
    ]


def _slow(unit: int) -> int:
    import time

    time.sleep(0.15)
    return unit


def test_each_unit_of_a_job_has_its_own_time_limit() -> None:
    """A job of four 0.15 s units takes 0.6 s: none of them is past a 0.4 s limit."""
    units = [_U(i) for i in range(16)]
    assert {len(b) for b in batches(units, 1)} == {4}
    got = list(
        run_units(partial(_call, _slow), units, "inprocess", 1, on_poison=_poison, unit_timeout=0.4)
    )
    assert sorted(got) == list(range(16))


def test_small_units_are_batched_big_ones_go_alone_and_every_worker_gets_several_jobs() -> None:
    small, big = _U(0), type("Big", (), {"size": BATCH_BYTES, "n_parts": 1})()
    assert batches([small] * 1000, 2) == [list(range(i, i + 64)) for i in range(0, 960, 64)] + [
        list(range(960, 1000))
    ]
    assert batches([small] * 10, 2) == [[i] for i in range(10)]  # >= 4 jobs a worker
    assert batches([small] * 40 + [big] + [small] * 40, 1) == [
        *[list(range(i, i + 20)) for i in (0, 20)],
        [40],
        *[list(range(i, i + 20)) for i in (41, 61)],
    ]


def test_small_jobs_are_queued_behind_the_running_one_big_ones_are_not() -> None:
    from datacheck.execute._workers import QUEUE_BYTES, QUEUE_JOBS, _Job, _Worker

    w = _Worker(())
    try:
        small = [_Job(i, [i], [None], [1.0], 1 << 10, b"x" * 100) for i in range(6)]
        assert w.room_for(small[0])
        w.jobs.append(small[0])
        queued = 0
        for job in small[1:]:
            if not w.room_for(job):
                break
            w.jobs.append(job)
            queued += 1
        assert queued == QUEUE_JOBS  # behind the running one
        w.jobs.clear()
        w.jobs.append(_Job(0, [0], [None], [1.0], QUEUE_BYTES, b"x"))
        assert not w.room_for(small[1])  # behind a big job nothing waits
    finally:
        w.kill()
