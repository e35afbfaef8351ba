"""dask.distributed at work: a real scheduler and workers on loopback, killed workers,
a poison file, the ``--scheduler`` / ``--workers`` CLI paths and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _clusterkit import DaskCluster, can_hide_folders, comparable, manifest

import datacheck
from datacheck.engine._journal import JOURNAL
from datacheck.errors import UsageError

pytestmark = pytest.mark.slow

SHARDS = 24
ROWS = 250_000


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards big enough that a scan is still running when a worker is killed."""
    root = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(3)
    for i in range(SHARDS):
        cols = {f"f{j}": rng.standard_normal(ROWS) for j in range(3)}
        cols["f0"][[i, 1000 + i]] = np.nan
        cols["f1"][i * 7] = np.inf
        pq.write_table(pa.table(cols), root / f"shard-{i:03d}.parquet", compression="none")
    return root


@pytest.fixture(scope="module")
def clean(shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clean")
    datacheck.scan(shards, out=out, executor="inprocess")
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[DaskCluster]:
    with DaskCluster(workers=2, allowed_failures=1) as c:
        yield c


@pytest.fixture
def client(cluster: DaskCluster) -> Iterator[object]:
    from distributed import Client

    cluster.wait_for_workers()  # an earlier test may have killed some: nannies restart them
    with Client(cluster.address, set_as_default=False) as c:
        yield c


def test_a_worker_killed_mid_scan_changes_nothing(
    shards: Path, clean: Path, client, tmp_path: Path
) -> None:
    pids = client.run(os.getpid)
    killed: list[str] = []

    def progress(result: object, done: int, total: int) -> None:
        if killed or done < 3:
            return
        busy = [w for w, keys in client.processing().items() if keys and w in pids]
        if busy:  # a task in flight there is lost with the process and must be redone
            os.kill(pids[busy[0]], signal.SIGKILL)
            killed.append(busy[0])

    datacheck.scan(shards, out=tmp_path, client=client, progress=progress)
    assert killed, "no worker was busy to kill: the scan was too short"
    assert (
        not psutil.pid_exists(pids[killed[0]])
        or psutil.Process(pids[killed[0]]).status() == "zombie"
    )
    assert comparable(tmp_path) == comparable(clean)
    assert manifest(tmp_path) == manifest(clean)


def test_a_poison_file_ends_as_corrupt_and_the_scan_finishes(
    shards: Path, cluster: DaskCluster, client, tmp_path: Path
) -> None:
    import _poison_format  # noqa: F401 - discovery must recognise *.poison here too

    data = tmp_path / "data"
    data.mkdir()
    for name in ("shard-000.parquet", "shard-001.parquet"):
        os.symlink(shards / name, data / name)
    (data / "bad.poison").write_bytes(b"boom")
    before = client.run(os.getpid)
    report = datacheck.scan(data, out=tmp_path / "out", client=client, follow_symlinks=True)
    files = report.files.set_index("path")
    bad = str(data / "bad.poison")
    assert files.loc[bad, "status"] == "corrupt"
    assert (
        "KilledWorker" in files.loc[bad, "error"]
        and "2 worker processes" in files.loc[bad, "error"]
    )
    assert (files.drop(index=bad)["status"] == "flagged").all()
    corrupt = report.findings[report.findings["check"] == "corrupt"]
    assert corrupt["path"].tolist() == [bad]
    cluster.wait_for_workers()
    assert set(client.run(os.getpid).values()) != set(before.values())  # workers did die


def test_a_poison_file_batched_with_small_ones_is_the_only_one_lost(
    cluster: DaskCluster, client, tmp_path: Path
) -> None:
    """Small units go several to a task: the batch holding a poison file is split, its other
    units run again one per task, and only the poison one is corrupt."""
    import _poison_format  # noqa: F401 - discovery must recognise *.poison here too

    from datacheck.execute._base import batches

    data = tmp_path / "data"
    data.mkdir()
    for i in range(30):
        pq.write_table(pa.table({"x": [float(i), np.nan]}), data / f"f{i:02d}.parquet")
    (data / "f10-bad.poison").write_bytes(b"boom")
    report = datacheck.scan(data, out=tmp_path / "out", client=client)
    units = sorted(data.iterdir())
    sizes = [type("U", (), {"size": 1, "n_parts": 1})() for _ in units]
    assert max(len(b) for b in batches(sizes, 2)) > 1  # the poison file shared a task
    files = report.files.set_index("path")
    bad = str(data / "f10-bad.poison")
    assert "KilledWorker" in files.loc[bad, "error"]
    assert (files.drop(index=bad)["status"] == "flagged").all() and len(files) == 31
    corrupt = report.findings[report.findings["check"] == "corrupt"]
    assert corrupt["path"].tolist() == [bad]
    assert report.summary["rows"] == 60


def _cli(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *args],
        capture_output=True,
        text=True,
        timeout=240,
        **kw,
    )


