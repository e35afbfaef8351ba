"""pandera schemas: YAML round trip, datacheck's registered checks, compilation, errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pytest
from conftest import site_set

import datacheck
from datacheck.checks._pandas import register_pandera_checks
from datacheck.errors import SchemaError
from datacheck.schema import load_schema

register_pandera_checks()


def _schema(**extra) -> pa_.DataFrameSchema:
    return pa_.DataFrameSchema(
        {
            "x": pa_.Column(
                "float64",
                checks=[pa_.Check.finite(), pa_.Check.max_abs(max_abs=10.0)],
                nullable=True,
            ),
            "y": pa_.Column("int64", checks=[pa_.Check.in_range(0, 9)], nullable=False),
            "s": pa_.Column("str", checks=[pa_.Check.str_matches(r"^ok")], nullable=True),
        },
        **extra,
    )


def _data(tmp_path: Path) -> Path:
    import pyarrow.parquet as pq

    # Written with pyarrow: pandas' to_parquet would turn the NaN into a null.
    table = pa.table(
        {
            "x": pa.array([1.0, np.nan, 50.0, None, -np.inf], pa.float64()),
            "y": pa.array([1, 2, 3, 12, None], pa.int64()),
            "s": ["ok1", "bad", "ok2", "ok3", "ok4"],
        }
    )
    path = tmp_path / "d.parquet"
    pq.write_table(table, path)
    return path


def test_to_yaml_output_loads_as_is_and_drives_the_scan(tmp_path: Path) -> None:
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(_schema().to_yaml())
    report = datacheck.scan(_data(tmp_path), schema=yaml_path, out=tmp_path / "o")
    assert site_set(report.findings) == {
        (1, "x", "nan"),  # NaN is not null, though x is nullable
        (2, "x", "extreme"),  # the schema's max_abs, as an error
        (4, "x", "inf"),
        (3, "y", "out_of_range"),
        (4, "y", "null"),  # y is not nullable
        (1, "s", "str_matches"),  # a pandera check without an Arrow body runs on pandas
    }
    sev = report.findings.set_index(["column", "check"])["severity"]
    assert sev[("x", "extreme")] == "error"


def test_same_schema_validates_pandas_in_pandera(tmp_path: Path) -> None:
    """One schema file serves both: pandera itself understands datacheck's checks."""
    schema = pa_.DataFrameSchema.from_yaml(_schema().to_yaml())
    good = pd.DataFrame({"x": [1.0], "y": [3], "s": ["ok"]})
    schema.validate(good)
    with pytest.raises(pa_.errors.SchemaError):
        schema.validate(pd.DataFrame({"x": [np.inf], "y": [3], "s": ["ok"]}))


