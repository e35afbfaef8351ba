"""``coerce``: the cast pandera does, and a finding for every value it fails on or would change.

Regression tests for issue 25's A1-A3 and B1 (coercion), each from its own tiny input: data
written by pyarrow, the schema as pandera writes it (``to_yaml``), the scan run by the CLI or
``datacheck.scan``; and a property test of :func:`datacheck.schema._coerce.cast` against
pandera's own coercion of the same column.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandera.engines import pandas_engine

import datacheck
from datacheck.schema._coerce import cast

NAN, INF = float("nan"), float("inf")


def _yaml(tmp_path: Path, schema: pa_.DataFrameSchema) -> Path:
    p = tmp_path / "schema.yaml"
    p.write_text(schema.to_yaml())
    return p


def _sites(tmp_path: Path, table: pa.Table, schema: pa_.DataFrameSchema, fmt: str = "parquet"):
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    report = datacheck.scan(path, schema=_yaml(tmp_path, schema), out=tmp_path / f"o-{fmt}")
    f = report.findings
    return {(r.column, r.check, None if pd.isna(r.row) else int(r.row)) for r in f.itertuples()}


def _coerce(dtype: str, nullable: bool = True) -> pa_.DataFrameSchema:
    return pa_.DataFrameSchema({"x": pa_.Column(dtype, nullable=nullable, coerce=True)})


def test_a1_nan_coerced_to_an_integer_is_found_by_the_cli(tmp_path: Path) -> None:
    """pandera #796: NaN cast to int64 became INT64_MIN and the scan passed (exit 0)."""
    pq.write_table(pa.table({"x": pa.array([NAN, 1.0, 2.0])}), tmp_path / "n.parquet")
    schema = _yaml(tmp_path, _coerce("int64"))
    env = {**os.environ, "PYTHONPATH": str(Path(datacheck.__file__).parents[1])}
    cmd = [sys.executable, "-m", "datacheck", "scan", "n.parquet", "--schema", str(schema)]
    res = subprocess.run(
        [*cmd, "--out", "o"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 1, res.stderr
    f = datacheck.load_report(tmp_path / "o").findings
    assert sorted(zip(f.check, f.row, strict=True)) == [("nan", 0), ("schema", 0)]


@pytest.mark.parametrize(
    ("dtype", "values", "bad"),
    [
        ("int64", [2.5, 1.0, 2.0], [0]),  # a fraction is not cut to 2
        ("int64", [INF, 1.0, -INF], [0, 2]),
        ("int64", [1e19, 1.0, -1e19], [0, 2]),  # past int64: INT64_MIN
        ("int8", [300, 1, -129], [0, 2]),  # A2: 300 -> 44
        ("int8", [300.0, 1.0, 127.0], [0]),  # pandera itself wraps this one
        ("uint8", [-1, 1, 255], [0]),  # A2: -1 -> 255
        ("uint64", [-1, 1, 0], [0]),
        ("float32", [1e300, 1.0, -1e300], [0, 2]),  # overflow to +/-inf
        ("bool", [1, 0, 2], [2]),  # 2 is not a boolean
        ("Int64", [2.5, None, 3.0], [0]),
    ],
)
def test_a1_a2_no_silent_wrap_or_truncation(tmp_path: Path, dtype, values, bad) -> None:
    table = pa.table({"x": pa.array(values)})
    got = _sites(tmp_path, table, _coerce(dtype))
    schema_rows = sorted(r for c, chk, r in got if chk == "schema")
    assert schema_rows == bad


def test_a1_nan_into_a_nullable_integer_is_a_nan_finding(tmp_path: Path) -> None:
    """pandas' Int64 holds NaN as <NA> (pandera passes it in a nullable column): the NaN in
    the file is still reported, as NaN, and is no cast failure."""
    got = _sites(tmp_path, pa.table({"x": pa.array([NAN, 1.0])}), _coerce("Int64"))
    assert got == {("x", "nan", 0)}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a3_text_with_a_fraction_into_an_integer(tmp_path: Path, fmt: str) -> None:
    """pandera #2021: "7.5" coerced to Int64 passed as 7."""
    table = pa.table({"x": pa.array(["7.5", "1", "x"])})
    got = _sites(tmp_path, table, _coerce("Int64"), fmt)
    assert got == {("x", "schema", 0), ("x", "schema", 2)}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_b1_boolean_from_text_names_each_row(tmp_path: Path, fmt: str) -> None:
    """pandera's ``boolean`` coercion fails on the text "True" and on "A" (rows 0 and 2)."""
    table = pa.table({"x": pa.array(["True", None, "A"]), "n": [1, 2, 3]})  # no blank CSV line
    assert _sites(tmp_path, table, _coerce("boolean"), fmt) == {
        ("x", "schema", 0),
        ("x", "schema", 2),
    }


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_csv_and_parquet_agree_on_a_coerced_integer(tmp_path: Path, fmt: str) -> None:
    """A CSV integer column with coerce is checked as the integers, as Parquet is: 2.4 is a
    cast that would cut it (a finding), and the check runs on the integers."""
    schema = pa_.DataFrameSchema({"a": pa_.Column(int, pa_.Check.le(2), coerce=True)})
    got = _sites(tmp_path, pa.table({"a": [1.0, 2.4, 3.0]}), schema, fmt)
    assert got == {("a", "schema", 1), ("a", "out_of_range", 2)}


@pytest.mark.parametrize(
    ("dtype", "column", "want"),
    [
        ("bool", pa.array([1, 0, 1]), set()),
        ("datetime64[ns]", pa.array(["2020-01-01", "x", None]), {("x", "schema", 1)}),
        ("category", pa.array(["u", "v", None]), set()),
        ("str", pa.array([None, None], pa.null()), set()),
        ("str", pa.array([1, 2]), set()),
        ("float64", pa.array(["1.5", "x", None]), {("x", "schema", 1)}),
    ],
)
def test_coerce_to_every_family(tmp_path: Path, dtype: str, column: pa.Array, want) -> None:
    """D: coerce to bool, datetime, category, or str from an all-null column gave a false
    dtype error."""
    assert _sites(tmp_path, pa.table({"x": column}), _coerce(dtype)) == want


# --- the cast itself, against pandera's ------------------------------------------------------

_DTYPES = ["int64", "int32", "int8", "uint8", "uint64", "Int64", "Int8", "UInt16", "float32"]
_DTYPES += ["float64", "Float64", "bool", "boolean", "str", "category", "datetime64[ns]"]
_NUMBERS = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, -1.0, 2.5, 300.0, -129.0, 127.0, 255.0, 65504.0, 1e300]),
)
_TEXT = st.sampled_from(["1", "7.5", "x", "", " 12 ", "True", "False", "nan", "1e3", "-3"])
_TEXT = st.one_of(_TEXT, st.sampled_from(["2020-01-01", "2020-13-01", "300", "inf"]))


