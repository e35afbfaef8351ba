"""A Parquet scan never imports pandas (half a second per worker), nulls included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CODE = """
import sys
import datacheck
report = datacheck.scan(sys.argv[1], out=sys.argv[2], executor="inprocess", isolate=False)
assert report.summary["values"] == {"nan": 1, "null": 3}, report.summary["values"]
print("pandas" in sys.modules)
"""


def test_a_parquet_scan_with_nulls_does_not_import_pandas(tmp_path: Path) -> None:
    table = pa.table(
        {
            "x": pa.array([1.0, None, float("nan")]),
            "i": pa.array([1, None, 3]),
            "v": pa.array([[1.0], None, [2.0]]),
        }
    )
    pq.write_table(table, tmp_path / "a.parquet")
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "a.parquet"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
