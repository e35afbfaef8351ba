"""Regression tests for issue 25's A4-A7, B1, C1-C2, D and E: each defect from its own tiny
input (data written by pyarrow, the schema as pandera writes it: ``to_yaml`` where YAML can
say it, the Python object where it cannot), with what pandera reports on the same file."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import datacheck

C, Chk = pa_.Column, pa_.Check
NAN = float("nan")


def _write(tmp_path: Path, table: pa.Table, fmt: str = "parquet", **kw) -> Path:
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path, **kw)
    return path


def _sites(path: Path, schema, out: Path, yaml: bool = True) -> set[tuple]:
    if yaml and isinstance(schema, pa_.DataFrameSchema):
        try:
            text = schema.to_yaml()
        except Exception:  # noqa: BLE001 - lambdas and Enums have no YAML: the object itself
            text = None
        if text is not None:
            (out.parent / "schema.yaml").write_text(text)
            schema = out.parent / "schema.yaml"
    f = datacheck.scan(path, schema=schema, out=out).findings
    return {
        (None if pd.isna(r.column) else r.column, r.check, None if pd.isna(r.row) else int(r.row))
        for r in f.itertuples()
    }


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a4_every_regex_column_matching_runs_its_checks(tmp_path: Path, fmt: str) -> None:
    schema = pa_.DataFrameSchema(
        {r"x_\d": C(float, Chk.ge(0), regex=True), r"x_.*": C(float, Chk.le(1), regex=True)}
    )
    path = _write(tmp_path, pa.table({"x_1": [0.5, -1.0, 2.0]}), fmt)
    assert _sites(path, schema, tmp_path / "o") == {
        ("x_1", "out_of_range", 1),  # x_\d: ge(0)
        ("x_1", "out_of_range", 2),  # x_.*: le(1)
    }


def test_a4_a_name_and_a_pattern_both_apply(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"x_1": C(float, Chk.ge(0)), r"x_.*": C(float, Chk.isin([0.5, -1.0]), regex=True)}
    )
    path = _write(tmp_path, pa.table({"x_1": [0.5, -1.0, 2.0]}))
    assert _sites(path, schema, tmp_path / "o") == {
        ("x_1", "out_of_range", 1),
        ("x_1", "isin", 2),
    }


def test_a5_schema_dtype_with_coerce_casts_undeclared_columns(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"a": C(int)}, dtype=int, coerce=True)
    path = _write(tmp_path, pa.table({"a": [1, 2], "b": ["1", "x"]}))
    assert _sites(path, schema, tmp_path / "o") == {("b", "schema", 1)}


def test_a5_schema_dtype_without_coerce_leaves_undeclared_columns(tmp_path: Path) -> None:
    """pandera: with columns declared, a schema-level dtype without coerce is the declared
    columns' dtype only; with none declared it is every column's."""
    table = pa.table({"a": [1, 2], "b": [1.5, 2.0]})
    path = _write(tmp_path, table)
    assert _sites(path, pa_.DataFrameSchema({"a": C(int)}, dtype="int64"), tmp_path / "o") == set()
    assert _sites(path, pa_.DataFrameSchema(dtype="int64"), tmp_path / "o2") == {
        ("b", "schema", None)
    }


class Color(str, enum.Enum):
    red = "red"
    blue = "blue"


class Paint(pa_.DataFrameModel):
    c: Color = pa_.Field(nullable=True)


@pytest.mark.parametrize("dictionary", [False, True])
def test_a6_a_category_outside_its_categories(tmp_path: Path, dictionary: bool) -> None:
    """An Enum annotation is a category whose categories are its members: "green" fails
    (pandera: dtype('category') at row 1)."""
    arr = pa.array(["red", "green", "blue", None])
    path = _write(tmp_path, pa.table({"c": arr.dictionary_encode() if dictionary else arr}))
    got = _sites(path, Paint, tmp_path / "o")
    assert ("c", "schema", 1) in got
    assert {s for s in got if s[2] is not None} == {("c", "schema", 1)}


def test_a6_listed_categories(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"c": C(pd.CategoricalDtype(["a", "b"]), coerce=True)})
    path = _write(tmp_path, pa.table({"c": ["a", "z", "b"]}))  # to_yaml drops the categories
    assert _sites(path, schema, tmp_path / "o", yaml=False) == {("c", "schema", 1)}


def test_a7_unordered_multiindex_levels_are_matched_by_name(tmp_path: Path) -> None:
    index = pa_.MultiIndex(
        [pa_.Index(str, name="b"), pa_.Index(int, Chk.ge(0), name="a")], ordered=False
    )
    schema = pa_.DataFrameSchema({"x": C(float)}, index=index)
    df = pd.DataFrame(
        {"x": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([(1, "u"), (-1, "v")], names=["a", "b"])
    )
    df.to_parquet(tmp_path / "d.parquet")
    got = _sites(tmp_path / "d.parquet", schema, tmp_path / "o")
    assert got == {("a", "out_of_range", 1)}  # pandera: the same, at index (-1, 'v')


def test_a7_ordered_multiindex_levels_out_of_order(tmp_path: Path) -> None:
    index = pa_.MultiIndex([pa_.Index(str, name="b"), pa_.Index(int, name="a")], ordered=True)
    schema = pa_.DataFrameSchema({"x": C(float)}, index=index)
    df = pd.DataFrame({"x": [1.0]}, index=pd.MultiIndex.from_tuples([(1, "u")], names=["a", "b"]))
    df.to_parquet(tmp_path / "d.parquet")
    got = _sites(tmp_path / "d.parquet", schema, tmp_path / "o")
    assert {(c, chk) for c, chk, _ in got} >= {("a", "schema"), ("b", "schema")}


def test_b1_csv_schema_level_checks_see_numbers(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"a": C(int), "b": C(int)}, checks=Chk(lambda df: df["a"] < df["b"])
    )
    path = _write(tmp_path, pa.table({"a": [1, 5, 2], "b": [2, 1, 3]}), "csv")
    assert _sites(path, schema, tmp_path / "o") == {(None, "<lambda>", 1)}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_c1_a_check_not_aligned_to_the_rows_is_one_verdict(tmp_path: Path, fmt: str) -> None:
    """``value_counts()`` answers per value, not per row: pandera reports the column once."""
    schema = pa_.DataFrameSchema({"x": C(int, Chk(lambda s: s.value_counts() < 2))})
    path = _write(tmp_path, pa.table({"x": [1, 1, 2, 3]}), fmt, row_group_size=2)
    assert _sites(path, schema, tmp_path / "o") == {("x", "<lambda>", None)}
    ok = _write(tmp_path, pa.table({"x": [1, 2, 3, 4]}), fmt)
    assert _sites(ok, schema, tmp_path / "o2") == set()


def test_c1_a_vectorised_check_sees_the_whole_column(tmp_path: Path) -> None:
    """A check that is not element-wise answers for the column pandera gives it, whole: per
    row group, ``s > s.mean()`` would fail other rows."""
    schema = pa_.DataFrameSchema({"x": C(float, Chk(lambda s: s <= s.mean() + 1))})
    path = _write(tmp_path, pa.table({"x": [0.0, 0.0, 2.0, 9.0]}), row_group_size=2)
    assert _sites(path, schema, tmp_path / "o") == {("x", "<lambda>", 3)}


def test_c2_a_model_whose_schema_raises_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad_model.py").write_text(
        textwrap.dedent("""
        import pandera.pandas as pa
        class Model(pa.DataFrameModel):
            a: int = pa.Field(ge=0)
            @pa.check("zzz")
            def c(cls, s):
                return s > 0
        """)
    )
    pq.write_table(pa.table({"a": [1]}), tmp_path / "d.parquet")
    env = {**os.environ, "PYTHONPATH": str(Path(datacheck.__file__).parents[1])}
    cmd = [sys.executable, "-m", "datacheck", "scan", "d.parquet", "--schema", "bad_model:Model"]
    res = subprocess.run(
        [*cmd, "--out", "o"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "zzz" in res.stderr


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_d_strict_filter_columns_are_not_scanned(tmp_path: Path, fmt: str) -> None:
    schema = pa_.DataFrameSchema({"a": C(float)}, strict="filter")
    table = pa.table({"a": [1.0, 2.0], "b": [NAN, float("inf")], "c": [1e9, 1.0]})
    assert _sites(_write(tmp_path, table, fmt), schema, tmp_path / "o") == set()


def test_d_default_fills_nulls_before_the_checks(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"a": C(float, Chk.ge(1), default=0.0, nullable=False)})
    path = _write(tmp_path, pa.table({"a": pa.array([1.0, None, 2.0])}))
    assert _sites(path, schema, tmp_path / "o") == {("a", "out_of_range", 1)}  # pandera too


def test_d_add_missing_columns_checks_the_added_default(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"a": C(int), "b": C(int, Chk.ge(1), default=0)}, add_missing_columns=True
    )
    path = _write(tmp_path, pa.table({"a": [1, 2]}))
    assert _sites(path, schema, tmp_path / "o") == {
        ("b", "out_of_range", 0),
        ("b", "out_of_range", 1),
    }


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_d_undeclared_columns_get_no_null_warning(tmp_path: Path, fmt: str) -> None:
    schema = pa_.DataFrameSchema({"a": C(float)})
    table = pa.table({"a": [1.0, 2.0], "b": pa.array([1.0, None]), "k": [1, 2]})
    assert _sites(_write(tmp_path, table, fmt), schema, tmp_path / "o") == set()


def test_e_unique_as_sets_of_columns(tmp_path: Path) -> None:
    """pandera checks each set in turn and reports the first with duplicated rows."""
    table = pa.table({"a": [1, 1, 2], "b": [1, 2, 2]})
    path = _write(tmp_path, table)
    schema = pa_.DataFrameSchema({"a": C(int), "b": C(int)}, unique=[["a"], ["b"]])
    assert _sites(path, schema, tmp_path / "o") == {("a", "unique", 0), ("a", "unique", 1)}
    schema = pa_.DataFrameSchema({"a": C(int), "b": C(int)}, unique=[["a", "b"], ["b"]])
    assert _sites(path, schema, tmp_path / "o2") == {("b", "unique", 1), ("b", "unique", 2)}