def _column(draw: st.DrawFn) -> pa.Array:
    kind = draw(st.sampled_from(["int64", "int8", "float64", "float32", "bool", "text"]))
    n = draw(st.integers(1, 6))
    if kind == "text":
        return pa.array(draw(st.lists(st.one_of(st.none(), _TEXT), min_size=n, max_size=n)))
    if kind == "bool":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n)))
    t = pa.type_for_alias(kind)
    values = draw(st.lists(st.one_of(st.none(), _NUMBERS), min_size=n, max_size=n))
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        values = [int(v) if _fits(v, info) else None for v in values]
    else:
        values = [None if v is None else float(v) for v in values]
        if t == pa.float32():
            values = [
                v if v is None or abs(v) < 3e38 or not math.isfinite(v) else None for v in values
            ]
    return pa.array(values, t)


def _fits(v, info) -> bool:
    return v is not None and (isinstance(v, int) or v.is_integer()) and info.min <= v <= info.max


@st.composite
def _case(draw: st.DrawFn) -> tuple[pa.Array, str]:
    return _column(draw), draw(st.sampled_from(_DTYPES))


def _pandera_cast(series: pd.Series, dtype) -> tuple[pd.Series | None, set[int]]:
    """pandera's coercion of the column (None if it failed) and the rows it names."""
    schema = pa_.DataFrameSchema({"x": pa_.Column(dtype, nullable=True, coerce=True)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return schema.validate(pd.DataFrame({"x": series}), lazy=True).x, set()
        except pa_.errors.SchemaErrors as exc:
            fc = exc.failure_cases
    rows = fc[fc.check.astype(str).str.startswith("coerce_dtype")]["index"]
    return None, {int(r) for r in rows.dropna()}


def _same(a, b) -> bool:
    if pd.isna(a) and pd.isna(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


@settings(max_examples=150, deadline=None)
@given(case=_case())
def test_cast_is_pandera_cast_and_names_every_value_it_fails_on(case) -> None:
    """Every value pandera's coercion fails on is bad; a value it casts keeps pandera's
    result; a value bad here but not in pandera is one pandera's cast changed (wrapped, cut,
    overflowed) or a null-like value pandas cannot hold in that type."""
    arr, dtype_name = case
    dtype = pandas_engine.Engine.dtype(dtype_name)
    series = arr.to_pandas()
    theirs, failed = _pandera_cast(series, dtype_name)
    ours = cast(arr, dtype)
    bad = set() if ours.bad is None else set(np.flatnonzero(ours.bad).tolist())
    if ours.error is None:
        assert failed <= bad | {i for i in range(len(arr)) if not arr[i].is_valid}
    values = ours.values.to_pandas()
    for i in range(len(arr)):
        if i in bad or not arr[i].is_valid:
            continue
        src = series.iloc[i]
        if theirs is not None:
            assert _same(values.iloc[i], theirs.iloc[i]), (i, src, values.iloc[i], theirs.iloc[i])
    if theirs is not None:
        for i in bad - failed:  # pandera cast it: to something else than the value
            assert not _same(theirs.iloc[i], series.iloc[i]) or pd.isna(series.iloc[i]), i