def test_python_module_attr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = tmp_path / "my_schemas.py"
    mod.write_text(
        textwrap.dedent("""
        import pandera.pandas as pa
        from datacheck.checks import register_pandera_checks
        register_pandera_checks()
        train = pa.DataFrameSchema({"x": pa.Column(float, checks=[pa.Check.max_abs(max_abs=1.0)])})
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    compiled = load_schema("my_schemas:train")
    assert compiled.columns["x"].rules.bounds[0].max_abs == 1.0
    sys.modules.pop("my_schemas", None)


def test_raise_warning_makes_a_warning(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"y": pa_.Column("int64", checks=[pa_.Check.in_range(0, 5, raise_warning=True)])}
    )
    p = tmp_path / "d.parquet"
    pd.DataFrame({"y": [1, 9]}).to_parquet(p)
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    assert report.findings["severity"].tolist() == ["warning"]
    assert report.ok  # --fail-on error by default


def test_schema_findings_missing_unexpected_dtype(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"x": pa_.Column("float64"), "y": pa_.Column("int64"), "z": pa_.Column("float32")},
        strict=True,
    )
    p = tmp_path / "d.parquet"
    pa_table = pa.table({"x": pa.array([1.0], pa.float32()), "y": [1], "extra": [1]})
    import pyarrow.parquet as pq

    pq.write_table(pa_table, p)
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    f = report.findings
    got = {(r.column, r.value) for r in f.itertuples()}
    assert got == {
        ("z", "column missing"),
        ("extra", "unexpected column (schema is strict)"),
        ("x", "dtype float, schema says float64"),
    }
    assert set(f.check) == {"schema"} and f.row.isna().all()


def test_hive_partition_keys_are_not_missing(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"x": pa_.Column("float64"), "day": pa_.Column("str")})
    d = tmp_path / "ds" / "day=2024-01-01"
    d.mkdir(parents=True)
    pd.DataFrame({"x": [1.0]}).to_parquet(d / "part-0.parquet")
    report = datacheck.scan(tmp_path / "ds", schema=schema, out=tmp_path / "o")
    assert report.summary["sites"] == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "columns:\n  x:\n    dtype: float64\n    checks:\n    - min_value: 0\n      max_value: 1\n"
            "      options:\n        check_name: in_rnage\n",
            "unknown check 'in_rnage' (did you mean 'in_range'?)",
        ),
        ("columns: [\n", "invalid YAML"),
        ("- just a list\n", "expected a YAML mapping"),
        ("schema_type: dataframe\n", "no 'columns' mapping"),
        ("columns:\n  x:\n    checks:\n    - max_abs: 1\n", "has no options.check_name"),
    ],
)
def test_schema_mistakes_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(SchemaError) as info:
        load_schema(p)
    assert message in str(info.value)
    assert str(p) in str(info.value)
    assert "\n" not in str(info.value)


def test_invalid_yaml_says_what_is_wrong_and_where(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("columns:\n  x0:\n    dtype: float64\n   checks: [a\n")
    with pytest.raises(SchemaError) as info:
        load_schema(p)
    text = str(info.value)
    assert "line 4, column 4: invalid YAML (expected <block end>, but found" in text, text
    assert text.endswith("; fix the syntax") and "\n" not in text


def test_a_missing_schema_file_names_a_sibling_named_alike(tmp_path: Path) -> None:
    (tmp_path / "rand_hie.yaml").write_text("columns: {}\n")
    with pytest.raises(SchemaError) as info:
        load_schema(tmp_path / "rand-hie.yaml")
    assert f"no such file (did you mean {str(tmp_path / 'rand_hie.yaml')!r}?)" in str(info.value)
    with pytest.raises(SchemaError) as info:
        load_schema(tmp_path / "other.yaml")
    assert "no such file;" in str(info.value)  # nothing named alike: no guess
    with pytest.raises(SchemaError, match="no such file \\(no folder "):
        load_schema(tmp_path / "nope" / "s.yaml")


def test_a_missing_column_names_the_file_column_named_alike(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema(
        {"lpi_per_visit": pa_.Column("float64"), "Age": pa_.Column("int64"), "z": pa_.Column(int)}
    )
    p = tmp_path / "d.parquet"
    pd.DataFrame({"lpi_per_vist": [1.0], "age": [3], "label": [1]}).to_parquet(p)
    got = dict(
        zip(
            *datacheck.scan(p, schema=schema, out=tmp_path / "o")
            .findings[["column", "value"]]
            .T.values,
            strict=True,
        )
    )
    assert got == {
        "lpi_per_visit": "column missing; did you mean 'lpi_per_vist' (in the file)?",
        "Age": "column missing; did you mean 'age' (in the file)?",
        "z": "column missing",
    }


@pytest.mark.parametrize("spec", ["/no/such/schema.yaml", "no_such_module_xyz:schema", "plainword"])
def test_unloadable_schema_specs(spec: str) -> None:
    with pytest.raises(SchemaError):
        load_schema(spec)


def test_example_schemas_in_repo_load() -> None:
    root = Path(__file__).resolve().parents[2] / "schemas"
    files = sorted(root.glob("*.yaml"))
    assert files, "schemas/ should hold example schemas"
    for f in files:
        assert load_schema(f).columns


@pytest.mark.parametrize("dtype", ["Float64", "int64", "float32"])
def test_nan_and_inf_are_checked_whatever_the_schema_dtype_says(tmp_path: Path, dtype: str) -> None:
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": pa.array([1.0, np.nan, np.inf], pa.float64())}), p)
    schema = pa_.DataFrameSchema({"x": pa_.Column(dtype, nullable=True)})
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    assert {(1, "x", "nan"), (2, "x", "inf")} <= site_set(report.findings)


def test_binary_file_as_schema_is_one_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_bytes(b"\xff\xfe\x00\x93binary")
    with pytest.raises(SchemaError, match="not a text file"):
        load_schema(p)


def test_strict_schema_and_a_pandas_index_column(tmp_path: Path) -> None:
    """pandas stores a named index as a column; pandera validates it as the index."""
    schema = pa_.DataFrameSchema(
        {"x": pa_.Column("float64")}, index=pa_.Index("int64", name="id"), strict=True
    )
    df = pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index([7, 8], name="id"))
    p = tmp_path / "d.parquet"
    df.to_parquet(p)
    schema.validate(pd.read_parquet(p))  # pandera: fine
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    assert report.summary["sites"] == {}
    df.reset_index().assign(extra=1).to_parquet(p)  # a real extra column is still flagged
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o2")
    assert set(report.findings.column) == {"id", "extra"}
