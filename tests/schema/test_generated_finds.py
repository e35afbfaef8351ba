"""Regression tests for what the generated differential suite found, each from its own tiny
input (pyarrow writes the data), with what pandera reports on the same file beside it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck

C, Chk = pa_.Column, pa_.Check


def _run(tmp_path: Path, schema, table: pa.Table) -> tuple[set[tuple], set[tuple]]:
    """(pandera's sites, datacheck's sites) on one Parquet file: (column, check, row)."""
    path = tmp_path / "d.parquet"
    pq.write_table(table, path)
    theirs: set[tuple] = set()
    try:
        schema.validate(pd.read_parquet(path), lazy=True)
    except pa_.errors.SchemaErrors as exc:
        for r in exc.failure_cases.itertuples():
            row = None if r.index is None or pd.isna(r.index) else int(r.index)
            theirs.add((r.column if isinstance(r.column, str) else None, str(r.check), row))
    f = datacheck.scan(path, schema=schema, out=tmp_path / "o", isolate=False).findings
    ours = {
        (None if pd.isna(r.column) else r.column, r.check, None if pd.isna(r.row) else int(r.row))
        for r in f.itertuples()
        if r.check != "empty"
    }
    return theirs, ours


def test_an_error_outranks_a_warning_of_the_same_name(tmp_path: Path) -> None:
    """Two whole-column checks of one name, the first ``raise_warning``: both fail; pandera
    raises for the second, so the column's finding is an error (was the first's warning)."""
    schema = pa_.DataFrameSchema(
        {
            "a": C(
                float,
                [Chk.unique_values_eq([0.5], raise_warning=True), Chk.unique_values_eq([1.0])],
            )
        }
    )
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"a": [2.0, 3.0]}), path)
    with pytest.raises(pa_.errors.SchemaErrors):  # pandera: an error, not only a warning
        schema.validate(pd.read_parquet(path), lazy=True)
    f = datacheck.scan(path, schema=schema, out=tmp_path / "o", isolate=False).findings
    (sev,) = f[f.check == "unique_values_eq"].severity
    assert sev == "error"


def test_add_missing_columns_adds_none_when_one_cannot_be_added(tmp_path: Path) -> None:
    """pandera adds the absent columns only when every absent required one has a default or
    is nullable; else none (``a``'s failing check never runs) and names the one it cannot."""
    schema = pa_.DataFrameSchema(
        {"a": C(float, Chk.gt(0), nullable=True, default=-1.0), "b": C(int), "c": C(int)},
        add_missing_columns=True,
    )
    theirs, ours = _run(tmp_path, schema, pa.table({"c": [1, 2]}))
    assert theirs == {(None, "add_missing_has_default", None)}  # pandera names b as the value
    assert ours == {("b", "schema", None)}
    theirs, ours = _run(tmp_path, schema, pa.table({"b": [1, 2], "c": [1, 2]}))
    assert ("a", "greater_than(0)", 0) in theirs  # added with its default, which fails
    assert ours == {("a", "out_of_range", 0), ("a", "out_of_range", 1)}


def test_a_column_coerced_under_a_schema_dtype_casts_the_whole_frame(tmp_path: Path) -> None:
    """A schema-level ``dtype`` and one column with ``coerce``: pandera casts every column,
    undeclared ones too (text that is not a number fails)."""
    schema = pa_.DataFrameSchema({"a": C(coerce=True), "b": C()}, dtype="float64")
    table = pa.table({"a": [1, 2], "b": pa.array([3, 4], pa.int32()), "z": ["1.5", "x"]})
    theirs, ours = _run(tmp_path, schema, table)
    assert ("coerce_dtype('float64')", 1) in {(c, r) for _, c, r in theirs}  # {'z': 'x'}
    assert ours == {("z", "schema", 1)}  # a, b and z cast; a and b pass as float64
    # pandera casts the frame whole or not at all: a and b then fail their dtype (DIFFERENCES
    # coerce): {("a", "dtype('float64')", None), ("b", "dtype('float64')", None)} <= theirs


@pytest.mark.parametrize(
    ("stored", "passes"),
    [(pa.string(), False), (pa.int64(), False), (pa.date32(), True), (pa.binary(), True)],
)
def test_object_is_what_pandas_reads_as_objects(tmp_path: Path, stored, passes) -> None:
    """pandas 3 reads text as ``str``: pandera's ``object`` fails a text column."""
    values = {
        pa.string(): ["a"],
        pa.int64(): [1],
        pa.date32(): [pd.Timestamp("2020-01-01").date()],
        pa.binary(): [b"x"],
    }[stored]
    schema = pa_.DataFrameSchema({"c": C("object")})
    theirs, ours = _run(tmp_path, schema, pa.table({"c": pa.array(values, stored)}))
    assert (not theirs) is passes
    assert (not ours) is passes


@pytest.mark.parametrize(
    ("values", "passes"), [([], False), ([True, False], False), ([None, True], True)]
)
def test_object_on_a_bool_column_holds_only_with_a_null(tmp_path: Path, values, passes) -> None:
    """pandas reads a bool column as objects only when it holds a null; without one (or
    empty) it is ``bool``, which fails pandera's ``object``: decided over the whole file."""
    schema = pa_.DataFrameSchema({"c": C("object", nullable=True)})
    theirs, ours = _run(tmp_path, schema, pa.table({"c": pa.array(values, pa.bool_())}))
    assert (not theirs) is passes
    assert ours == (set() if passes else {("c", "schema", None)})


def test_an_empty_file_checks_a_column_read_in_no_chunk(tmp_path: Path) -> None:
    """An empty dictionary column comes back in no chunk; pandera still runs its checks (a
    frame cast to float64 makes ``str_length`` raise), so the scan does too."""
    schema = pa_.DataFrameSchema(
        {"b": C(checks=Chk.str_length(0, 2), nullable=True), "z": C(coerce=True, nullable=True)},
        dtype="float64",
    )
    table = pa.table({"b": pa.array([], pa.string()).dictionary_encode(), "z": pa.array([], "f8")})
    theirs, ours = _run(tmp_path, schema, table)
    assert ("b", "str_length(0, 2)", None) in theirs
    assert ("b", "str_length", None) in ours


def test_bool_coerced_to_float16_is_cast_as_pandas_casts(tmp_path: Path) -> None:
    """Arrow has no bool -> float16 kernel (was an exit 3): pandera's own cast then."""
    schema = pa_.DataFrameSchema({"b": C("float16", Chk.le(0.5), coerce=True, nullable=True)})
    theirs, ours = _run(tmp_path, schema, pa.table({"b": [True, False, None]}))
    assert ("b", "less_than_or_equal_to(0.5)", 0) in theirs
    assert ours == {("b", "out_of_range", 0)}


def _run_indexed(tmp_path: Path, schema, frame: pd.DataFrame) -> tuple[set[tuple], set[tuple]]:
    path = tmp_path / "i.parquet"
    frame.to_parquet(path)  # pandas stores the index
    theirs: set[tuple] = set()
    try:
        schema.validate(pd.read_parquet(path), lazy=True)
    except pa_.errors.SchemaErrors as exc:
        theirs = {(r.schema_context, str(r.check)) for r in exc.failure_cases.itertuples()}
    f = datacheck.scan(path, schema=schema, out=tmp_path / "o", isolate=False).findings
    ours = {(r.column, r.check) for r in f.itertuples() if r.check != "empty"}
    return theirs, ours


def test_schema_coerce_casts_the_index_too(tmp_path: Path) -> None:
    """``coerce`` on the schema casts the index (pandera): ints cast to text, so a numeric
    bound on them raises (one finding for the level) instead of naming rows."""
    schema = pa_.DataFrameSchema(
        {"a": C(int)}, index=pa_.Index("str", Chk.le(-1), name="k"), coerce=True
    )
    frame = pd.DataFrame({"a": [1, 2]}, index=pd.Index([7, 0], name="k"))
    theirs, ours = _run_indexed(tmp_path, schema, frame)
    assert theirs == {("Index", "less_than_or_equal_to(-1)")}
    f = datacheck.scan(tmp_path / "i.parquet", schema=schema, out=tmp_path / "p").findings
    (row,) = f[f.column == "k"].row  # one finding for the level, no row
    assert pd.isna(row)


@pytest.mark.parametrize("multi", [False, True], ids=["index", "multiindex"])
def test_a_schema_dtype_reaches_a_single_index_never_a_multiindex_level(
    tmp_path: Path, multi: bool
) -> None:
    """pandera casts a single index to the schema-level ``dtype`` (text that is no number
    fails ``dtype('float64')`` at its rows), but a ``MultiIndex`` keeps its levels' own dtypes
    under it: no finding for the same values as a level."""
    keys = ["a", "b", "", "2.5"]
    frame = pd.DataFrame({"c": [1.0] * 4})
    if multi:
        frame.index = pd.MultiIndex.from_arrays([keys, [0, 1, 2, 3]], names=["k1", "k2"])
        index = pa_.MultiIndex([pa_.Index(None, name="k1"), pa_.Index(None, name="k2")])
    else:
        frame.index = pd.Index(keys, name="k1")
        index = pa_.Index(None, name="k1")
    schema = pa_.DataFrameSchema({"c": C("float64")}, dtype="float64", coerce=True, index=index)
    theirs, ours = _run_indexed(tmp_path, schema, frame)
    if multi:
        assert theirs == set() and ours == set()
    else:
        assert theirs == {("Index", "dtype('float64')")}
        assert ours == {("k1", "schema")}


@pytest.mark.parametrize("k2", [7, -5])
@pytest.mark.parametrize("checked", ["k2", "k1"])
def test_an_ordered_multiindex_matches_its_levels_in_order(
    tmp_path: Path, k2: int, checked: str
) -> None:
    """An ordered ``MultiIndex`` declared ``[k2, k1]`` over a file storing ``[k1, k2]``: pandera
    reports ``column_ordered``, runs the first level's checks on the stored level of its name
    (``k2 = 7`` fails ``max <= 0``; ``k2 = -5`` passes, whatever ``k1`` holds), and never the
    second's: no ``k1`` comes after ``k2``."""
    le0 = Chk(lambda s: s.max() <= 0, name="max_le_0")
    levels = {n: pa_.Index("int64", *([le0] if n == checked else []), name=n) for n in ("k2", "k1")}
    index = pa_.MultiIndex([levels["k2"], levels["k1"]])
    schema = pa_.DataFrameSchema({"z": C(float)}, index=index)
    frame = pd.DataFrame({"z": [1.0]})
    frame.index = pd.MultiIndex.from_tuples([(-k2, k2)], names=["k1", "k2"])
    theirs, ours = _run_indexed(tmp_path, schema, frame)
    fails = k2 > 0 and checked == "k2"
    assert theirs == {("MultiIndex", "column_ordered")} | (
        {("MultiIndex", "max_le_0")} if fails else set()
    )
    assert ours == {("k1", "schema"), ("k2", "schema")} | ({("k2", "max_le_0")} if fails else set())


def test_strict_filter_drops_undeclared_columns_before_the_frame_cast(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"a": C()}, dtype="float64", coerce=True, strict="filter")
    theirs, ours = _run(tmp_path, schema, pa.table({"a": [1, 2], "z": ["x", "y"]}))
    assert theirs == set() and ours == set()  # z is dropped, never cast


