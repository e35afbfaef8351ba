"""Helpers for the cluster tests: comparable reports, free ports, a real dask cluster."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DASK = str(Path(sys.executable).with_name("dask"))


def can_hide_folders() -> bool:
    """Whether workers can be given a mount namespace of their own (root, util-linux)."""
    try:
        probe = ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs"]
        done = subprocess.run([*probe, "none", "/mnt"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def comparable(out: str | os.PathLike[str], strip: str = "") -> dict[str, Any]:
    """What must be identical between two runs: files, summary (less timing), ignored."""
    import json

    doc = json.loads((Path(out) / "report.json").read_text())
    summary = {k: v for k, v in doc["summary"].items() if k != "seconds"}
    files = [
        {**f, **{k: f[k].removeprefix(strip) for k in ("path", "root") if k in f}}
        for f in doc["files"]
    ]
    return {
        "summary": summary,
        "files": files,
        "ignored": [p.removeprefix(strip) for p in doc["ignored"]],
    }


def manifest(out: str | os.PathLike[str], strip: str = "") -> list[dict[str, Any]]:
    """The quarantine manifest as rows, in file order (paths made relative with ``strip``)."""
    table = pq.read_table(Path(out) / "quarantine.parquet")
    assert table.schema.field("row").type == pa.int64()
    rows = table.to_pylist()
    for r in rows:
        r["path"] = r["path"].removeprefix(strip)
    return rows


def _pythonpath() -> str:
    parts = [str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


class DaskCluster:
    """``dask scheduler`` + ``dask worker`` subprocesses on 127.0.0.1, torn down on exit."""

    def __init__(
        self,
        workers: int = 2,
        allowed_failures: int = 1,
        hide: str | os.PathLike[str] | None = None,
    ) -> None:
        """``hide``: a folder the workers do not see (an empty tmpfs over it in their own mount
        namespace): a cluster without the client's filesystem there."""
        self.hide = str(hide) if hide is not None else None
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.n_workers = workers
        self.env = {
            **os.environ,
            "PYTHONPATH": _pythonpath(),
            "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(allowed_failures),
            "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0",
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, *args: str, log: str, hidden: bool = False) -> None:
        cmd = [DASK, *args]
        if hidden and self.hide is not None:
            mount = f'mount -t tmpfs none {shlex.quote(self.hide)} && exec "$@"'
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "-", *cmd]
        with open(log, "wb") as fh:  # the child keeps its own copy of the descriptor
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    env=self.env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def __enter__(self) -> DaskCluster:
        import tempfile

        self.logs = tempfile.mkdtemp(prefix="dc-dask-logs-")
        self._spawn(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--no-dashboard",
            log=f"{self.logs}/scheduler.log",
        )
        for i in range(self.n_workers):
            self._spawn(
                "worker",
                self.address,
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
                "--name",
                f"w{i}",
                "--preload",
                "_poison_format",
                log=f"{self.logs}/worker{i}.log",
                hidden=True,
            )
        self.wait_for_workers()
        return self

    def wait_for_workers(self, timeout: float = 60) -> None:
        from distributed import Client

        with Client(self.address, timeout=timeout, set_as_default=False) as c:
            c.wait_for_workers(self.n_workers, timeout=timeout)

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in reversed(self.procs):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
