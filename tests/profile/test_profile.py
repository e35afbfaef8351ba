"""Streaming statistics and the quantile sketch, against NumPy on the same data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import datacheck
from datacheck.checks._columns import flatten
from datacheck.profile._stats import (
    QUANTILES,
    RELATIVE_ERROR,
    ColumnProfile,
    LogSketch,
    load_profile,
    merge_profiles,
)


def _profile(chunks: list[np.ndarray], sketch: bool = True) -> ColumnProfile:
    p = ColumnProfile(sketch=LogSketch() if sketch else None)
    for c in chunks:
        p.add_values(c)
    return p


def _assert_moments(p: ColumnProfile, x: np.ndarray) -> None:
    fin = x[np.isfinite(x)] if x.dtype.kind == "f" else x
    assert p.finite == fin.size
    assert p.min == fin.min() and p.max == fin.max()
    assert p.mean == pytest.approx(fin.astype(np.float64).mean(), rel=1e-12, abs=1e-12)
    assert p.std == pytest.approx(fin.astype(np.float64).std(), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "int32", "uint8"])
def test_moments_match_numpy_over_chunks(dtype: str) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(10_001) * 40 + 7).astype(dtype)
    p = _profile(np.array_split(x, 7))
    assert (p.values, p.nulls, p.nan, p.inf) == (x.size, 0, 0, 0)
    _assert_moments(p, x)


def test_nan_inf_and_nulls_are_counted_and_left_out() -> None:
    x = np.array([1.0, np.nan, 3.0, np.inf, -np.inf, 5.0, np.nan, 7.0])
    valid = np.array([True, True, True, True, True, False, True, True])
    p = ColumnProfile()
    p.add_values(x, valid)
    assert (p.values, p.nulls, p.nan, p.inf, p.finite) == (7, 1, 2, 2, 3)
    assert (p.min, p.max, p.mean) == (1.0, 7.0, pytest.approx(11 / 3))
    assert p.std == pytest.approx(np.std([1.0, 3.0, 7.0]))


def test_large_mean_small_std_does_not_cancel() -> None:
    rng = np.random.default_rng(1)
    x = 1e9 + rng.standard_normal(50_000) * 1e-3
    p = _profile(np.array_split(x, 5), sketch=False)
    assert p.std == pytest.approx(x.std(), rel=1e-6)
    assert _profile([np.full(100, 3.25)]).std == 0.0


def test_list_column_profiles_elements_and_counts_null_rows() -> None:
    arr = pa.array([[1.0, 2.0], None, [None, 3.0], [np.nan, 4.0]], pa.list_(pa.float64()))
    p = ColumnProfile()
    p.observe(arr, flatten(arr))
    assert (p.rows, p.nulls, p.values, p.nan, p.finite) == (4, 2, 5, 1, 4)
    assert p.mean == pytest.approx(2.5)
    strings = pa.array(["a", None, "b"])
    s = ColumnProfile()
    s.observe(strings)
    assert (s.rows, s.nulls, s.values, s.numeric) == (3, 1, 2, False)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.integers(1, 400),
        elements=st.floats(-1e12, 1e12, allow_nan=False, allow_subnormal=False),
    ),
    st.lists(st.integers(0, 400), max_size=5),
)
def test_merge_equals_one_pass(x: np.ndarray, cuts: list[int]) -> None:
    parts = np.split(x, sorted(set(c for c in cuts if c < x.size)))
    merged = merge_profiles([{"c": _profile([part])} for part in parts])["c"]
    whole = _profile([x])
    assert (merged.finite, merged.min, merged.max) == (whole.finite, whole.min, whole.max)
    scale = max(1.0, float(np.abs(x).max()))
    assert merged.mean == pytest.approx(whole.mean, rel=1e-9, abs=1e-12 * scale)
    assert merged.std == pytest.approx(x.std(), rel=1e-6, abs=1e-9 * scale)
    assert np.array_equal(merged.sketch.keys, whole.sketch.keys)  # sketches merge exactly
    assert np.array_equal(merged.sketch.counts, whole.sketch.counts)


def _assert_quantiles(x: np.ndarray, sketch: LogSketch, qs: np.ndarray) -> None:
    exact = np.quantile(x, qs, method="lower")
    est = sketch.quantiles(qs)
    assert np.all(np.abs(est - exact) <= RELATIVE_ERROR * np.abs(exact)), (est, exact)


@pytest.mark.parametrize("kind", ["normal", "lognormal", "mixed_sign_scales", "integers"])
def test_sketch_quantiles_within_stated_error(kind: str) -> None:
    rng = np.random.default_rng(2)
    x = {
        "normal": rng.standard_normal(100_000),
        "lognormal": rng.lognormal(0, 4, 100_000),
        "mixed_sign_scales": rng.standard_normal(100_000) * 10.0 ** rng.integers(-8, 8, 100_000),
        "integers": rng.integers(-1000, 1000, 100_000).astype(np.float64),
    }[kind]
    qs = np.array([0.0, 0.001, *QUANTILES, 0.999, 1.0])
    _assert_quantiles(x, LogSketch.of(x), qs)


@settings(max_examples=80, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.integers(1, 300),
        elements=st.floats(-1e300, 1e300, allow_nan=False, allow_subnormal=False),
    ),
    st.floats(0, 1),
)
def test_sketch_quantile_property(x: np.ndarray, q: float) -> None:
    _assert_quantiles(x, LogSketch.of(x), np.array([q]))


def test_sketch_merge_is_exact_and_order_free() -> None:
    rng = np.random.default_rng(3)
    parts = [rng.standard_normal(n) * s for n, s in ((1000, 1), (10, 1e6), (5000, 1e-3))]
    whole = LogSketch.of(np.concatenate(parts))
    a = LogSketch.of(parts[0]).merge(LogSketch.of(parts[1])).merge(LogSketch.of(parts[2]))
    b = LogSketch.of(parts[2]).merge(LogSketch.of(parts[0]).merge(LogSketch.of(parts[1])))
    for s in (a, b):
        assert np.array_equal(s.keys, whole.keys) and np.array_equal(s.counts, whole.counts)
    assert whole.n == sum(p.size for p in parts)
    assert np.isnan(LogSketch().quantiles([0.5])).all()


def test_state_round_trips_through_json() -> None:
    x = np.random.default_rng(4).standard_normal(1000)
    p = _profile([x])
    back = ColumnProfile.from_state(json.loads(json.dumps(p.state())))
    assert back.to_dict() == p.to_dict()
    assert np.array_equal(back.sketch.keys, p.sketch.keys)
    empty = ColumnProfile.from_state(json.loads(json.dumps(ColumnProfile().state())))
    assert empty.finite == 0 and math.isinf(empty.min)


def test_scan_writes_profile_json_matching_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = {}
    for i in range(3):
        x = rng.standard_normal(4000) * (i + 1)
        x[7] = np.nan
        data[f"s{i}.parquet"] = x
        table = pa.table({"x": x, "k": rng.integers(0, 5, 4000), "s": ["a"] * 4000})
        pq.write_table(table, tmp_path / f"s{i}.parquet", row_group_size=1000)
    report = datacheck.scan(tmp_path, out=tmp_path / "out", profile=True, workers=2)
    doc = json.loads((report.dir / "profile.json").read_text())
    assert doc["sketch"]["relative_error"] == RELATIVE_ERROR
    for name, x in data.items():
        path = next(p for p in doc["files"] if p.endswith(name))
        st_ = doc["files"][path]["x"]
        fin = x[np.isfinite(x)]
        assert (st_["rows"], st_["nan"], st_["finite"]) == (4000, 1, 3999)
        assert st_["mean"] == pytest.approx(fin.mean()) and st_["std"] == pytest.approx(fin.std())
        exact = np.quantile(fin, 0.5, method="lower")
        assert abs(st_["quantiles"]["p50"] - exact) <= RELATIVE_ERROR * abs(exact)
    allx = np.concatenate([x[np.isfinite(x)] for x in data.values()])
    assert doc["columns"]["x"]["std"] == pytest.approx(allx.std())
    assert doc["columns"]["s"]["values"] == 12000 and "mean" not in doc["columns"]["s"]
    frame = load_profile(report.dir)
    assert set(frame.column) == {"x", "k", "s"} and len(frame) == 9 and "p99" in frame


def test_split_file_profiles_like_one_pass(tmp_path: Path) -> None:
    """A file split into row-group units merges to the same profile as one unit."""
    x = np.random.default_rng(6).standard_normal(600_000)
    pq.write_table(
        pa.table({"x": x}), tmp_path / "big.parquet", row_group_size=50_000, compression="none"
    )
    split = datacheck.scan(
        tmp_path / "big.parquet",
        out=tmp_path / "a",
        profile=True,
        unit_bytes=1 << 20,
        executor="inprocess",
    )
    whole = datacheck.scan(
        tmp_path / "big.parquet", out=tmp_path / "b", profile=True, executor="inprocess"
    )
    a = json.loads((split.dir / "profile.json").read_text())["columns"]["x"]
    b = json.loads((whole.dir / "profile.json").read_text())["columns"]["x"]
    assert a["quantiles"] == b["quantiles"] and a["rows"] == b["rows"] == x.size
    assert a["mean"] == pytest.approx(b["mean"], abs=1e-12) and a["std"] == pytest.approx(b["std"])


def test_no_profile_by_default(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1.0, 2.0]}), tmp_path / "a.parquet")
    report = datacheck.scan(tmp_path, out=tmp_path / "out")
    assert not (report.dir / "profile.json").exists()
    with pytest.raises(datacheck.InputError, match="no profile"):
        load_profile(report.dir)


def test_cli_scan_profile_flag(tmp_path: Path) -> None:
    import subprocess
    import sys

    x = np.random.default_rng(7).standard_normal(500)
    pq.write_table(pa.table({"x": x}), tmp_path / "a.parquet")
    cmd = [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(tmp_path / "a.parquet"),
        "--profile",
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert doc["columns"]["x"]["std"] == pytest.approx(x.std())
    settings = json.loads((tmp_path / "out" / "report.json").read_text())["settings"]
    assert settings["profile"] is True


def test_profile_survives_the_resume_journal(tmp_path: Path) -> None:
    """A unit recorded before an interruption comes back with its profile (plain JSON)."""
    from datacheck.engine._discover import discover, plan_units
    from datacheck.engine._journal import Journal
    from datacheck.engine._unit import scan_unit

    x = np.random.default_rng(8).standard_normal(1000)
    x[5] = np.inf
    pq.write_table(pa.table({"x": x}), tmp_path / "a.parquet")
    files, _ = discover([str(tmp_path / "a.parquet")])
    (unit,) = plan_units(files, 1 << 30)
    res = scan_unit(unit, None, str(tmp_path / "parts"), profile=True, sketch=True)
    journal = Journal(tmp_path, tmp_path / "parts", {"k": 1}, resume=False)
    journal.record(res)
    journal.close()
    (back,), todo = Journal(tmp_path, tmp_path / "parts", {"k": 1}, resume=True).split([unit])
    assert todo == [] and back.profile is not None
    restored = ColumnProfile.from_state(back.profile["x"])
    assert restored.to_dict() == ColumnProfile.from_state(res.profile["x"]).to_dict()
    assert restored.inf == 1 and restored.std == pytest.approx(x[np.isfinite(x)].std())


@pytest.mark.parametrize("seed", [0, 1])
def test_profiling_does_not_change_value_findings(tmp_path: Path, seed: int) -> None:
    """The checks reuse the profile's min/max: findings are the same with and without it."""
    from conftest import planted_table, site_set

    table, expected = planted_table(rows=3000, seed=seed)
    emb = np.random.default_rng(seed).standard_normal(3000 * 4)
    emb[[5, 4000]] = [np.nan, 1e6]
    table = table.append_column("emb", pa.FixedSizeListArray.from_arrays(pa.array(emb), 4))
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=700)
    plain = datacheck.scan(tmp_path / "p.parquet", out=tmp_path / "a", executor="inprocess")
    prof = datacheck.scan(
        tmp_path / "p.parquet", out=tmp_path / "b", executor="inprocess", profile=True
    )
    extra = {(1, "emb", "nan"), (1000, "emb", "extreme")}
    assert site_set(plain.findings) == site_set(prof.findings) == expected | extra