def _scan_cmd(shards: Path, out: Path, executor: str = "distributed") -> list[str]:
    """``datacheck scan`` on the shards with 2 local workers, as a command line."""
    return [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(shards),
        "--executor",
        executor,
        "--workers",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]


def test_cli_scheduler_address(
    shards: Path, clean: Path, cluster: DaskCluster, tmp_path: Path
) -> None:
    cluster.wait_for_workers()
    proc = _cli(
        "scan", str(shards), "--scheduler", cluster.address, "--out", str(tmp_path), "--no-progress"
    )
    assert proc.returncode == 1, proc.stderr  # the shards hold NaN/Inf
    report = datacheck.load_report(tmp_path)
    assert report.settings["executor"] == "distributed"
    assert comparable(tmp_path) == comparable(clean)
    assert manifest(tmp_path) == manifest(clean)


def test_cli_workers_starts_and_tears_down_a_local_cluster(
    shards: Path, clean: Path, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        _scan_cmd(shards, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = _children_while_running(proc)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err
    assert "dask dashboard: http://" in err
    assert len(children) >= 2  # the local workers existed ...
    assert _all_gone(children)  # ... and are gone with the scan
    assert comparable(tmp_path) == comparable(clean)
    assert manifest(tmp_path) == manifest(clean)


def _children_while_running(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    deadline = time.monotonic() + 120
    seen: dict[int, psutil.Process] = {}
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            for c in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            break
        if len(seen) >= 2:
            break
        time.sleep(0.1)
    return list(seen.values())


def _all_gone(procs: list[psutil.Process], timeout: float = 30) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _as_from_a_terminal() -> None:
    """Ctrl-C's default action in the scan, as in a terminal: a test run started in the
    background by a non-interactive shell has SIGINT ignored, and children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("sig", "code", "said", "executor"),
    [
        (signal.SIGINT, 130, "interrupted", "distributed"),
        (signal.SIGTERM, 143, "terminated (SIGTERM)", "distributed"),
        (signal.SIGTERM, 143, "terminated (SIGTERM)", "processes"),
    ],
    ids=["ctrl-c", "sigterm", "sigterm-processes"],
)
def test_ctrl_c_stops_cleanly_and_resume_finishes_the_scan(
    shards: Path, clean: Path, tmp_path: Path, sig: int, code: int, said: str, executor: str
) -> None:
    cmd = _scan_cmd(shards, tmp_path, executor)
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    journal = tmp_path / JOURNAL
    deadline = time.monotonic() + 120
    # The journal holds the lines of quick units and writes them together (every 0.2 s, or
    # once they took 20 ms of work): on a quiet machine the rest of the scan can end inside
    # one such batch, so the signal goes at the first line written.
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:  # header + a unit
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the scan ended before it could be interrupted"
    children = psutil.Process(proc.pid).children(recursive=True)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the whole group
    else:
        proc.send_signal(sig)  # a pre-empted job: the scheduler signals the main process
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert said in err
    assert f"kept in {tmp_path}: rerun the same command with --resume to finish" in err, err
    assert "KeyboardInterrupt" not in err, err  # workers leave the shutdown to the client
    assert _all_gone(children), "local workers outlived the interrupted scan"
    assert not (tmp_path / "report.json").exists()
    done = len(journal.read_text().splitlines()) - 1
    assert 1 <= done < SHARDS
    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 1, resumed.stderr
    assert comparable(tmp_path) == comparable(clean)
    assert manifest(tmp_path) == manifest(clean)


def test_an_unreachable_scheduler_is_one_line_and_exit_2(demo_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}
    proc = _cli(
        "scan", str(demo_dir), "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path), env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert "scheduler 'tcp://127.0.0.1:9': cannot connect" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scheduler": "tcp://127.0.0.1:1", "executor": "processes"},
        {"scheduler": "tcp://127.0.0.1:1", "client": object()},
        {"scheduler": "  "},
    ],
)
def test_cluster_settings_are_validated(kwargs: dict, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        datacheck.scan(tmp_path, out=tmp_path / "o", **kwargs)


def test_workers_with_a_cluster_is_ignored_with_a_warning() -> None:
    from datacheck._scan import ScanConfig

    with pytest.warns(UserWarning, match="workers=4 is ignored"):
        config = ScanConfig(scheduler="tcp://127.0.0.1:8786", workers=4)
    assert config.executor == "distributed"


def test_workers_that_cannot_see_out_send_big_findings_a_piece_at_a_time(tmp_path: Path) -> None:
    """Workers in their own mount namespace, with an empty tmpfs over OUT (a cluster without
    a shared filesystem): a unit past the spill size writes its part in the worker's own temp
    folder and the client copies it over in 8 MiB pieces, then removes it there; small units
    send their findings with their result.  Report and manifest as a local scan's."""
    if not can_hide_folders():
        pytest.skip("needs unshare and mount (root) to give workers their own mount namespace")
    from datacheck.engine._result import SPILL_ROWS

    data = tmp_path / "data"
    data.mkdir()
    big = np.full(SPILL_ROWS + 5_000, np.nan)
    big[::3] = 1.0
    pq.write_table(pa.table({"x": big, "y": big[::-1].copy()}), data / "big.parquet")
    small = np.arange(100.0)
    small[7] = np.inf
    pq.write_table(pa.table({"x": small}), data / "small.parquet")
    local = tmp_path / "local"
    datacheck.scan(data, out=local, executor="inprocess")
    out = tmp_path / "out"
    out.mkdir()
    before = set(Path("/tmp").glob("datacheck-parts-*/*.arrow"))
    with DaskCluster(workers=2, hide=out) as cluster:
        remote = datacheck.scan(data, out=out, scheduler=cluster.address)
        deadline = time.monotonic() + 10  # the removal is not waited for
        while set(Path("/tmp").glob("datacheck-parts-*/*.arrow")) - before:
            assert time.monotonic() < deadline, "the worker's part was left behind"
            time.sleep(0.1)
    assert remote.summary["sites"]["nan"]["error"] > 2 * SPILL_ROWS // 3
    assert comparable(out) == comparable(local)
    assert manifest(out) == manifest(local)


def test_a_local_cluster_leaves_the_callers_environment_as_it_was(tmp_path: Path) -> None:
    """dask's nannies write OMP_NUM_THREADS=1 (and more) into the starting process's
    environment: a training script's later DataLoader workers would inherit it."""
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"x": [1.0, np.nan]}), data / "a.parquet")
    code = (
        "import json, os, sys\n"
        "import datacheck\n"
        "before = dict(os.environ)\n"
        "r = datacheck.scan(sys.argv[1], out=sys.argv[2], executor='distributed', workers=2)\n"
        "print(json.dumps([r.data['files'][0]['counts'],\n"
        "    sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONHASHSEED")}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(data), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts, changed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts == {"nan": 1}
    assert changed == []
