"""pandera parity: every construct, validated by pandera and by datacheck on the same files.

Each case writes its data as Parquet (two rows per row group) and CSV, validates it with
``schema.validate(df, lazy=True)`` on what pandas reads and with ``datacheck.scan``, and
compares the (column, check, row) sites; the only differences allowed are the documented ones
(``datacheck.schema._compile.DIFFERENCES``), applied in ``_differential.explain``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _differential import Case, run
from hypothesis import given, settings
from hypothesis import strategies as st

from datacheck.checks._pandas import register_pandera_checks

register_pandera_checks()

C, Chk = pa_.Column, pa_.Check
NAN, INF = float("nan"), float("inf")
F64 = [0.0, 1.0, 0.5, NAN, None, INF, -INF, 1e300, -2.0]
F32 = pa.array(np.array([0.1, 0.2, 0.1, 1.0, -0.5, 0.3], dtype=np.float32))
S = ["apple", "banana", None, "cherry", "Apple", "ba"]


def _t(**cols) -> pa.Table:
    return pa.table(cols)


def _f(values, t: pa.DataType | None = None) -> pa.Array:
    return pa.array(values, t or pa.float64(), from_pandas=False)


def _cases() -> list[Case]:
    x = _f(F64)
    s = pa.array(S)
    cases = [
        # --- built-in checks, numeric, with NaN/null/Inf and bounds -----------------------
        *[
            Case(f"{name}-f64", pa_.DataFrameSchema({"x": C(float, chk, nullable=True)}), _t(x=x))
            for name, chk in [
                ("gt", Chk.gt(0.5)),
                ("ge", Chk.ge(0.5)),
                ("lt", Chk.lt(0.5)),
                ("le", Chk.le(0.5)),
                ("in_range", Chk.in_range(0, 1)),
                ("in_range-open", Chk.in_range(0, 1, include_min=False, include_max=False)),
                ("between", Chk.between(0, 1)),
                ("eq", Chk.eq(1.0)),
                ("ne", Chk.ne(1.0)),
                ("isin", Chk.isin([0.0, 1.0])),
                ("notin", Chk.notin([0.0, 1.0])),
                ("gt-ignore_na", Chk.gt(0.5, ignore_na=False)),
                ("isin-ignore_na", Chk.isin([0.0, 1.0], ignore_na=False)),
                ("warning", Chk.le(0.5, raise_warning=True)),
            ]
        ],
        *[
            Case(f"{name}-f32", pa_.DataFrameSchema({"x": C("float32", chk)}), _t(x=F32))
            for name, chk in [
                ("gt", Chk.gt(0.1)),
                ("ge", Chk.ge(0.1)),
                ("le", Chk.le(0.3)),
                ("lt", Chk.lt(0.3)),
                ("in_range", Chk.in_range(0.1, 0.3)),
            ]
        ],
        Case(
            "overlapping ranges",
            pa_.DataFrameSchema({"x": C(float, [Chk.gt(0), Chk.lt(1), Chk.in_range(0, 0.9)])}),
            _t(x=_f([0.5, 2.0, -1.0, 0.95])),
        ),
        Case(
            "int ranges and nulls",
            pa_.DataFrameSchema({"i": C("Int64", [Chk.in_range(0, 5), Chk.ne(3)], nullable=False)}),
            _t(i=pa.array([1, 7, None, 3, -1], pa.int64())),
            formats=("parquet",),
            allowed=frozenset({"dtype"}),  # pandas reads int64 with a null as float64
        ),
        # --- text --------------------------------------------------------------------------
        *[
            Case(f"{name}-str", pa_.DataFrameSchema({"s": C(str, chk, nullable=True)}), _t(s=s))
            for name, chk in [
                ("str_matches", Chk.str_matches(r"^[ab]")),
                ("str_contains", Chk.str_contains("an")),
                ("str_startswith", Chk.str_startswith("b")),
                ("str_endswith", Chk.str_endswith("a")),
                ("str_length", Chk.str_length(3, 5)),
                ("isin", Chk.isin(["apple", "banana"])),
                ("notin", Chk.notin(["apple"])),
                ("eq", Chk.eq("apple")),
            ]
        ],
        Case(
            "no dtype, text",
            pa_.DataFrameSchema({"s": C(checks=Chk.isin(["apple"]), nullable=True)}),
            _t(s=s),
        ),
        Case("not nullable text", pa_.DataFrameSchema({"s": C(str)}), _t(s=s)),
        Case(
            "unique_values_eq",
            pa_.DataFrameSchema({"i": C(int, Chk.unique_values_eq([1, 2, 3]))}),
            _t(i=[1, 2, 1, 2, 1]),
        ),
        Case(
            "unique_values_eq ok",
            pa_.DataFrameSchema({"i": C(int, Chk.unique_values_eq([1, 2]))}),
            _t(i=[1, 2, 1, 2, 1]),
        ),
        # --- column options ----------------------------------------------------------------
        Case("unique", pa_.DataFrameSchema({"i": C(int, unique=True)}), _t(i=[1, 2, 3, 1, 2])),
        Case(
            "unique exclude_first",
            pa_.DataFrameSchema({"i": C(int, unique=True, report_duplicates="exclude_first")}),
            _t(i=[1, 2, 3, 1, 2]),
        ),
        Case(
            "schema unique",
            pa_.DataFrameSchema({"a": C(int), "b": C(int)}, unique=["a", "b"]),
            _t(a=[1, 1, 2, 1], b=[1, 2, 1, 1]),
        ),
        Case("required missing", pa_.DataFrameSchema({"a": C(int), "b": C(int)}), _t(a=[1])),
        Case(
            "optional missing",
            pa_.DataFrameSchema({"a": C(int), "b": C(int, required=False)}),
            _t(a=[1]),
        ),
        Case(
            "regex",
            pa_.DataFrameSchema({r"x_\d": C(float, Chk.ge(0), regex=True)}),
            _t(x_1=[1.0, -1.0], x_2=[-2.0, 2.0], y=[-1.0, -1.0]),
        ),
        Case("strict", pa_.DataFrameSchema({"a": C(int)}, strict=True), _t(a=[1], b=[2])),
        Case(
            "strict filter", pa_.DataFrameSchema({"a": C(int)}, strict="filter"), _t(a=[1], b=[2])
        ),
        Case(
            "ordered",
            pa_.DataFrameSchema({"a": C(int), "b": C(int)}, ordered=True),
            _t(b=[1], a=[2]),
        ),
        Case(
            "coerce int32",
            pa_.DataFrameSchema({"i": C("int64", Chk.le(5))}, coerce=True),
            _t(i=pa.array([1, 9, 3], pa.int32())),
            formats=("parquet",),
        ),
        *[
            Case(f"dtype {d}", pa_.DataFrameSchema({"c": C(d)}), _t(c=v), formats=("parquet",))
            for d, v in [
                ("int64", [1, 2]),
                ("int64", [1.0, 2.0]),
                ("float64", [1, 2]),
                ("float32", _f([1.0], pa.float32())),
                ("bool", [True, False]),
                ("bool", [1, 0]),
                ("str", ["a", "b"]),
                ("str", [1, 2]),
                ("datetime64[ns]", pa.array(pd.to_datetime(["2020-01-01"]))),
                ("datetime64[ns]", ["2020-01-01"]),
            ]
        ],
        # --- schema level -------------------------------------------------------------------
        Case(
            "schema-level row check",
            pa_.DataFrameSchema(
                {"a": C(int), "b": C(int)}, checks=Chk(lambda df: df["a"] < df["b"])
            ),
            _t(a=[1, 5, 2], b=[2, 1, 3]),
        ),
        Case(
            "index stored",
            pa_.DataFrameSchema({"a": C(int)}, index=pa_.Index(int, Chk.ge(10), name="id")),
            _t(a=[1, 2, 3]),
            formats=("parquet",),
            index=pd.Index([10, 5, 11], name="id"),
        ),
        Case(
            "index named otherwise",
            pa_.DataFrameSchema({"a": C(int)}, index=pa_.Index(int, name="id")),
            _t(a=[1, 2, 3]),
            formats=("parquet",),
            index=pd.Index([10, 5, 11], name="key"),
        ),
        Case(
            "named index, none stored",
            pa_.DataFrameSchema({"a": C(int)}, index=pa_.Index(int, name="id")),
            _t(a=[1, 2, 3]),
        ),
        Case(
            "index is the row number",
            pa_.DataFrameSchema({"a": C(int)}, index=pa_.Index(int, Chk.lt(2))),
            _t(a=[1, 2, 3]),
        ),
        Case("empty file", pa_.DataFrameSchema({"x": C(float, Chk.gt(0))}), _t(x=_f([]))),
        Case(
            "not nullable float",
            pa_.DataFrameSchema({"x": C(float, Chk.ge(0))}),
            _t(x=_f([1.0, NAN, None, -1.0])),
        ),
        Case(
            "datetime range",
            pa_.DataFrameSchema(
                {"t": C("datetime64[ns]", Chk.in_range(pd.Timestamp("2020"), pd.Timestamp("2021")))}
            ),
            _t(t=pa.array(pd.to_datetime(["2020-06-01", "2019-01-01", "2022-01-01"]))),
            formats=("parquet",),
        ),
        Case(
            "zip codes as text",
            pa_.DataFrameSchema({"zip": C(str, Chk.str_length(5)), "n": C(int)}),
            _t(zip=["01234", "1234", "12345"], n=[1, 2, 3]),
            formats=("parquet",),
        ),
        Case(
            "coerce text to int",
            pa_.DataFrameSchema({"i": C("int64", Chk.ge(0))}, coerce=True),
            _t(i=["1", "x", "-3"]),
            formats=("parquet",),
            allowed=frozenset({"coerce"}),
        ),
        Case(
            "unique with NaN",
            pa_.DataFrameSchema({"x": C(float, unique=True, nullable=True)}),
            _t(x=_f([1.0, NAN, 1.0, NAN, 2.0])),
            formats=("parquet",),
        ),
        Case(
            "add_missing_columns",
            pa_.DataFrameSchema(
                {"a": C(int), "b": C(int, default=0), "c": C(float, nullable=True)},
                add_missing_columns=True,
            ),
            _t(a=[1, 2]),
        ),
        Case(
            "schema-level dtype",
            pa_.DataFrameSchema({"a": C(int)}, dtype="float64"),
            _t(a=[1, 2], b=[1, 2]),
            formats=("parquet",),
        ),
        Case(
            "schema-level dtype, no columns",
            pa_.DataFrameSchema(dtype="float64"),
            _t(a=[1, 2], b=[1.0, 2.0]),
            formats=("parquet",),
        ),
        Case(
            "bool column",
            pa_.DataFrameSchema({"b": C(bool, Chk.eq(True))}),
            _t(b=[True, False, True]),
            formats=("parquet",),
        ),
        # --- datacheck's own checks --------------------------------------------------------
        Case(
            "max_abs",
            pa_.DataFrameSchema({"x": C(float, Chk.max_abs(max_abs=1.0), nullable=True)}),
            _t(x=x),
        ),
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize(
    ("case", "fmt"),
    [(c, f) for c in CASES for f in c.formats],
    ids=[f"{c.name}-{f}" for c in CASES for f in c.formats],
)
def test_same_answer_as_pandera(case: Case, fmt: str, tmp_path: Path) -> None:
    assert run(case, fmt, tmp_path) == []


@settings(max_examples=15, deadline=None)
@given(
    values=st.lists(
        st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=12
    ),
    lo=st.floats(-2, 2, width=32),
    width=st.sampled_from([32, 64]),
)
def test_ranges_at_the_bounds(tmp_path_factory, values, lo, width) -> None:
    """Random float32/float64 data against bounds taken from the data itself."""
    t = pa.float32() if width == 32 else pa.float64()
    bound = float(values[0]) if np.isfinite(values[0]) else lo
    schema = pa_.DataFrameSchema(
        {"x": C(f"float{width}", [Chk.ge(bound), Chk.lt(bound + 1)], nullable=True)}
    )
    case = Case("hypothesis", schema, _t(x=_f(values, t)))
    assert run(case, "parquet", tmp_path_factory.mktemp("h")) == []


IO_SHAPED_YAML = """
schema_type: dataframe
columns:
  n:
    title: a count
    dtype: int64
    nullable: false
    checks:
    - value: 0
      options: {check_name: greater_than, raise_warning: false, ignore_na: true}
    - min_value: 0
      max_value: 8
      include_min: true
      include_max: true
      options: {check_name: in_range}
  word:
    dtype: str
    checks:
      isin:
        value: [foo, bar, xy]
        options: {raise_warning: false, ignore_na: true}
      str_length: {min_value: 1, max_value: 3}
  when:
    dtype: datetime64[ns]
    checks:
    - value: '2010-01-01 00:00:00'
      options: {check_name: greater_than}
  wait:
    dtype: timedelta64[ns]
    checks:
    - value: 1000
      options: {check_name: less_than}
  maybe_.*:
    dtype: str
    nullable: true
    required: false
    regex: true
    str_length: {min_value: 1, max_value: 2}
  anything:
    dtype: null
    checks:
    - value: [foo, bar]
      options: {check_name: isin}
