"""The executor contract: every executor gives the same report and manifest, unit by unit,
and a reader that crashes natively on a file makes it ``corrupt``, never ends the scan.

Each executor (``inprocess``, ``processes``, ``distributed`` on a real local dask cluster)
runs the same cases; the unisolated in-process run (``isolate=False``) is the reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _clusterkit import comparable, manifest

import datacheck
from datacheck._demo import PLANTED
from datacheck._scan import _run_unit
from datacheck.engine._discover import discover, plan_units
from datacheck.engine._result import poison_result
from datacheck.execute import run_units

EXECUTORS = ("inprocess", "processes", "distributed")
"""What a user can pick; all of them isolate readers in worker processes."""
REFERENCE = {"executor": "inprocess", "isolate": False}


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    import dask
    from distributed import Client, LocalCluster

    with (
        dask.config.set(  # as our own local clusters: one retry, one task per worker at a time
            {
                "distributed.scheduler.allowed-failures": 1,
                "distributed.scheduler.worker-saturation": 1.0,
            }
        ),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.fixture(params=EXECUTORS)
def run_opts(request: pytest.FixtureRequest) -> dict[str, object]:
    """Scan keyword arguments selecting one executor (distributed: a shared local cluster)."""
    if request.param == "distributed":
        return {"client": request.getfixturevalue("dask_client")}
    return {"executor": request.param, "workers": 2}


@pytest.fixture(scope="module")
def reference(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref")
    datacheck.scan(demo_dir, demo_dir / "schema.yaml", out=out, **REFERENCE)
    return out


def test_demo_report_and_manifest_equal_the_in_process_run(
    demo_dir: Path, reference: Path, run_opts: dict[str, object], tmp_path: Path
) -> None:
    report = datacheck.scan(demo_dir, demo_dir / "schema.yaml", out=tmp_path, **run_opts)
    assert comparable(tmp_path) == comparable(reference)
    assert manifest(tmp_path) == manifest(reference)
    assert not (tmp_path / "parts").exists() and not (tmp_path / "journal.jsonl").exists()
    found = {
        (str(Path(p).relative_to(demo_dir)), c)
        for p, c in zip(report.findings["path"], report.findings["check"], strict=True)
    }
    assert {(p, c) for p, _, _, c in PLANTED} <= found


def test_every_unit_yields_exactly_one_result(
    demo_dir: Path, run_opts: dict[str, object], tmp_path: Path
) -> None:
    units = plan_units(discover([str(demo_dir)])[0])
    fn = partial(_run_unit, schema=None, parts_dir=str(tmp_path))
    opts = dict(run_opts)
    executor = str(opts.pop("executor", "distributed"))
    workers = int(opts.pop("workers", 2))  # type: ignore[call-overload]
    results = list(run_units(fn, units, executor, workers, on_poison=poison_result, **opts))
    assert sorted(r.key for r in results) == sorted(u.key for u in units)
    flagged = [r for r in results if r.findings_rows]
    assert flagged  # findings stay in part files the workers wrote; only counts travel back
    assert all(r.table is None and Path(r.part_file).is_file() for r in flagged)
    assert list(run_units(fn, [], executor, workers, on_poison=poison_result, **opts)) == []


def test_row_group_units_of_a_large_file_match(run_opts: dict[str, object], tmp_path: Path) -> None:
    rows = 400_000
    x = np.random.default_rng(1).standard_normal(rows)
    x[[5, 250_001, 399_999]] = np.nan
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(
        pa.table({"x": x, "y": np.arange(rows)}),
        data / "big.parquet",
        row_group_size=50_000,
        compression="none",
    )
    ref = datacheck.scan(data, out=tmp_path / "ref", unit_bytes=1 << 20, **REFERENCE)
    got = datacheck.scan(data, out=tmp_path / "got", unit_bytes=1 << 20, **run_opts)
    assert comparable(tmp_path / "got") == comparable(tmp_path / "ref")
    assert manifest(tmp_path / "got") == manifest(tmp_path / "ref")
    assert got.summary["rows"] == rows and ref.summary["rows"] == rows
    assert sorted(got.findings["row"].tolist()) == [5, 250_001, 399_999]


@pytest.mark.parametrize(("ext", "signal_name"), [("segv", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_reader_that_crashes_makes_its_file_corrupt_exactly_once(
    ext: str, signal_name: str, run_opts: dict[str, object], tmp_path: Path
) -> None:
    import _poison_format  # noqa: F401 - discovery must recognise *.segv / *.abort here

    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"x": [float(i), np.nan]}), data / f"ok-{i}.parquet")
    (data / f"bad.{ext}").write_bytes(b"boom")
    report = datacheck.scan(data, out=tmp_path / "out", **run_opts)
    files = report.files.set_index("path")
    bad = str(data / f"bad.{ext}")
    assert files.loc[bad, "status"] == "corrupt"
    error = files.loc[bad, "error"]
    assert error.startswith("the reader crashed (") and error.endswith("on this file")
    if "client" not in run_opts:  # dask reports a dead worker, not how it died
        assert f"({signal_name})" in error
    corrupt = report.findings[report.findings["check"] == "corrupt"]
    assert corrupt["path"].tolist() == [bad]
    assert (files.drop(index=bad)["status"] == "flagged").all()
    assert report.summary["rows"] == 6


def test_auto_weighs_the_work_not_only_the_bytes() -> None:
    """A thousand small images are little data but much work: ``auto`` starts workers for
    them; three small tables stay in one worker."""
    from datacheck.execute import AUTO_MIN_BYTES, _auto
    from datacheck.formats import WorkUnit, estimated_work

    images = [WorkUnit(f"/d/{i}.jpg", "image", 60_000, 0.0) for i in range(1000)]
    tables = [WorkUnit(f"/d/{i}.parquet", "parquet", 60_000, 0.0) for i in range(3)]
    assert sum(u.size for u in images) < AUTO_MIN_BYTES < estimated_work(images)
    assert _auto(images, 2, estimated_work(images)) == "processes"
    assert _auto(images, 1, estimated_work(images)) == "inprocess"
    assert _auto(tables, 2, estimated_work(tables)) == "inprocess"
    assert _auto(images, 2, None) == "inprocess"  # by bytes alone (the old rule)
    # 10,000 small Parquet files: the fixed cost per unit adds up
    shards = [WorkUnit(f"/d/{i}.parquet", "parquet", 4_000, 0.0) for i in range(10_000)]
    assert _auto(shards, 2, estimated_work(shards)) == "processes"
