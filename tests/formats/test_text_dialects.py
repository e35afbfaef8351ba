"""CSV dialects and bad lines, on files the real producers write (pandas ``to_csv`` with its
``sep``/``decimal``, Python's ``csv`` module, polars ``write_csv``, ``json.dumps`` per line) and
read back by their own readers (pandas ``read_csv``) as the oracle."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import datacheck as dc


def _frame(rows: int = 300, columns: int = 4, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = {f"x{i}": rng.standard_normal(rows).round(6) for i in range(columns)}
    data["label"] = rng.integers(0, 10, rows)
    return pd.DataFrame(data)


def _scan(path: Path, tmp_path: Path, **kw: object) -> dc.Report:
    return dc.scan(path, out=tmp_path / "out", executor="inprocess", **kw)


def _sites(report: dc.Report) -> set[tuple[int, str, str]]:
    f = report.findings
    return {(int(r.row), r.column, r.check) for r in f.itertuples() if not pd.isna(r.row)}


@pytest.mark.parametrize(("sep", "name"), [("\t", "tab"), (";", "semicolon"), ("|", "pipe")])
def test_the_delimiter_is_sniffed_and_named(tmp_path: Path, sep: str, name: str) -> None:
    frame = _frame()
    frame.loc[7, "x1"] = np.inf
    frame.loc[11, "x2"] = np.nan  # pandas writes NaN as an empty field: a null to a reader
    path = tmp_path / "t.csv"  # named .csv whatever its delimiter, as exports often are
    frame.to_csv(path, sep=sep, index=False)
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["dialect"] == {"delimiter": name}
    assert list(entry["columns"]) == list(frame.columns)
    assert _sites(report) == {(7, "x1", "inf"), (11, "x2", "null")}
    # The values are the ones pandas reads with that delimiter.
    back = report.flagged_rows("t.csv")
    oracle = pd.read_csv(path, sep=sep)
    assert (
        back.loc[7, "x0"] == oracle.loc[7, "x0"] and back.loc[7, "label"] == oracle.loc[7, "label"]
    )


def test_polars_pipe_file_and_a_tsv_named_tsv(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    frame = _frame()
    pl.from_pandas(frame).write_csv(tmp_path / "p.csv", separator="|")
    frame.to_csv(tmp_path / "t.tsv", sep="\t", index=False)
    report = dc.scan(tmp_path, out=tmp_path / "out", executor="inprocess")
    dialects = {Path(e["path"]).name: e["dialect"] for e in report.data["files"]}
    assert dialects == {"p.csv": {"delimiter": "pipe"}, "t.tsv": {"delimiter": "tab"}}
    assert report.exit_code() == 0


def test_a_semicolon_file_with_decimal_commas_reads_as_numbers(tmp_path: Path) -> None:
    frame = _frame()
    frame.loc[3, "x0"] = 70000.5  # beyond float16: a warning, found only if read as a number
    path = tmp_path / "eu.csv"
    frame.to_csv(path, sep=";", decimal=",", index=False)
    assert "70000,5" in path.read_text()
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["dialect"] == {"delimiter": "semicolon", "decimal": "comma"}
    assert entry["columns"]["x0"] == "double"
    assert _sites(report) == {(3, "x0", "extreme")}
    oracle = pd.read_csv(path, sep=";", decimal=",")
    assert report.flagged_rows("eu.csv").loc[3, "x1"] == oracle.loc[3, "x1"]
    # With a schema (which has a CSV's numeric columns read as text), the same numbers.
    schema = tmp_path / "s.yaml"
    C = "{max_abs: 65504, options: {check_name: max_abs}}"  # noqa: N806
    schema.write_text(
        "schema_type: dataframe\ncolumns:\n"
        + "".join(f"  x{i}: {{dtype: float64, checks: [{C}]}}\n" for i in range(4))
        + "  label: {dtype: int64}\n"
    )
    typed = dc.scan(path, schema, out=tmp_path / "typed", executor="inprocess")
    assert {(int(r.row), r.column, r.check) for r in typed.findings.itertuples()} == {
        (3, "x0", "extreme")  # max_abs reports as `extreme`
    }


def test_decimal_commas_in_a_comma_file_are_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    with open(path, "w", newline="") as fh:  # what a hand-made "CSV" with 1,5 looks like
        fh.write("a,b\n")
        fh.writelines(f"{i},5,{i + 1},25\n" for i in range(20))
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["status"] == "corrupt"
    assert "decimal commas?" in entry["error"]


def test_a_one_column_file_whose_header_holds_a_delimiter_is_never_ok(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("a;b;c\n1;2\n3\n4;5;6;7\n")  # the lines agree on no delimiter
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "corrupt"
    assert "one column named 'a;b;c': its header holds ';'" in entry["error"]


def test_a_garbage_line_is_a_row_and_the_rest_is_checked(tmp_path: Path) -> None:
    frame = _frame(rows=6000, columns=12)
    frame.loc[5500, "x3"] = 70000.0  # after the bad line: must still be found
    frame.loc[5900, "x4"] = np.inf
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    lines = path.read_text().splitlines(keepends=True)
    garbage = "!!garbage!! @@ truncated write @@,##,\n"
    lines.insert(5001, garbage)  # line 5002 of the file: after data row 4999
    path.write_text("".join(lines))
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == 6001
    f = report.findings
    (bad,) = f[f.check == "corrupt"].itertuples()
    assert bad.row == 5000 and pd.isna(bad.column)
    assert bad.value == (
        "line 5002: 3 fields, expected 13 (delimiter ','): '!!garbage!! @@ truncated...'"
    )
    # Rows after the bad line keep their place: the file's data row 5500 is row 5501 here.
    assert {(5501, "x3", "extreme"), (5901, "x4", "inf")} <= _sites(report)
    assert report.flagged_rows("t.csv").loc[5501, "x3"] == 70000.0
    # pandas reads a short line as a row of NaN (and the garbage as text): the same rows.
    oracle = pd.read_csv(path)
    assert len(oracle) == 6001 and oracle.loc[5000, "x0"] == "!!garbage!! @@ truncated write @@"
    assert oracle.loc[5501, "x3"] == 70000.0
    # The clean copy leaves the line (and the inf row) out; a rescan passes the gate.
    result = report.clean_copy(tmp_path / "clean")
    assert result.loc[0, "rows_in"] == 6001 and result.loc[0, "rows_out"] == 5999
    rescan = dc.scan(tmp_path / "clean", out=tmp_path / "again", executor="inprocess")
    assert rescan.exit_code() == 0 and rescan.summary["rows"] == 5999


def test_python_csv_writer_lines_with_missing_fields(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "c"])
        for i in range(50):
            w.writerow([i, i * 0.5, "text, with a comma"] if i != 20 else [i, i * 0.5])
    report = _scan(path, tmp_path)
    f = report.findings
    assert [(int(r.row), r.check) for r in f.itertuples()] == [(20, "corrupt")]
    assert f.value.iloc[0].startswith("line 22: 2 fields, expected 3 (delimiter ',')")


def test_mostly_unparsable_lines_make_the_file_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("a,b,c\n" + "".join(f"{i},{i}\n" for i in range(10)) + "1,2,3\n")
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "corrupt"
    assert entry["error"].startswith("ValueError: 10 of 11 records do not have the header's 3")


def test_a_json_line_that_does_not_parse_is_a_row(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [{"x": float(i), "y": i} for i in range(400)]
    rows[350]["x"] = math.inf  # json.dumps writes Infinity, which Arrow reads as inf
    lines = [json.dumps(r) + "\n" for r in rows]
    lines[100] = '{"x": 100.0, "y": \n'  # a truncated write
    lines.insert(200, "\n")  # an empty line: not a row
    path.write_text("".join(lines))
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == 400
    f = report.findings
    (bad,) = f[f.check == "corrupt"].itertuples()
    assert bad.row == 100 and bad.value.startswith("line 101: ")
    assert bad.value.endswith(': \'{"x": 100.0, "y": \'')
    assert (350, "x", "inf") in _sites(report)
    result = report.clean_copy(tmp_path / "clean")
    assert result.loc[0, "rows_out"] == 398
    back = pd.read_json(tmp_path / "clean" / "t.jsonl", lines=True)
    assert len(back) == 398 and 100.0 not in set(back["x"])
