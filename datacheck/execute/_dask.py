"""The dask.distributed executor: run work units on a cluster, results as tasks finish.

Connects to a running scheduler (``scheduler=`` address, or a ``client=`` the caller owns),
or starts a :class:`~distributed.LocalCluster` of single-threaded worker processes that is
torn down when the scan ends, is interrupted, or fails.  Only :class:`~datacheck.formats.WorkUnit`
objects (paths, never data) travel to the workers; workers read the files themselves and send
back small result objects.

Small units travel in batches (one task runs up to :data:`~datacheck.execute._base.BATCH_UNITS`
of them, at most :data:`~datacheck.execute._base.BATCH_BYTES` of data): a task costs the
scheduler milliseconds, a JPEG one to decode.

Faults: a task whose worker dies is redone elsewhere by the scheduler; a unit on which workers
died more than ``allowed-failures`` times (a poison file that crashes the reader process) comes
back as :class:`~distributed.KilledWorker` and is handed to the caller's ``on_poison``, and
the scan carries on (a batch that kills its workers is split: each of its units runs again as
its own task, so only the poison one is reported).  Exceptions raised inside a task are retried ``retries`` times
(they are datacheck bugs or infrastructure errors, since reader errors are already findings).

This module imports dask; it is imported only when the ``distributed`` executor is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import dask
from distributed import CancelledError, Client, Future, KilledWorker, LocalCluster, as_completed

from datacheck.errors import UsageError
from datacheck.execute._base import OnPoison, WorkerFiles, batches

__all__ = ["run_distributed"]

ALLOWED_FAILURES = 1
"""Worker deaths a unit may cause before it is declared poison (our local clusters only): one
retry in a fresh worker, as on the local executors."""


def dask_setup(worker: object) -> None:
    """Worker preload of our local clusters: Ctrl-C is the client's to handle.

    A terminal sends SIGINT to the whole process group; the client then cancels the tasks and
    closes the cluster, so the workers must not die on their own with a traceback each.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _local_cluster(workers: int, allowed_failures: int) -> LocalCluster:
    settings = {
        "distributed.scheduler.allowed-failures": allowed_failures,
        # One task in flight per single-threaded worker: a poison file then never takes an
        # innocent unit queued on the same worker down with it.
        "distributed.scheduler.worker-saturation": 1.0,
        "distributed.worker.preload": [__name__],  # runs dask_setup in every (re)started worker
    }
    with dask.config.set(settings):
        try:
            return LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                silence_logs=logging.CRITICAL,  # teardown chatter; task errors surface as results
            )
        except RuntimeError as exc:
            script = _script()
            if script is None:
                raise
            raise UsageError(
                f"executor='distributed': dask could not start its local workers ({exc}): it "
                f"starts them with multiprocessing's spawn, which runs {script} again in each, "
                'and where its scan is not under `if __name__ == "__main__":` each worker '
                "starts the scan again and dies. Put the scan under that guard, use executor='processes' (its workers "
                "never run your script), or pass scheduler= the address of a running cluster"
            ) from exc


def _script() -> str | None:
    """The script this process runs (``python train.py``), None otherwise (``-m``, a REPL)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    return str(path) if path else None


@contextlib.contextmanager
def _connect(
    client: Client | None, scheduler: str | None, workers: int, allowed_failures: int
) -> Iterator[Client]:
    """The client to use; whatever this opens (client, local cluster) it also closes."""
    if client is not None:
        yield client
        return
    if scheduler:
        with _client(scheduler) as own:
            yield own
        return
    with _environment_kept():
        cluster = _local_cluster(workers, allowed_failures)
        try:
            with _client(cluster) as own:
                yield own
        finally:
            cluster.close()


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """Put this process's environment back as it was: dask's nannies write the variables they
    give their workers (``OMP_NUM_THREADS=1``, ``MALLOC_TRIM_THRESHOLD_``, ``PYTHONHASHSEED``)
    into the environment of the process that starts them, at every worker (re)start, where a
    training script's later DataLoader workers and subprocesses would inherit them."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        if os.environ != saved:
            os.environ.clear()
            os.environ.update(saved)


