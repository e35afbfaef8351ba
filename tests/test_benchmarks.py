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