def test_an_empty_index_level_of_objects_is_not_text(tmp_path: Path) -> None:
    schema = pa_.DataFrameSchema({"a": C(float, nullable=True)}, index=pa_.Index("str", name="k"))
    frame = pd.DataFrame({"a": []}, index=pd.Index([], name="k", dtype=object))
    theirs, ours = _run_indexed(tmp_path, schema, frame)
    assert theirs == {("Index", "dtype('string[pyarrow]')")}
    assert ours == {("k", "schema")}


def test_a_column_added_in_its_own_dtype_fails_a_schema_level_dtype(tmp_path: Path) -> None:
    """pandera builds an added column in the column's own dtype, then checks the schema's."""
    schema = pa_.DataFrameSchema(
        {"c": C("float32", nullable=True)}, dtype="Float64", add_missing_columns=True
    )
    theirs, ours = _run(tmp_path, schema, pa.table({"z": [1.0]}))
    assert theirs == {("c", "dtype('Float64')", None)}
    assert ours == {("c", "schema", None)}


def test_notin_on_datetimes_from_yaml_runs(tmp_path: Path) -> None:
    """pandera's ``from_yaml`` gives a datetime ``notin`` its values as a DatetimeIndex,
    whose truth value pandas refuses (was an exit 3)."""
    import subprocess
    import sys

    schema = pa_.DataFrameSchema({"t": C("datetime64[ns]", [Chk.notin([]), Chk.le(0)])})
    (tmp_path / "s.yaml").write_text(schema.to_yaml())
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"t": pa.array(pd.to_datetime(["2020-01-01", "2021-01-01"]))}), path)
    cmd = [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(path),
        "--schema",
        str(tmp_path / "s.yaml"),
    ]
    res = subprocess.run([*cmd, "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 1, res.stderr
    f = datacheck.load_report(tmp_path / "o").findings
    assert list(zip(f.column, f.check, f.row.isna(), strict=True)) == [("t", "out_of_range", True)]
