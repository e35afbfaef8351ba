"""File-level findings a careful reviewer asks for: a 0-row file (``empty``), byte-identical
files (``duplicate``, with their content hash), and ``--max-bad-fraction`` names checked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import datacheck as dc


def _frame(seed: int, rows: int = 500) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.standard_normal(rows), "y": rng.integers(0, 5, rows)})


def test_a_header_only_csv_and_an_empty_parquet_are_empty_warnings(tmp_path: Path) -> None:
    _frame(0).iloc[:0].to_csv(tmp_path / "h.csv", index=False)  # pandas writes the header
    _frame(0).iloc[:0].to_parquet(tmp_path / "e.parquet")
    _frame(0).to_parquet(tmp_path / "full.parquet")
    report = dc.scan(tmp_path, out=tmp_path / "o", executor="inprocess")
    f = report.findings
    empty = f[f.check == "empty"]
    assert sorted(Path(p).name for p in empty.path) == ["e.parquet", "h.csv"]
    assert set(empty.severity) == {"warning"} and empty.row.isna().all()
    assert empty.value.iloc[0] == "0 rows: a header or a schema only"
    assert report.exit_code() == 0 and report.exit_code("warning") == 1


def test_byte_identical_shards_are_duplicates_with_their_hash(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        _frame(i).to_parquet(d / f"part-{i}.parquet")
    shutil.copyfile(d / "part-1.parquet", d / "part-3.parquet")  # a copy job run twice
    # Same size, other bytes: a shard rewritten with one value changed.
    other = _frame(1)
    other.loc[250, "x"] += 1.0
    other.to_parquet(d / "part-4.parquet")
    report = dc.scan(d, out=tmp_path / "o", executor="inprocess")
    f = report.findings
    (dup,) = f[f.check == "duplicate"].itertuples()
    assert Path(dup.path).name == "part-3.parquet" and dup.severity == "warning"
    assert dup.value.startswith(f"byte-identical to {str(d / 'part-1.parquet')!r} (blake2b ")
    hashes = {Path(e["path"]).name: e.get("blake2b") for e in report.data["files"]}
    assert hashes["part-1.parquet"] == hashes["part-3.parquet"] is not None
    import hashlib

    assert (
        hashes["part-1.parquet"]
        == hashlib.blake2b((d / "part-1.parquet").read_bytes(), digest_size=16).hexdigest()
    )
    assert hashes["part-0.parquet"] is None  # a size no other file has: never read again


def test_max_bad_fraction_names_are_checked(tmp_path: Path) -> None:
    _frame(0).to_parquet(tmp_path / "a.parquet")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "datacheck",
            "scan",
            str(tmp_path / "a.parquet"),
            "--out",
            str(tmp_path / "o"),
            "--max-bad-fraction",
            "inff=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "no check is named 'inff' (did you mean 'inf'?)" in line
    with pytest.raises(dc.UsageError, match="did you mean 'null'"):
        dc.scan(tmp_path / "a.parquet", out=tmp_path / "o", max_bad_fraction={"nul": 0.1})
    # A check the schema declares under its own name is a name.
    schema = tmp_path / "s.yaml"
    schema.write_text(
        "schema_type: dataframe\ncolumns:\n  x: {dtype: float64}\n"
        "  y:\n    dtype: int64\n    checks:\n"
        "    - {value: [0, 1, 2, 3, 4], options: {check_name: isin}}\n"
    )
    ok = dc.scan(
        tmp_path / "a.parquet", schema, out=tmp_path / "o2", max_bad_fraction={"isin": 0.1}
    )
    assert ok.exit_code() == 0
