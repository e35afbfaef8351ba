"""Remote storage: ``s3://`` against a real S3-compatible server (moto's server mode on
loopback, started here as a subprocess; no mock of the client) and ``memory://``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _clusterkit import comparable, free_port, manifest
from _mediakit import hf_split_files, write_mds

import datacheck
from datacheck.engine._discover import discover, plan_units
from datacheck.errors import InputError

BUCKET = "dc-test"
MOTO = str(Path(sys.executable).with_name("moto_server"))


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """A local S3 endpoint; AWS_* variables point every client (and spawned worker) at it."""
    pytest.importorskip("s3fs")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _wait_for(endpoint)
        import s3fs

        s3fs.S3FileSystem().mkdir(BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wait_for(endpoint: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def s3_demo(s3_server: str, demo_dir: Path) -> str:
    """The demo dataset uploaded under s3://dc-test/demo/ (plus a non-data object)."""
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.put(str(demo_dir) + "/", f"{BUCKET}/demo/", recursive=True)
    fs.pipe(f"{BUCKET}/demo/_SUCCESS", b"")
    fs.invalidate_cache()
    return f"s3://{BUCKET}/demo"


def test_s3_prefix_scan_equals_the_local_scan(s3_demo: str, demo_dir: Path, tmp_path: Path) -> None:
    local = tmp_path / "local"
    datacheck.scan(demo_dir, demo_dir / "schema.yaml", out=local, executor="inprocess")
    report = datacheck.scan(
        s3_demo, demo_dir / "schema.yaml", out=tmp_path / "s3", executor="inprocess"
    )
    assert report.summary["files"] == 5 and report.summary["rows"] == 4000
    got = comparable(tmp_path / "s3", strip=s3_demo)
    want = comparable(local, strip=str(demo_dir))
    assert got["files"] == want["files"]
    assert got["summary"] == want["summary"]
    assert f"{s3_demo}/_SUCCESS" in report.data["ignored"]
    assert manifest(tmp_path / "s3", strip=s3_demo) == manifest(local, strip=str(demo_dir))


def test_s3_glob_and_single_object(s3_demo: str) -> None:
    files, _ = discover([f"{s3_demo}/train/*.parquet"])
    assert [Path(f).name for f, _ in files] == [f"shard-00{i}.parquet" for i in (0, 1, 2, 4)]
    files, _ = discover([f"{s3_demo}/train/shard-003.csv"])
    assert files == [(f"{s3_demo}/train/shard-003.csv", f"{s3_demo}/train")]


def test_s3_missing_prefix_is_an_input_error(s3_demo: str) -> None:
    with pytest.raises(InputError, match="no such object"):
        discover([f"s3://{BUCKET}/nothing-here/"])


def test_unit_key_has_size_mtime_and_etag(s3_demo: str) -> None:
    import s3fs

    url = f"{s3_demo}/train/shard-001.parquet"
    (before,) = plan_units(discover([url])[0])
    assert before.etag and before.size > 0 and before.mtime > 0
    data = s3fs.S3FileSystem().cat(url)
    changed = data[:-9] + bytes([data[-9] ^ 1]) + data[-8:]  # same size, other content
    s3fs.S3FileSystem().pipe(url, changed)
    try:
        (after,) = plan_units(discover([url])[0])
        assert after.size == before.size and after.etag != before.etag
        assert after.key != before.key  # --resume would scan it again
    finally:
        s3fs.S3FileSystem().pipe(url, data)


def test_s3_large_object_is_split_into_row_group_units(s3_server: str, tmp_path: Path) -> None:
    import s3fs

    rows = 300_000
    x = np.random.default_rng(5).standard_normal(rows)
    x[[9, 299_000]] = np.nan
    local = tmp_path / "big.parquet"
    pq.write_table(pa.table({"x": x}), local, row_group_size=40_000, compression="none")
    s3fs.S3FileSystem().put(str(local), f"{BUCKET}/big/big.parquet")
    url = f"s3://{BUCKET}/big/"
    units = plan_units(discover([url])[0], unit_bytes=1 << 20)
    assert len(units) > 1
    report = datacheck.scan(url, out=tmp_path / "o", unit_bytes=1 << 20, executor="inprocess")
    assert report.summary["rows"] == rows
    assert sorted(report.findings["row"].tolist()) == [9, 299_000]