def _client(target: str | LocalCluster) -> Client:
    try:
        return Client(target, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(
            f"scheduler {target!r}: cannot connect ({exc}); check the address and that the "
            "scheduler is running and reachable from here"
        ) from exc


def _announce(client: Client, echo: Callable[[str], None]) -> None:
    """Print the dashboard link when the scheduler serves one."""
    services = client.scheduler_info().get("services", {})
    if "dashboard" in services:
        echo(f"datacheck: dask dashboard: {client.dashboard_link}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_distributed(
    fn: Callable[[Any], Any],
    units: Sequence[Any],
    workers: int,
    *,
    client: Client | None = None,
    scheduler: str | None = None,
    retries: int = 1,
    allowed_failures: int = ALLOWED_FAILURES,
    echo: Callable[[str], None] = _stderr,
    on_poison: OnPoison,
    fetch_dir: str | None = None,
) -> Iterator[Any]:
    """Run ``fn`` over ``units`` on a dask cluster, yielding results as tasks finish.

    A result that names files on its worker (:class:`~datacheck.execute.WorkerFiles`: the
    worker could not see the caller's output folder) has them copied into ``fetch_dir``
    :data:`FETCH_BYTES` at a time, by tasks pinned to that worker, then removed there; if the
    worker is gone before that, its unit runs again.

    Args:
        fn: the picklable unit function (workers must be able to import datacheck).
        units: the work units; only these small objects travel to the workers.
        workers: worker processes of the local cluster started when no cluster is given.
        client: an existing :class:`distributed.Client` (left open).
        scheduler: address of a running scheduler, e.g. ``tcp://10.0.0.5:8786``.
        retries: re-runs of a task that raised (worker deaths are handled by the scheduler).
        allowed_failures: worker deaths before a unit is poison, for the local cluster only;
            a running scheduler uses its own ``distributed.scheduler.allowed-failures``.
        echo: where the dashboard link goes (stderr by default).
        on_poison: builds the result of a unit that killed every worker that read it.
        fetch_dir: where worker files are copied to (default: a temporary folder).

    Raises:
        Exception: whatever a task raised after its retries (a bug, not bad data).
    """
    if client is not None and scheduler is not None:
        raise ValueError("pass either client= or scheduler=, not both")
    return _results(
        fn,
        list(units),
        workers,
        client,
        scheduler,
        retries,
        allowed_failures,
        echo,
        on_poison,
        fetch_dir,
    )


def _results(
    fn: Callable[[Any], Any],
    units: list[Any],
    workers: int,
    client: Client | None,
    scheduler: str | None,
    retries: int,
    allowed_failures: int,
    echo: Callable[[str], None],
    on_poison: OnPoison,
    fetch_dir: str | None,
) -> Iterator[Any]:
    if not units:
        return
    with _connect(client, scheduler, workers, allowed_failures) as c:
        _announce(c, echo)
        token = uuid.uuid4().hex[:8]
        n_workers = len(c.scheduler_info().get("workers", {})) or workers
        planned = batches(units, n_workers)
        keys = [f"datacheck-units-{token}-{b[0]}-{len(b)}" for b in planned]
        futures: list[Future] = c.map(
            partial(run_batch, fn),
            [[units[i] for i in b] for b in planned],
            key=keys,
            retries=retries,
            pure=False,
        )
        batch_of = dict(zip(keys, planned, strict=True))
        running = as_completed(futures, loop=c.loop)
        try:

            def again(i: int, why: str) -> None:
                key = f"datacheck-units-{token}-{i}-{why}-{uuid.uuid4().hex[:6]}"
                batch_of[key] = [i]
                one = c.submit(run_batch, fn, [units[i]], key=key, retries=retries, pure=False)
                futures.append(one)
                running.add(one)

            for fut in running:
                batch = batch_of.pop(fut.key)
                try:
                    address, results = fut.result()
                except KilledWorker as exc:
                    if len(batch) == 1:
                        yield _poison(exc, units[batch[0]], on_poison)
                    else:  # split: the units run one per task, the poison one alone
                        for i in batch:
                            again(i, "alone")
                    fut.release()
                    continue
                fut.release()
                for i, res in zip(batch, results, strict=True):
                    try:
                        yield _localise(c, address, res, fetch_dir)
                    except _WorkerGone:  # its files went with it: the unit runs again
                        again(i, "refetch")
        finally:
            c.cancel([f for f in futures if not f.done()])


def run_batch(fn: Callable[[Any], Any], units: list[Any]) -> tuple[str, list[Any]]:
    """One task: ``fn`` over a few units, in order, and the address of the worker it ran on
    (where any files its results name are)."""
    from distributed import get_worker

    try:
        address = get_worker().address
    except ValueError:  # not on a worker (dask's synchronous scheduler)
        address = ""
    return address, [fn(unit) for unit in units]


FETCH_BYTES = 8 << 20
"""Bytes of a worker file copied per task: the client holds one such piece at a time."""


FETCH_TIMEOUT_S = 300
"""A piece not read within this time: its worker is taken for gone (a task pinned to a worker
that left waits for it forever)."""


class _WorkerGone(Exception):
    """The worker holding a result's files left before they were copied."""


def _read_piece(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(size)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _localise(c: Client, address: str, res: Any, fetch_dir: str | None) -> Any:
    """``res`` with the files it left on its worker copied here, a piece at a time."""
    files = res.worker_files() if isinstance(res, WorkerFiles) else []
    if not files or not address:
        return res
    if address not in c.scheduler_info().get("workers", {}):
        raise _WorkerGone(address)
    folder = fetch_dir or tempfile.mkdtemp(prefix="datacheck-fetched-")
    moved: dict[str, str] = {}
    pinned = {"workers": [address], "allow_other_workers": False, "pure": False}
    for path in files:
        dest = os.path.join(folder, os.path.basename(path))
        tmp = dest + ".fetching"
        try:
            with open(tmp, "wb") as out:
                offset = 0
                while True:
                    task = c.submit(_read_piece, path, offset, FETCH_BYTES, **pinned)
                    piece = task.result(timeout=FETCH_TIMEOUT_S)
                    if not piece:
                        break
                    out.write(piece)
                    offset += len(piece)
        except (KilledWorker, OSError, CancelledError, TimeoutError) as exc:
            _remove(tmp)
            raise _WorkerGone(address) from exc
        os.replace(tmp, dest)
        c.submit(_remove, path, **pinned)  # no need to wait
        moved[path] = dest
    return res.localised(moved)


def _poison(exc: KilledWorker, unit: Any, on_poison: OnPoison) -> Any:
    deaths = getattr(exc, "allowed_failures", ALLOWED_FAILURES) + 1
    msg = f"the reader crashed (KilledWorker: {deaths} worker processes died) on this file"
    return on_poison(unit, msg)
