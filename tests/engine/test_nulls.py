"""Nulls as the tensor sees them: without a schema, a null in a numeric column is an error (a
loader turns it into NaN), a column all or mostly null is a ``null_column`` finding of its own,
and NaN stays told apart from null.  The files are written by pandas, the real producer of the
bad join (``merge(how="left")`` that matched nothing), and by Hugging Face ``datasets``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck as dc


def _bad_join(rows: int = 200, matched: int = 0) -> pd.DataFrame:
    """Features left-joined on a key of which only ``matched`` rows find a partner."""
    rng = np.random.default_rng(0)
    left = pd.DataFrame({"k": np.arange(rows), "x": rng.standard_normal(rows)})
    right = pd.DataFrame({"k": np.arange(matched), "y": rng.standard_normal(matched)})
    return left.merge(right, on="k", how="left")


def _write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_a_bad_join_fails_the_gate_by_default(tmp_path: Path, suffix: str) -> None:
    path = _write(_bad_join(), tmp_path / f"j{suffix}")
    r = _cli("scan", str(path), "--out", str(tmp_path / "o"))
    assert r.returncode == 1, r.stdout + r.stderr
    report = dc.load_report(tmp_path / "o")
    f = report.findings
    nulls = f[f.check == "null"]
    if suffix == ".parquet":  # a double column holding nulls: each row is a finding
        assert set(nulls.column) == {"y"} and sorted(nulls.row) == list(range(200))
        assert set(nulls.severity) == {"error"}
    else:  # an empty text column has no type: judged as a column (text elsewhere: not)
        assert nulls.empty
    (col,) = f[f.check == "null_column"].itertuples()
    assert (col.column, col.severity) == ("y", "error") and pd.isna(col.row)
    assert col.value.startswith("200 of 200 rows null (100%): all null")
    assert "null_column" in r.stdout and "200 of 200 rows null" in r.stdout
    assert "nan" not in set(f.check)  # a null is not a NaN
    # The documented escape: warnings, exit 0, the same findings.
    r = _cli("scan", str(path), "--out", str(tmp_path / "w"), "--null-severity", "warning")
    assert r.returncode == 0, r.stdout + r.stderr
    relaxed = dc.load_report(tmp_path / "w").findings
    assert len(relaxed) == len(f) and set(relaxed.severity) == {"warning"}


def test_a_hugging_face_dataset_from_pandas_holds_the_same_nulls(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_pandas(_bad_join(matched=50), preserve_index=False)
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    report = dc.scan(tmp_path / "hf.parquet", out=tmp_path / "o", executor="inprocess")
    f = report.findings
    assert sorted(f.loc[f.check == "null", "row"]) == list(range(50, 200))
    (col,) = f[f.check == "null_column"].itertuples()
    assert col.value.startswith("150 of 200 rows null (75%): mostly null")
    assert report.exit_code() == 1


def test_an_empty_text_column_beside_typed_shards_is_not_a_bad_join(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for i, note in enumerate(["a", None, "c"]):
        frame = pd.DataFrame({"x": np.arange(40.0) + i, "note": [note] * 40})
        frame.to_csv(tmp_path / "d" / f"s{i}.csv", index=False)
    report = dc.scan(tmp_path / "d", out=tmp_path / "o", executor="inprocess")
    assert report.exit_code() == 0 and report.summary["sites"] == {}
    # The same empty column where the other shards hold numbers: the join failed there.
    for i in (0, 2):
        frame = pd.DataFrame({"x": np.arange(40.0) + i, "note": np.arange(40.0)})
        frame.to_csv(tmp_path / "d" / f"s{i}.csv", index=False)
    report = dc.scan(tmp_path / "d", out=tmp_path / "o2", executor="inprocess")
    f = report.findings
    assert [(p.rsplit("/", 1)[-1], c) for p, c in zip(f.path, f.check, strict=True)] == [
        ("s1.csv", "null_column")
    ]


def test_a_few_nulls_are_row_findings_only(tmp_path: Path) -> None:
    frame = _bad_join(matched=190)  # 10 of 200 rows unmatched: below "mostly"
    report = dc.scan(_write(frame, tmp_path / "j.parquet"), out=tmp_path / "o")
    f = report.findings
    assert sorted(f.loc[f.check == "null", "row"]) == list(range(190, 200))
    assert "null_column" not in set(f.check)


def test_nan_and_null_stay_apart(tmp_path: Path) -> None:
    # Arrow keeps a NaN a NaN when told so (pandas' to_parquet would make it a null).
    x = pa.array([1.0, float("nan"), None, 4.0], pa.float64())
    pq.write_table(pa.table({"x": x}), tmp_path / "t.parquet")
    f = dc.scan(tmp_path / "t.parquet", out=tmp_path / "o").findings
    got = {(int(r.row), r.check, r.value) for r in f.itertuples() if not pd.isna(r.row)}
    assert got == {(1, "nan", "nan"), (2, "null", pd.NA)}
    assert str(f["value"].dtype) == "string"  # a missing value is <NA>, not a float NaN


def test_a_nullable_schema_column_allows_nulls(tmp_path: Path) -> None:
    path = _write(_bad_join(), tmp_path / "j.parquet")
    schema = tmp_path / "s.yaml"
    schema.write_text(
        "schema_type: dataframe\ncolumns:\n"
        "  k: {dtype: int64}\n  x: {dtype: float64}\n  y: {dtype: float64, nullable: true}\n"
    )
    report = dc.scan(path, schema, out=tmp_path / "o", executor="inprocess")
    assert report.exit_code() == 0 and len(report.findings) == 0
    schema.write_text(schema.read_text().replace("nullable: true", "nullable: false"))
    strict = dc.scan(path, schema, out=tmp_path / "s", executor="inprocess").findings
    assert {"null", "null_column"} <= set(strict.check)
