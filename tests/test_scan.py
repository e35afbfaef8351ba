"""End to end through the Python API: the demo's planted faults, executors, shards, inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck._demo import PLANTED
from datacheck.errors import InputError, UsageError


def _found(report, root: Path) -> set[tuple]:
    out = set()
    for r in report.findings.itertuples():
        row = None if pd.isna(r.row) else int(r.row)
        column = None if pd.isna(r.column) else r.column
        out.add((str(Path(r.path).relative_to(root)), row, column, r.check))
    return out


def test_demo_planted_faults_are_all_found_and_nothing_else(demo_dir: Path, tmp_path: Path) -> None:
    report = datacheck.scan(demo_dir, schema=demo_dir / "schema.yaml", out=tmp_path / "o")
    assert _found(report, demo_dir) == set(PLANTED)
    assert report.exit_code() == 1 and not report.ok
    status = {Path(f["path"]).name: f["status"] for f in report.data["files"]}
    assert status == {
        "shard-000.parquet": "ok",
        "shard-001.parquet": "flagged",
        "shard-002.parquet": "flagged",
        "shard-003.csv": "flagged",
        "shard-004.parquet": "corrupt",
    }


def test_demo_without_schema_uses_defaults(demo_dir: Path, tmp_path: Path) -> None:
    report = datacheck.scan(demo_dir, out=tmp_path / "o")
    f = report.findings
    # without a schema: the 1.5e6 and 3e5 values are fp16-overflow warnings; the null in a
    # numeric column an error (a loader turns it into NaN), told apart from the NaN
    by = lambda sev: set(zip(f[f.severity == sev].column, f[f.severity == sev].check, strict=True))  # noqa: E731
    assert by("warning") == {("x0", "extreme"), ("embedding", "extreme")}
    assert ("x3", "null") in by("error") and ("x1", "nan") in by("error")
    nulls = f[f.check == "null"]
    assert list(nulls.row) == [5] and nulls.value.isna().all()
    assert not report.ok and report.exit_code("never") == 0
    # the escape: --null-severity warning
    relaxed = datacheck.scan(demo_dir, out=tmp_path / "w", null_severity="warning").findings
    assert set(relaxed.loc[relaxed.check == "null", "severity"]) == {"warning"}
    with pytest.raises(datacheck.UsageError, match="null_severity 'off' is not one of"):
        datacheck.scan(demo_dir, out=tmp_path / "x", null_severity="off")


@pytest.mark.parametrize("executor", ["inprocess", "processes"])
def test_executors_give_identical_results(demo_dir: Path, tmp_path: Path, executor: str) -> None:
    base = datacheck.scan(
        demo_dir, schema=str(demo_dir / "schema.yaml"), out=tmp_path / "a", executor="inprocess"
    )
    other = datacheck.scan(
        demo_dir,
        schema=str(demo_dir / "schema.yaml"),
        out=tmp_path / "b",
        executor=executor,
        workers=2,
    )
    assert other.findings.equals(base.findings)
    strip = lambda d: [{k: v for k, v in f.items()} for f in d["files"]]  # noqa: E731
    assert strip(other.data) == strip(base.data)


def test_large_file_split_into_row_group_units_keeps_exact_rows(tmp_path: Path) -> None:
    n = 400_000
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    bad = [5, 131_071, 131_072, 399_999]
    x[bad] = np.nan
    p = tmp_path / "big.parquet"
    pq.write_table(
        pa.table({"x": x, "y": np.arange(n, dtype=np.float64)}),
        p,
        row_group_size=65_536,
        compression="none",
    )
    report = datacheck.scan(
        p, out=tmp_path / "o", unit_bytes=1 << 20, executor="processes", workers=2
    )
    (entry,) = report.data["files"]
    assert entry["rows"] == n
    f = report.findings
    assert sorted(f.loc[f.check == "nan", "row"].tolist()) == bad
    assert f.loc[f.check == "extreme", "row"].tolist()  # y > 65504 is an fp16 warning


def test_shard_dtype_drift_is_a_schema_finding(tmp_path: Path) -> None:
    d = tmp_path / "ds"
    d.mkdir()
    for i in range(3):
        x = pa.array([1.0 + i, 2.0], pa.float32())  # shards with values of their own
        pq.write_table(pa.table({"x": x}), d / f"s{i}.parquet")
    pq.write_table(pa.table({"x": pa.array([1.0, 2.0], pa.float64())}), d / "s3.parquet")
    report = datacheck.scan(d, out=tmp_path / "o")
    f = report.findings
    assert f[["path", "column", "check"]].values.tolist() == [
        [str(d / "s3.parquet"), "x", "schema"]
    ]
    assert "other shards have float" in f.value.iloc[0]


def test_ten_percent_nan_manifest_stays_compact(tmp_path: Path) -> None:
    n = 500_000
    x = np.ones(n, dtype=np.float32)
    x[::10] = np.nan
    p = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"x": x}), p)
    report = datacheck.scan(p, out=tmp_path / "o")
    assert report.summary["values"]["nan"] == n // 10
    manifest = report.manifest_path
    assert pq.read_metadata(manifest).num_rows == n // 10
    assert manifest.stat().st_size < 2_000_000  # dictionary + zstd: a few bytes a row


def test_inputs_mix_files_dirs_globs_each_file_once(demo_dir: Path, tmp_path: Path) -> None:
    train = demo_dir / "train"
    report = datacheck.scan(
        [str(train / "shard-000.parquet"), str(train), str(train / "*.csv")], out=tmp_path / "o"
    )
    paths = [f["path"] for f in report.data["files"]]
    assert len(paths) == len(set(paths)) == 5
    assert str(demo_dir / "schema.yaml") not in paths


def test_non_data_files_in_directories_are_listed_as_ignored(
    demo_dir: Path, tmp_path: Path
) -> None:
    report = datacheck.scan(demo_dir, out=tmp_path / "o")
    assert report.data["ignored"] == [str(demo_dir / "schema.yaml")]
    assert report.data["ignored_why"] == {
        str(
            demo_dir / "schema.yaml"
        ): "not a data file: no reader recognises its name or first bytes"
    }


def test_report_json_is_the_report_with_a_line_per_file(demo_dir: Path, tmp_path: Path) -> None:
    """Written with json's C encoder a file entry at a time (the indenting one is pure Python):
    the same document, and a line per file and per ignored path, to read or grep."""
    report = datacheck.scan(demo_dir, out=tmp_path / "o")
    text = (tmp_path / "o" / "report.json").read_text()
    assert json.loads(text) == json.loads(json.dumps(report.data, default=str))
    lines = text.splitlines()
    for entry in [*report.data["files"], *report.data["ignored"]]:
        (line,) = [ln for ln in lines if ln.strip().rstrip(",") == json.dumps(entry)]
        assert json.loads(line.strip().rstrip(",")) == entry
    assert '\n "summary": {\n  "files": 5,' in text  # the rest indented as before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"paths": "/no/such/dir"}, InputError),
        ({"paths": "/tmp/*.no-such-ext-xyz"}, InputError),
        ({"paths": ".", "fail_on": "sometimes"}, UsageError),
        ({"paths": ".", "workers": 0}, UsageError),
        ({"paths": ".", "executor": "threads"}, UsageError),
    ],
)
def test_bad_arguments_raise_one_error_tree(kwargs: dict, error: type) -> None:
    with pytest.raises(error):
        datacheck.scan(**kwargs)


def test_scan_without_out_keeps_a_temporary_report(demo_dir: Path) -> None:
    report = datacheck.scan(demo_dir / "train" / "shard-001.parquet")
    assert report.manifest_path.exists()
    assert len(report.findings) == 3
    again = datacheck.load_report(report.dir)
    assert again.summary == report.summary


def test_shard_dtypes_that_are_not_drift(tmp_path: Path) -> None:
    """Inferred int vs float in text shards, an all-null column, string vs large_string."""
    d = tmp_path / "csv"
    d.mkdir()
    (d / "s1.csv").write_text("x,note\n1,a\n2,b\n")
    (d / "s2.csv").write_text("x,note\n1.5,\n2.5,\n")
    (d / "s3.csv").write_text("x,note\n3.5,c\n4.5,d\n")
    p = tmp_path / "pq"
    p.mkdir()
    pq.write_table(pa.table({"s": pa.array(["a"], pa.string())}), p / "a.parquet")
    pq.write_table(pa.table({"s": pa.array(["b"], pa.large_string())}), p / "b.parquet")
    pq.write_table(pa.table({"s": pa.array([None], pa.null())}), p / "c.parquet")
    report = datacheck.scan([str(d), str(p)], out=tmp_path / "o")
    assert report.summary["sites"] == {}
