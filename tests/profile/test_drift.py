"""Column-level findings (``drift``, ``unnormalized``) and the z-score ``extreme`` bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck.checks._rules import Normalized
from datacheck.profile._drift import MIN_VALUES, column_findings, normalization_problem
from datacheck.profile._stats import ColumnProfile, load_profile

ROWS = 2000


def _shards(root: Path, n: int = 5, seed: int = 0, **edits: dict[str, np.ndarray]) -> Path:
    """``n`` Parquet shards of standard-normal ``x`` and ``y``; ``edits`` replace columns of a shard."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        cols: dict[str, object] = {"x": rng.standard_normal(ROWS), "y": rng.standard_normal(ROWS)}
        cols.update(edits.get(f"s{i}", {}))
        pq.write_table(pa.table(cols), root / f"s{i}.parquet")
    return root


def _schema(path: Path, x_checks: str = "", y_checks: str = "", y_nullable: str = "false") -> Path:
    ref = "{mean: 0.0, std: 1.0, options: {check_name: reference_stats}}"
    path.write_text(
        "columns:\n"
        f"  x:\n    dtype: float64\n    nullable: false\n    checks:\n    - {x_checks or ref}\n"
        f"  y:\n    dtype: float64\n    nullable: {y_nullable}\n    checks:\n    - {y_checks or ref}\n"
    )
    return path


def _column_findings(report: datacheck.Report) -> set[tuple[str, str, str]]:
    f = report.findings
    f = f[f.check.isin(["drift", "unnormalized"])]
    assert f.row.isna().all()
    return {(Path(p).stem, c, k) for p, c, k in zip(f.path, f.column, f.check, strict=True)}


def _scan(data: Path, schema: Path | None, tmp: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(data, schema and str(schema), out=tmp / "out", executor="inprocess", **kw)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"x": np.random.default_rng(9).standard_normal(ROWS) + 5}, "mean 5"),
        ({"x": np.random.default_rng(9).standard_normal(ROWS) * 10}, "off"),
        ({"x": np.random.default_rng(9).standard_normal(ROWS) * 0.1}, "off"),
        ({"x": np.full(ROWS, 0.25)}, "constant 0.25"),
        ({"x": pa.nulls(ROWS, pa.float64())}, "all null"),
    ],
    ids=["mean_shift", "std_up", "std_down", "constant", "all_null"],
)
def test_each_drift_kind_against_the_reference(tmp_path: Path, edit: dict, needle: str) -> None:
    data = _shards(tmp_path / "d", s2=edit)
    report = _scan(data, _schema(tmp_path / "s.yaml"), tmp_path)
    assert _column_findings(report) == {("s2", "x", "drift")}
    f = report.findings
    msg = f.loc[f.check == "drift", "value"].iloc[0]
    assert needle in msg
    assert f.loc[f.check == "drift", "severity"].iloc[0] == "error"
    assert report.exit_code() == 1
    entry = next(e for e in report.data["files"] if e["path"].endswith("s2.parquet"))
    assert entry["counts"]["drift"] == 1 and entry["status"] == "flagged"


def test_clean_shards_have_no_findings_and_profile_is_written(tmp_path: Path) -> None:
    report = _scan(_shards(tmp_path / "d"), _schema(tmp_path / "s.yaml"), tmp_path)
    assert report.summary["sites"] == {} and report.exit_code() == 0
    assert (report.dir / "profile.json").exists()  # moments even without --profile


def test_thresholds_in_the_schema_are_respected(tmp_path: Path) -> None:
    data = _shards(tmp_path / "d", s1={"x": np.random.default_rng(1).standard_normal(ROWS) * 10})
    loose = "{mean: 0.0, std: 1.0, max_std_ratio: 20, zscore_max: .inf, options: {check_name: reference_stats}}"
    report = _scan(data, _schema(tmp_path / "s.yaml", x_checks=loose), tmp_path)
    assert _column_findings(report) == set() and "extreme" not in report.summary["sites"]
    warn = "{mean: 0.0, std: 1.0, options: {check_name: reference_stats, raise_warning: true}}"
    report = _scan(data, _schema(tmp_path / "w.yaml", x_checks=warn), tmp_path)
    f = report.findings
    assert f.loc[f.check == "drift", "severity"].tolist() == ["warning"]


