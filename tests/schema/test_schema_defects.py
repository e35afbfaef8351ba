"""Regression tests: every construct of a schema runs or is refused (issue 12's defects 1-20)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck.checks._pandas import register_pandera_checks
from datacheck.errors import SchemaError
from datacheck.schema import load_schema

register_pandera_checks()


def _scan(tmp_path: Path, table: pa.Table, schema, name: str = "d.parquet", **kw):
    p = tmp_path / name
    if name.endswith(".csv"):
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, p)
    else:
        pq.write_table(table, p, **kw)
    return datacheck.scan(p, schema=schema, out=tmp_path / f"o-{name}")


def _sites(report) -> set[tuple]:
    f = report.findings
    return {
        (
            None if pd.isna(r.row) else int(r.row),
            None if pd.isna(r.column) else r.column,
            r.check,
            r.severity,
        )
        for r in f.itertuples()
    }


def _yaml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(text))
    return p


# --- 1-7: silent passes ---------------------------------------------------------------------


def test_1_checks_without_dtype_run_on_text(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"c": pa_.Column(checks=pa_.Check.isin(["a", "b"]))})
    r = _scan(tmp_path, pa.table({"c": ["a", "z", "b"]}), schema)
    assert _sites(r) == {(1, "c", "isin", "error")}


def test_2_unique_column_and_schema_level(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"a": pa_.Column(int, unique=True), "b": pa_.Column(int)}, unique=["a", "b"]
    )
    t = pa.table({"a": [1, 2, 1, 3], "b": [5, 6, 5, 7]})
    r = _scan(tmp_path, t, schema, row_group_size=1)  # duplicates across row groups
    assert _sites(r) == {
        (0, "a", "unique", "error"),
        (2, "a", "unique", "error"),
        (0, "a,b", "unique", "error"),
        (2, "a,b", "unique", "error"),
    }


def test_3_schema_level_checks_index_and_ordered(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"a": pa_.Column(int), "b": pa_.Column(int)},
        checks=pa_.Check(lambda df: df["a"] < df["b"]),
        index=pa_.Index(int, pa_.Check.ge(10)),
        ordered=True,
    )
    df = pd.DataFrame({"b": [5, 1], "a": [1, 2]}, index=pd.Index([10, 3], name="id"))
    p = tmp_path / "d.parquet"
    df.to_parquet(p)
    r = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    got = _sites(r)
    assert (1, None, "<lambda>", "error") in got  # a < b fails on row 1
    assert (1, "id", "out_of_range", "error") in got  # the index stored as a column
    assert any("order" in v for v in r.findings.value.dropna())


def test_4_regex_columns(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x_\\d+": pa_.Column(float, pa_.Check.ge(0), regex=True)})
    r = _scan(tmp_path, pa.table({"x_1": [1.0, -1.0], "x_2": [-2.0, 2.0]}), schema)
    assert _sites(r) == {(1, "x_1", "out_of_range", "error"), (0, "x_2", "out_of_range", "error")}


@pytest.mark.parametrize(
    ("dtype", "values"),
    [("datetime64[ns]", ["2020-01-01", "x"]), ("bool", [1, 0]), ("str", [1, 2])],
)
def test_5_every_dtype_is_enforced(tmp_path: Path, dtype: str, values: list) -> None:
    schema = pa_.DataFrameSchema({"c": pa_.Column(dtype)})
    r = _scan(tmp_path, pa.table({"c": values}), schema)
    assert list(r.findings.check) == ["schema"]


def test_6_ignore_na_false(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {
            "x": pa_.Column(float, pa_.Check.in_range(0, 5, ignore_na=False), nullable=True),
            "y": pa_.Column(float, pa_.Check.isin([1.0], ignore_na=False), nullable=True),
        }
    )
    t = pa.table({"x": pa.array([1.0, None], pa.float64()), "y": pa.array([None, 1.0])})
    r = _scan(tmp_path, t, schema)
    assert _sites(r) == {(1, "x", "out_of_range", "error"), (0, "y", "isin", "error")}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "    in_rnage: {min_value: 0, max_value: 1}\n",
            "unknown key 'in_rnage' (did you mean 'in_range'?)",
        ),
        ("    nulable: true\n", "unknown key 'nulable' (did you mean 'nullable'?)"),
        (
            "    checks:\n    - options: {check_name: isin, ignor_na: false}\n      allowed_values: [1]\n",
            "unknown option 'ignor_na'",
        ),
    ],
)
def test_7_misspelt_keys_under_a_column(tmp_path: Path, body: str, message: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("columns:\n  x:\n    dtype: float64\n" + body.replace("    ", "    ", 1))
    with pytest.raises(SchemaError, match=re.escape(message)):
        load_schema(p)


def test_7_misspelt_top_level_key(tmp_path: Path) -> None:
    p = _yaml(tmp_path, "columns: {x: {dtype: int64}}\nstirct: true\n")
    with pytest.raises(SchemaError, match="did you mean 'strict'"):
        load_schema(p)


# --- 8-11: crashes -----------------------------------------------------------------------


def test_8_dataframe_model_and_current_folder(tmp_path: Path) -> None:
    (tmp_path / "models_cwd.py").write_text(
        textwrap.dedent("""
        import pandera.pandas as pa
        class Model(pa.DataFrameModel):
            x: float = pa.Field(ge=0)
        def make():
            return Model
        def needs_args(a):
            return Model
        boom = 1
        """)
    )
    pq.write_table(pa.table({"x": [1.0, -1.0]}), tmp_path / "d.parquet")
    env = {**os.environ, "PYTHONPATH": str(Path(datacheck.__file__).parents[1])}
    cmd = [sys.executable, "-m", "datacheck", "scan", "d.parquet", "--out", "o"]
    for spec, rc in [
        ("models_cwd:Model", 1),
        ("models_cwd:make", 1),
        ("models_cwd:needs_args", 2),
        ("models_cwd:boom", 2),
        ("sys:exit", 2),
    ]:
        res = subprocess.run(
            [*cmd, "--schema", spec], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert res.returncode == rc, (spec, res.stderr)
        if rc == 2:
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_8_import_raising_or_exiting_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "exits_mod.py").write_text("raise SystemExit(0)\n")
    (tmp_path / "raises_mod.py").write_text("raise RuntimeError('nope')\n")
    monkeypatch.chdir(tmp_path)
    for spec in ("exits_mod:x", "raises_mod:x", "builtins:breakpoint"):
        with pytest.raises(SchemaError):
            load_schema(spec)
    for mod in ("exits_mod", "raises_mod"):
        sys.modules.pop(mod, None)


def test_9_string_check_on_numbers_and_csv_zip_codes(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {
            "n": pa_.Column(checks=pa_.Check.str_matches("^1")),
            "zip": pa_.Column(str, pa_.Check.str_length(5)),
        }
    )
    r = _scan(tmp_path, pa.table({"n": [1, 2], "zip": ["01234", "12345"]}), schema, "d.csv")
    f = r.findings
    assert list(zip(f.column, f.check, f.row.isna(), strict=False)) == [("n", "str_matches", True)]
    assert "AttributeError" in f.value[0]


def test_10_older_dict_form_of_checks(tmp_path: Path) -> None:
    p = _yaml(
        tmp_path,
        """
        columns:
          x:
            dtype: float64
            checks:
              greater_than: 0
              less_than: {max_value: 10}
        checks:
          greater_than: -100
        """,
    )
    r = _scan(tmp_path, pa.table({"x": [1.0, -1.0, 20.0]}), p)
    assert {(s[0], s[1], s[2]) for s in _sites(r)} >= {
        (1, "x", "out_of_range"),
        (2, "x", "out_of_range"),
    }


def test_11_non_numeric_argument_is_one_line(tmp_path: Path) -> None:
    p = _yaml(tmp_path, "columns:\n  x:\n    max_abs: lots\n")
    with pytest.raises(SchemaError, match="max_abs must be a number"):
        load_schema(p)


# --- 12-18: wrong answers ------------------------------------------------------------------


def test_12_unique_values_eq_on_the_whole_file(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"c": pa_.Column(int, pa_.Check.unique_values_eq([1, 2]))})
    r = _scan(tmp_path, pa.table({"c": [1, 2, 1, 2]}), schema, row_group_size=1)
    assert r.findings.empty
    r = _scan(tmp_path, pa.table({"c": [1, 1]}), schema, "e.parquet", row_group_size=1)
    assert len(r.findings) == 1 and r.findings.row.isna().all()


def test_13_float32_at_a_bound_does_not_depend_on_other_rows(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x": pa_.Column("float32", pa_.Check.gt(0.1))})
    x = pa.array(np.array([0.1, 0.2, 0.3, 0.1], dtype=np.float32))
    r = _scan(tmp_path, pa.table({"x": x}), schema)
    assert _sites(r) == {(0, "x", "out_of_range", "error"), (3, "x", "out_of_range", "error")}


def test_14_coerce(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x": pa_.Column("int64", pa_.Check.le(5))}, coerce=True)
    r = _scan(tmp_path, pa.table({"x": pa.array([1, 9], pa.int32())}), schema)
    assert _sites(r) == {(1, "x", "out_of_range", "error")}
    r = _scan(tmp_path, pa.table({"x": ["1", "x"]}), schema, "e.parquet")
    assert (1, "x", "schema", "error") in _sites(r)


def test_15_strict_filter(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x": pa_.Column(float)}, strict="filter")
    r = _scan(tmp_path, pa.table({"x": [1.0], "extra": [1]}), schema)
    assert r.findings.empty


def test_16_nan_under_isin_is_reported_once(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x": pa_.Column(float, pa_.Check.isin([1.0]), nullable=True)})
    r = _scan(tmp_path, pa.table({"x": [1.0, np.nan, 2.0]}), schema)
    assert _sites(r) == {(1, "x", "nan", "error"), (2, "x", "isin", "error")}


def test_17_datetime_ranges_are_out_of_range(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"t": pa_.Column("datetime64[ns]", pa_.Check.gt(pd.Timestamp("2020-01-01")))}
    )
    t = pa.table({"t": pa.array(pd.to_datetime(["2021-01-01", "2019-01-01"]))})
    r = _scan(tmp_path, t, schema)
    assert _sites(r) == {(1, "t", "out_of_range", "error")}


def test_18_overlapping_checks_give_one_row(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"x": pa_.Column(float, [pa_.Check.gt(0), pa_.Check.lt(10), pa_.Check.in_range(0, 5)])}
    )
    r = _scan(tmp_path, pa.table({"x": [1.0, 20.0, -3.0]}), schema)
    assert sorted(_sites(r)) == [
        (1, "x", "out_of_range", "error"),
        (2, "x", "out_of_range", "error"),
    ]
    assert r.summary["values"]["out_of_range"] == 2


# --- issue 11: schema loading under hostile input ------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("columns:\n  x:\n    dtype: int64\n" + "a: " + "[" * 200 + "]" * 200 + "\n", "nested"),
        ("columns: {x: {dtype: int64}}\nname: " + "9" * 5000 + "\n", "digits"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=False)
            )
            + "columns: {x: {dtype: int64}}\n",
            "aliases",
        ),
    ],
)
def test_hostile_yaml_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(SchemaError) as info:
        load_schema(p)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert len(str(info.value)) < 300


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_only_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SchemaError, match="not a regular file"):
        load_schema(fifo)
    with pytest.raises(SchemaError, match="not a regular file"):
        load_schema("/dev/zero")


@pytest.mark.parametrize(
    "schema",
    [
        pa_.DataFrameSchema(
            {"x": pa_.Column(float, pa_.Check.gt(0, groupby="y")), "y": pa_.Column(str)}
        ),
        pa_.DataFrameSchema({"x": pa_.Column("complex128")}),
        pa_.DataFrameSchema({"x": pa_.Column(float, parsers=pa_.Parser(lambda s: s))}),
    ],
)
def test_what_cannot_run_is_refused(schema) -> None:
    with pytest.raises(SchemaError):
        load_schema(schema)


def test_19_a_text_cell_in_a_numeric_csv_column(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("id,ratio,n\n1,0.5,1\n2,#DIV/0!,2\n3,nan,x\n4,7,4\n5,,5\n")
    schema = pa_.DataFrameSchema(
        {
            "id": pa_.Column(int),
            "ratio": pa_.Column(float, pa_.Check.le(1), nullable=True),
            "n": pa_.Column(int, nullable=True),
        }
    )
    r = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    assert r.files.status.tolist() == ["flagged"]
    assert _sites(r) == {
        (1, "ratio", "schema", "error"),  # the cell, at its row, with its column
        (2, "ratio", "nan", "error"),
        (3, "ratio", "out_of_range", "error"),
        (2, "n", "schema", "error"),
    }
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert doc["files"][0]["columns"]["ratio"] == "double"


def test_20_a_dataset_is_shards_named_alike_or_with_the_same_columns(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    pq.write_table(pa.table({"sepal": [1.0], "target": [0]}), d / "iris.parquet")
    pq.write_table(pa.table({"bmi": [1.0], "target": [0.5]}), d / "diabetes.parquet")
    r = datacheck.scan(d, out=tmp_path / "o")
    assert r.findings.empty  # two tables side by side, not shards of one
    for i, t in enumerate([pa.int64(), pa.int64(), pa.float64()]):
        pq.write_table(pa.table({"x": pa.array([i], t)}), d / f"part-{i:04d}.parquet")
    r = datacheck.scan(d, out=tmp_path / "o2")
    f = r.findings
    assert list(zip(f.path.str.rsplit("/", n=1).str[-1], f.check, strict=True)) == [
        ("part-0002.parquet", "schema")
    ]


def test_docs_list_every_documented_difference() -> None:
    from datacheck.schema._differences import DIFFERENCES

    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "schemas.md"
    text = page.read_text()
    for key, difference in DIFFERENCES.items():
        assert f"| `{key}` | {difference} |" in text, key


def test_dataframe_model_config_is_honoured(tmp_path: Path) -> None:
    class Model(pa_.DataFrameModel):
        a: int = pa_.Field(ge=0, unique=True)
        b: float = pa_.Field(nullable=True)

        class Config:
            strict = True
            ordered = True
            coerce = True

    t = pa.table({"b": [1.0, 2.0, 3.0], "a": pa.array([1, -1, 1], pa.int32()), "c": [0, 0, 0]})
    r = _scan(tmp_path, t, Model)
    got = {(s[0], s[1], s[2]) for s in _sites(r)}
    assert {(1, "a", "out_of_range"), (0, "a", "unique"), (2, "a", "unique")} <= got
    assert (None, "c", "schema") in got  # strict
    assert (None, "b", "schema") in got  # ordered: b before a
    assert not any(v.startswith("dtype") for v in r.findings.value.dropna())  # coerce: int32


def test_multiindex_levels(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"x": pa_.Column(float)},
        index=pa_.MultiIndex([pa_.Index(int, pa_.Check.ge(0), name="a"), pa_.Index(str, name="b")]),
    )
    df = pd.DataFrame(
        {"x": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([(1, "u"), (-1, "v")], names=["a", "b"])
    )
    df.to_parquet(tmp_path / "d.parquet")
    r = datacheck.scan(tmp_path / "d.parquet", schema=schema, out=tmp_path / "o")
    assert {(s[0], s[1], s[2]) for s in _sites(r)} == {(1, "a", "out_of_range")}
    pq.write_table(pa.table({"x": [1.0]}), tmp_path / "e.parquet")  # no index stored
    r = datacheck.scan(tmp_path / "e.parquet", schema=schema, out=tmp_path / "o2")
    got = dict(zip(r.findings.column, r.findings.value, strict=True))
    assert got.keys() == {"a", "b"}  # pandera: a RangeIndex is not this MultiIndex
    assert got["b"].startswith("index level missing") and "no index" in got["a"]


def test_cli_hostile_schema_is_one_line_exit_2(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1.0]}), tmp_path / "d.parquet")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "columns: {x: {dtype: float64}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(datacheck.__file__).parents[1])}
    for schema in (bomb, "/dev/zero", "sys:exit", "builtins:breakpoint"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "datacheck",
                "scan",
                "d.parquet",
                "--out",
                "o",
                "--schema",
                str(schema),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 2, (schema, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and len(res.stderr) < 400, res.stderr
