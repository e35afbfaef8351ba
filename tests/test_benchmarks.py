"""The benchmark harness runs end to end on a tiny dataset (numbers are not asserted: a timed
unit test proves nothing; the point is that the benchmarks cannot rot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow
def test_scan_benchmark_smoke_run_writes_results_and_a_table(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--rows", "3000", "--shards", "2", "--repeat", "1", "--data", str(tmp_path / "d")]
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_scan.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "scan.json").read_text())
    assert set(doc["results"]) >= {"floor", "datacheck", "pandas", "pandera", "nan10_ratio"}
    assert doc["params"]["rows"] == 3000 and doc["machine"]["cpus"] >= 1
    assert doc["table"]["rows"][0][0] == "floor"
    r = subprocess.run(
        [sys.executable, str(BENCH / "tables.py"), "scan"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0 and "| datacheck |" in r.stdout, r.stderr


@pytest.mark.slow
def test_text_benchmark_smoke_run_writes_results(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--rows", "2000", "--repeat", "1", "--data", str(tmp_path / "d")]
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_text.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "text.json").read_text())
    assert {"csv_x_floor", "jsonl_x_floor"} <= set(doc["results"])
    assert doc["results"]["datacheck-csv"]["rows"] == 2000
    assert doc["results"]["datacheck-jsonl"]["rows"] == 2000


def _gpu_check(tmp_path: Path, *args: str, hide_gpus: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(
        [sys.executable, str(BENCH / "gpu_check.py"), *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )


def test_gpu_check_without_a_gpu_says_so_and_exits_0(tmp_path: Path) -> None:
    r = _gpu_check(tmp_path, hide_gpus=True)
    assert r.returncode == 0, r.stderr
    assert (
        r.stdout.strip()
        == "gpu_check: no CUDA device here; nothing measured. Run it on a machine with a GPU."
    )
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_gpu_check_steps_run_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    r = _gpu_check(tmp_path, "--device", "cpu", "--quick", hide_gpus=True)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "results" / "gpu-check-cpu.json").read_text())
    rows = {row[0]: row[1:] for row in doc["table"]["rows"]}
    assert rows["CUDA tests (pytest -m gpu)"][1] == "ok"
    assert isinstance(rows["loader check, ms per batch"][0], float)
    assert isinstance(rows["loader guarded/bare (stored)"][0], float)
    assert isinstance(rows["guard overhead %"][0], float)
    assert rows["loader host syncs per batch (eager)"] == ["n/a", "not counted on CPU"]
    assert "| CUDA tests (pytest -m gpu) |" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args, name",
    [
        ("bench_images.py", ["--images", "40", "--workers", "1", "--rounds", "1"], "images"),
        ("bench_tokens.py", ["--tokens", "200000", "--rounds", "1"], "tokens"),
    ],
)
def test_media_benchmarks_smoke_run(
    script: str, args: list[str], name: str, tmp_path: Path
) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / f"{name}.json").read_text())
    assert doc["table"]["rows"] and "floor" in doc["results"]


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["megatron", "nanogpt"])
def test_logs_benchmark_smoke_run_against_the_floor(tmp_path: Path, shape: str) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--mb", "1", "--rounds", "1", "--shape", shape, "--no-long-tokens", "--name", "t"]
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_logs.py"), *args, "--tmp", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "t.json").read_text())
    rows = doc["table"]["rows"]
    assert [row[1] for row in rows] == ["floor: bytes", "floor: lines", "datacheck logs"]
    assert rows[-1][-1] == "nan" and all(row[7] > 0 for row in rows)  # peak RSS measured
    assert [p.name for p in tmp_path.iterdir()] == ["results"]  # the generated log is gone


@pytest.mark.slow
def test_bounded_benchmark_smoke_run_writes_every_case(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--huge-log2", "14", "--rows", "2000", "--npz-mib", "4", "--peer-rows", "2000"]
    r = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_bounded.py"),
            *args,
            "--rounds",
            "1",
            "--data",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "bounded.json").read_text())
    assert set(doc["results"]) == {"huge", "dirty", "npz", "peers"}
    assert doc["results"]["huge"]["scan"]["rc"] == 1  # NaN found
    assert doc["results"]["peers"]["polars"]["rc"] == 0
    assert all(row[3] > 0 for row in doc["table"]["rows"])  # a tree peak for every case


@pytest.mark.slow
def test_ddp_loader_benchmark_smoke_run_writes_results(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--batch", "8", "--batches", "2", "--repeats", "1"]
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_loader_ddp.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "loader-ddp-cpu.json").read_text())
    assert doc["results"]["ranks"] == 2 and doc["results"]["ratio"] > 0
    assert len(doc["results"]["guarded_ms_all"]) == 1


@pytest.mark.slow
def test_producers_benchmark_smoke_run(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_producers.py"), "--samples", "300", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "results" / "producers.json").read_text())
    assert set(doc["results"]) == {"mds", "litdata", "wds"}
    assert all(fam["scan"]["samples"] == 300 for fam in doc["results"].values())


@pytest.mark.slow
def test_streams_benchmark_smoke_run_every_stack(tmp_path: Path) -> None:
    env = {**os.environ, "DATACHECK_BENCH_RESULTS": str(tmp_path / "results")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH.parent), env.get("PYTHONPATH", "")])
    args = ["--payloads", "tokens", "--batches", "2", "--epochs", "1", "--rounds", "1"]
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_streams.py"), *args, "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "results" / "streams.json").read_text())
    stacks = [row[0] for row in doc["table"]["rows"]]
    assert stacks == ["generic", "webdataset", "hf", "mosaic", "litdata", "nodes"]
    assert all(row[4] > 0 for row in doc["table"]["rows"])