def test_unnormalized_column_each_shard(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    data = _shards(
        tmp_path / "d", n=3, **{f"s{i}": {"y": rng.normal(50, 20, ROWS)} for i in range(3)}
    )
    norm = "{options: {check_name: normalized}}"
    report = _scan(data, _schema(tmp_path / "s.yaml", x_checks=norm, y_checks=norm), tmp_path)
    assert _column_findings(report) == {(f"s{i}", "y", "unnormalized") for i in range(3)}
    msg = report.findings.value.iloc[0]
    assert "std from 0" in msg and "max 0.5" in msg


def test_normalized_targets_and_thresholds() -> None:
    assert normalization_problem(Normalized(), 0.1, 1.2) is None
    assert "mean" in normalization_problem(Normalized(), 0.6, 1.0)
    assert "x2.5" in normalization_problem(Normalized(), 0.0, 0.4)
    assert "constant" in normalization_problem(Normalized(), 0.0, 0.0)
    imagenet = Normalized(mean=0.45, std=0.22, max_mean_shift=0.5, max_std_ratio=2.0)
    assert normalization_problem(imagenet, 0.47, 0.25) is None


def test_zscore_extreme_value_level(tmp_path: Path) -> None:
    x = np.random.default_rng(3).standard_normal(ROWS).clip(-4, 4)
    x[[11, 500]] = [8.0, -7.5]  # z = 8 and 7.5 against mean 0 / std 1
    data = _shards(tmp_path / "d", n=1, s0={"x": x})
    report = _scan(data, _schema(tmp_path / "s.yaml"), tmp_path)
    f = report.findings
    hits = f[f.check == "extreme"]
    assert sorted(hits.row.tolist()) == [11, 500] and set(hits.severity) == {"warning"}
    z10 = "{mean: 0.0, std: 1.0, zscore_max: 10, options: {check_name: reference_stats}}"
    report = _scan(data, _schema(tmp_path / "z.yaml", x_checks=z10), tmp_path)
    assert "extreme" not in report.summary["sites"]


def test_consensus_drift_without_a_reference(tmp_path: Path) -> None:
    data = _shards(
        tmp_path / "d", n=6, s4={"y": np.random.default_rng(4).standard_normal(ROWS) * 1000}
    )
    report = _scan(data, None, tmp_path, profile=True)
    assert _column_findings(report) == {("s4", "y", "drift")}
    f = report.findings
    assert f.loc[f.check == "drift", "severity"].tolist() == ["warning"]
    assert "(the median of 6 shards)" in f.loc[f.check == "drift", "value"].iloc[0]
    plain = _scan(data, None, tmp_path)  # without --profile: no column checks
    assert _column_findings(plain) == set()


def test_all_null_shard_of_a_nullable_string_column(tmp_path: Path) -> None:
    edits = {f"s{i}": {"name": pa.array(["a"] * ROWS)} for i in range(4)}
    edits["s2"] = {"name": pa.nulls(ROWS, pa.string())}
    report = _scan(_shards(tmp_path / "d", n=4, **edits), None, tmp_path, profile=True)
    assert _column_findings(report) == {("s2", "name", "drift")}


def test_small_shards_skip_statistical_tests() -> None:
    tiny = ColumnProfile()
    tiny.add_values(np.array([5.0, 6.0, 9.0]))
    assert tiny.finite < MIN_VALUES
    schema = datacheck.load_schema(_schema_obj())
    assert column_findings({"a": {"x": tiny}}, schema) == []


def _schema_obj():  # type: ignore[no-untyped-def]
    import pandera.pandas as pa_

    datacheck.load_schema  # noqa: B018 - registers datacheck's checks
    from datacheck.checks._pandas import register_pandera_checks

    register_pandera_checks()
    return pa_.DataFrameSchema(
        {"x": pa_.Column(float, checks=[pa_.Check.reference_stats(mean=0.0, std=1.0)])}
    )


def test_bad_reference_stats_are_schema_errors(tmp_path: Path) -> None:
    bad = "{mean: 0.0, options: {check_name: reference_stats}}"
    with pytest.raises(datacheck.SchemaError, match="needs both mean and std"):
        datacheck.load_schema(_schema(tmp_path / "b.yaml", x_checks=bad))
    neg = "{mean: 0.0, std: 1.0, max_std_ratio: -1, options: {check_name: reference_stats}}"
    with pytest.raises(datacheck.SchemaError, match="max_std_ratio must be > 0"):
        datacheck.load_schema(_schema(tmp_path / "n.yaml", x_checks=neg))
    typo = "{mean: 0.0, options: {check_name: normalised}}"
    with pytest.raises(datacheck.SchemaError, match="did you mean 'normalized'"):
        datacheck.load_schema(_schema(tmp_path / "t.yaml", x_checks=typo))


def test_same_checks_validate_pandas_in_pandera(tmp_path: Path) -> None:
    import pandera.errors
    import pandera.pandas as pa_

    norm = "{options: {check_name: normalized}}"
    path = _schema(tmp_path / "s.yaml", y_checks=norm)
    datacheck.load_schema(path)  # registers the checks with pandera
    schema = pa_.DataFrameSchema.from_yaml(path.read_text())
    rng = np.random.default_rng(5)
    good = pd.DataFrame({"x": rng.standard_normal(500), "y": rng.standard_normal(500)})
    schema.validate(good)
    bad = good.assign(x=good.x.where(good.index != 3, 9.0), y=good.y * 30)
    with pytest.raises(pandera.errors.SchemaErrors) as info:
        schema.validate(bad, lazy=True)
    failed = set(info.value.failure_cases["check"].astype(str))
    assert any("reference_stats" in c for c in failed) and any("normalized" in c for c in failed)


def test_tensor_files_are_profiled_and_compared(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    for i in range(4):
        x = rng.standard_normal((500, 4)).astype(np.float32)
        np.save(tmp_path / f"t{i}.npy", x * (1000 if i == 2 else 1))
    report = datacheck.scan(tmp_path, out=tmp_path / "out", profile=True, executor="inprocess")
    assert _column_findings(report) == {("t2", "tensor", "drift")}
    stats = load_profile(report.dir)
    assert set(stats.rows) == {500} and set(stats["values"]) == {2000}


def test_outliers_cannot_fake_drift_and_a_drifted_shard_is_one_finding(tmp_path: Path) -> None:
    """A few 1e6 values in a shard are row findings, not a moved mean; a shard scaled x1e6 is
    one drift finding, its per-value z-score warnings folded into it."""
    rng = np.random.default_rng(5)
    outliers = rng.standard_normal(ROWS)
    outliers[[3, 700, 1999]] = [1e6, -2e6, 3e6]  # moves the plain mean by 1000 std
    scaled = rng.standard_normal(ROWS) * 1e6
    data = _shards(tmp_path / "d", s1={"x": outliers}, s3={"x": scaled})
    norm = "{options: {check_name: normalized}}"
    ref = "{mean: 0.0, std: 1.0, options: {check_name: reference_stats}}"
    schema = _schema(tmp_path / "s.yaml", x_checks=f"{ref}\n    - {norm}")
    report = _scan(data, schema, tmp_path)
    assert _column_findings(report) == {("s3", "x", "drift"), ("s3", "x", "unnormalized")}
    f = report.findings
    f["shard"] = [Path(p).stem for p in f.path]
    rows = f[f.row.notna()]
    assert set(zip(rows.shard, rows.row.astype(int), rows.check, strict=True)) == {
        ("s1", 3, "extreme"),
        ("s1", 700, "extreme"),
        ("s1", 1999, "extreme"),
    }
    (drift,) = f[f.check == "drift"].itertuples()
    assert drift.value.startswith("2,000 of 2,000 values (100%) beyond the bounds [-6, 6]")
    # report.json agrees with the manifest: the folded warnings are counted nowhere.
    entry = next(e for e in report.data["files"] if e["path"].endswith("s3.parquet"))
    assert "extreme" not in entry["counts"] and "extreme" not in entry["sites"]
    assert report.summary["sites"]["extreme"] == {"warning": 3}
    # profile.json says what was compared.
    import json

    files = json.loads((tmp_path / "out" / "profile.json").read_text())["files"]
    bounds = files[str(data / "s1.parquet")]["x"]["bounds"]
    assert bounds["outside"] == 3 and bounds["lo"] == -6.0
    assert abs(bounds["mean"]) < 0.1 and bounds["std"] == pytest.approx(1.0, abs=0.1)


def test_profile_moments_within_bounds_merge_exactly() -> None:
    x = np.random.default_rng(1).standard_normal(10_000)
    x[::997] = 1e9
    whole = ColumnProfile(lo=-6.0, hi=6.0)
    whole.add_values(x)
    parts = [ColumnProfile(lo=-6.0, hi=6.0) for _ in range(3)]
    for p, piece in zip(parts, np.array_split(x, 3), strict=True):
        p.add_values(piece)
    merged = parts[0].merge(parts[1]).merge(parts[2])
    inside = x[np.abs(x) <= 6]
    for p in (whole, merged):
        n, mean, std = p.moments()
        assert n == inside.size and p.outside == x.size - inside.size
        assert mean == pytest.approx(inside.mean()) and std == pytest.approx(inside.std())
        assert p.mean > 1e5  # the plain moments still see everything