checks: null
index:
- dtype: int64
  nullable: false
  checks: null
  name: null
strict: true
"""


def test_yaml_in_the_shapes_pandera_reads(tmp_path: Path) -> None:
    """List, dict and flat check forms, unary ``value:`` statistics, datetime and timedelta
    bounds, a pattern column and a column with no dtype: datacheck reading the YAML file and
    pandera reading the same text agree on the same Parquet file."""
    from _differential import Example, datacheck_answer, differences, pandera_answer, read

    schema_path = tmp_path / "s.yaml"
    schema_path.write_text(IO_SHAPED_YAML)
    schema = pa_.DataFrameSchema.from_yaml(IO_SHAPED_YAML)
    data = _t(
        n=[1, 0, 9, 4],
        word=["foo", "bar", "zzzz", "xy"],
        when=pa.array(pd.to_datetime(["2011-01-01", "2009-01-01", "2015-01-01", "2012-01-01"])),
        wait=pa.array(pd.to_timedelta([10, 2000, 5, 999], unit="ns")),
        maybe_a=["a", None, "abc", "ab"],
        anything=["foo", "bar", "baz", "foo"],
    )
    path = tmp_path / "data.parquet"
    pq.write_table(data, path, row_group_size=2)
    assert pandera_answer(schema, read(path))[0].sites  # the planted faults are found at all
    ours = datacheck_answer(schema_path, path, tmp_path / "o", set())
    ex = Example(schema, data, "parquet", path, read(path))
    assert differences(ex, ours).problems == []
