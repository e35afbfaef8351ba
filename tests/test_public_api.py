"""The public facade: pinned names, and no heavy imports on the scan path."""

from __future__ import annotations

import subprocess
import sys

import pytest

import datacheck


def test_public_names_are_pinned() -> None:
    assert datacheck.__all__ == sorted(datacheck.__all__)
    assert set(datacheck.__all__) >= {
        "CHECKS",
        "DatacheckError",
        "InputError",
        "Report",
        "ScanConfig",
        "SchemaError",
        "Severity",
        "UsageError",
        "infer",
        "load_profile",
        "load_report",
        "load_schema",
        "scan",
    }


def test_check_names_are_stable() -> None:
    assert set(datacheck.CHECKS) == {
        "nan",
        "inf",
        "null",
        "null_column",
        "extreme",
        "out_of_range",
        "corrupt",
        "schema",
        "drift",
        "unnormalized",
        "constant",
        "truncated",
        "empty",
        "duplicate",
        "load_error",
    }


def test_parquet_scan_never_imports_torch_dask_or_pandas(tmp_path) -> None:
    from datacheck._demo import write_demo

    shard = write_demo(tmp_path / "d") / "train" / "shard-001.parquet"  # has findings
    code = (
        "import sys, datacheck\n"
        f"datacheck.scan({str(shard)!r}, out={str(tmp_path / 'o')!r})\n"
        "print(sorted(m for m in ('torch', 'dask', 'distributed', 'pandas', 'pandera', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "extra", [[], ["--max-bad-fraction", "nan=0.5"], ["--show", "50", "--fail-on", "warning"]]
)
def test_the_cli_scan_summary_never_imports_pandas(tmp_path, extra) -> None:
    """The summary after the scan (first findings per check, the tolerance) reads the
    manifest through buffers: ``pa.array``, ``to_numpy`` and ``pa.scalar`` import pandas,
    0.3 s of every ``datacheck scan`` that finds something."""
    from datacheck._demo import write_demo

    data = write_demo(tmp_path / "d") / "train"
    shards = [str(p) for p in sorted(data.glob("*.parquet"))[:3]]  # with findings
    code = (
        "import sys\nfrom datacheck.cli import main\n"
        f"main(['scan', *{shards!r}, '--out', {str(tmp_path / 'o')!r}, *{extra!r}])\n"
        "print(sorted(m for m in ('torch', 'dask', 'pandas', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "findings (first" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"