@pytest.mark.slow
def test_s3_on_a_local_dask_cluster_workers_read_the_objects(
    s3_demo: str, demo_dir: Path, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    datacheck.scan(demo_dir, demo_dir / "schema.yaml", out=local, executor="inprocess")
    datacheck.scan(
        s3_demo, demo_dir / "schema.yaml", out=tmp_path / "s3", executor="distributed", workers=2
    )
    assert (
        comparable(tmp_path / "s3", strip=s3_demo)["files"]
        == comparable(local, strip=str(demo_dir))["files"]
    )
    assert manifest(tmp_path / "s3", strip=s3_demo) == manifest(local, strip=str(demo_dir))


def test_memory_filesystem(demo_dir: Path, tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.put(str(demo_dir / "train") + "/", "/dc-demo/train/", recursive=True)
    try:
        report = datacheck.scan(
            "memory://dc-demo/train", demo_dir / "schema.yaml", out=tmp_path, executor="inprocess"
        )
        assert report.summary["files"] == 5
        assert report.summary["status"] == {"ok": 1, "flagged": 3, "corrupt": 1}
        assert all(p.startswith("memory://") for p in report.files["path"])
    finally:
        fs.rm("/dc-demo", recursive=True)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_missing_credentials_are_one_line_and_exit_2(
    s3_demo: str, s3_server: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=s3_server,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "datacheck", "scan", s3_demo, "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "cannot list (NoCredentialsError" in proc.stderr


def test_s3_object_without_extension_is_sniffed_by_magic_bytes(
    s3_server: str, tmp_path: Path
) -> None:
    import s3fs

    x = np.ones(100)
    x[42] = np.inf
    local = tmp_path / "blob"
    pq.write_table(pa.table({"x": x}), local)
    s3fs.S3FileSystem().put(str(local), f"{BUCKET}/noext/part-0")
    report = datacheck.scan(f"s3://{BUCKET}/noext/", out=tmp_path / "o", executor="inprocess")
    assert report.files["format"].tolist() == ["parquet"]
    assert report.findings["row"].tolist() == [42]


def _put(files: dict[str, bytes]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem()
    for key, data in files.items():
        fs.pipe(f"{BUCKET}/{key}", data)
    fs.invalidate_cache()


def _sites(report: datacheck.Report) -> set[tuple[str, int, str, str]]:
    f = report.findings
    return {(r.path.split("/", 4)[-1], int(r.row), r.column, r.check) for r in f.itertuples()}


@pytest.mark.parametrize("executor", ["inprocess", "processes"])
def test_s3_hf_save_to_disk_folders_recognised(
    executor: str, s3_server: str, tmp_path: Path
) -> None:
    root = f"hf-{executor}"
    files = {f"{root}/dataset_dict.json": json.dumps({"splits": ["train", "test"]}).encode()}
    for split, n_files in (("train", 2), ("test", 1)):
        for name, data in hf_split_files(split, files=n_files).items():
            files[f"{root}/{split}/{name}"] = data
    _put(files)
    report = datacheck.scan(f"s3://{BUCKET}/{root}", out=tmp_path / "o", executor=executor)
    entries = {f["path"].split("/", 4)[-1]: f for f in report.data["files"]}
    assert sorted(entries) == [
        "test/data-00000-of-00001.arrow",
        "train/data-00000-of-00002.arrow",
        "train/data-00001-of-00002.arrow",
    ]
    assert {f["format"] for f in entries.values()} == {"hf"}
    assert entries["test/data-00000-of-00001.arrow"]["columns"]["image"] == "Image"
    assert sorted(p.split("/", 3)[-1] for p in report.data["ignored"]) == [
        f"{root}/dataset_dict.json",
        f"{root}/test/dataset_info.json",
        f"{root}/test/state.json",
        f"{root}/train/dataset_info.json",
        f"{root}/train/state.json",
    ]
    assert _sites(report) == {
        ("train/data-00001-of-00002.arrow", 3, "image", "corrupt"),
        ("train/data-00001-of-00002.arrow", 5, "image", "corrupt"),
        ("train/data-00001-of-00002.arrow", 7, "x", "nan"),
    }
    f = report.findings
    assert "'missing.jpg' not found" in f[f["row"] == 5]["value"].iloc[0]


def test_s3_hf_rows_read_back(s3_server: str, tmp_path: Path) -> None:
    """The report reads a remote split's rows back through the storage, as for a local one
    (flagged_rows and the column plot: Format.tables on an s3:// path)."""
    root = "hf-readback"
    _put({f"{root}/{name}": data for name, data in hf_split_files("train").items()})
    datacheck.scan(f"s3://{BUCKET}/{root}", out=tmp_path / "o", executor="inprocess")
    report = datacheck.load_report(tmp_path / "o")
    rows = report.flagged_rows("data-00001-of-00002.arrow", context=1)
    assert list(rows.index) == [2, 3, 4, 5, 6, 7, 8]
    assert rows["label"].tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert rows["_flagged"].tolist() == [False, True, False, True, False, True, False]
    assert np.isnan(rows.loc[7, "x"]) and rows.loc[7, "_checks"] == "x: nan"
    assert rows.loc[5, "image"] == {"bytes": None, "path": "missing.jpg"}
    pytest.importorskip("matplotlib")
    fig = report.plot.column("x")
    assert fig.axes


@pytest.mark.parametrize("compression", [None, "zstd:7"])
def test_s3_mds_shards_read_and_hash_checked(
    compression: str | None, s3_server: str, tmp_path: Path
) -> None:
    folder = write_mds(tmp_path / "mds", compression=compression)
    (shard,) = folder.glob("shard.*")
    root = f"mds-{compression or 'raw'}".replace(":", "")
    _put({f"{root}/{p.name}": p.read_bytes() for p in folder.iterdir()})
    url = f"s3://{BUCKET}/{root}"
    report = datacheck.scan(url, out=tmp_path / "o", executor="inprocess")
    (entry,) = report.data["files"]
    assert entry["format"] == "mds" and entry["rows"] == 20 and entry["status"] == "flagged"
    assert report.data["ignored"] == [f"{url}/index.json"]
    assert _sites(report) == {(shard.name, 11, "score", "nan")}
    rows = report.flagged_rows(shard.name)  # read back through the storage
    assert list(rows.index) == [11] and rows.loc[11, "label"] == 11
    assert np.isnan(rows.loc[11, "score"]) and rows.loc[11, "image"][:2] == b"\xff\xd8"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    _put({f"{root}/{shard.name}": bytes(data)})
    (entry,) = datacheck.scan(url, out=tmp_path / "o2", executor="inprocess").data["files"]
    assert entry["status"] == "corrupt" and "sha1 of the" in entry["error"], entry
