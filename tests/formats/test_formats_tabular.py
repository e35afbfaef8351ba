"""Every tabular format: planted faults found at the right row/column/check; corrupt files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import EXT, TABULAR_FORMATS, planted_table, site_set, write_table

import datacheck
from datacheck.engine._discover import plan_units
from datacheck.engine._unit import scan_unit


@pytest.mark.parametrize("fmt", TABULAR_FORMATS)
def test_planted_faults_found_exactly(tmp_path: Path, fmt: str) -> None:
    table, expected = planted_table()
    path = write_table(table, tmp_path / f"data{EXT[fmt]}", fmt)
    report = datacheck.scan(path, out=tmp_path / "out")
    assert site_set(report.findings) == expected
    (entry,) = report.data["files"]
    assert entry["format"] == fmt
    assert entry["rows"] == 200
    assert entry["status"] == "flagged"


@pytest.mark.parametrize("fmt", TABULAR_FORMATS)
def test_row_index_is_exact_across_chunks(tmp_path: Path, fmt: str) -> None:
    """Row groups / CSV blocks: the row is the index within the file, not within the chunk."""
    rows = 5000
    x = np.zeros(rows)
    bad = [0, 1023, 1024, 2500, 4999]
    x[bad] = np.nan
    path = write_table(
        pa.table({"x": x}),
        tmp_path / f"d{EXT[fmt]}",
        fmt,
        **({"row_group_size": 1024} if fmt == "parquet" else {}),
    )
    (unit,) = plan_units([(str(path), str(tmp_path))])
    res = scan_unit(unit, None, None, options={"block_bytes": 4096})
    assert res.rows == rows
    assert sorted(res.table["row"].to_pylist()) == bad


def test_csv_spellings_of_nan_and_inf(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("x\n1.0\ninf\n-inf\n1e309\nnan\nNaN\n-nan\nNA\n2.5\n")
    report = datacheck.scan(path, out=tmp_path / "o")
    got = site_set(report.findings)
    assert got == {
        (1, "x", "inf"),
        (2, "x", "inf"),
        (3, "x", "inf"),
        (4, "x", "nan"),
        (5, "x", "nan"),
        (6, "x", "nan"),
        (7, "x", "null"),
    }


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "jsonl"])
@pytest.mark.parametrize("kind", ["list", "fixed"])
def test_nested_embedding_columns_are_checked_element_by_element(
    tmp_path: Path, fmt: str, kind: str
) -> None:
    rows, width = 50, 4
    emb = np.ones((rows, width), dtype=np.float32)
    emb[7, 2] = np.nan
    emb[7, 3] = np.nan
    emb[30, 0] = np.inf
    emb[44, 1] = 7e4
    flat = pa.array(emb.reshape(-1))
    if kind == "fixed" and fmt != "jsonl":
        col = pa.FixedSizeListArray.from_arrays(flat, width)
    else:
        col = pa.ListArray.from_arrays(
            pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32)), flat
        )
    path = write_table(pa.table({"emb": col}), tmp_path / f"e{EXT[fmt]}", fmt)
    report = datacheck.scan(path, out=tmp_path / "o")
    f = report.findings
    assert site_set(f) == {(7, "emb", "nan"), (30, "emb", "inf"), (44, "emb", "extreme")}
    assert int(f.loc[f.check == "nan", "count"].iloc[0]) == 2  # both bad elements counted
    assert report.data["files"][0]["counts"]["nan"] == 2


def test_null_vector_and_null_element(tmp_path: Path) -> None:
    col = pa.array([[1.0, 2.0], None, [None, 3.0], [float("nan"), 1.0]], pa.list_(pa.float64()))
    path = write_table(pa.table({"v": col}), tmp_path / "n.parquet", "parquet")
    report = datacheck.scan(path, out=tmp_path / "o")
    assert site_set(report.findings) == {(1, "v", "null"), (2, "v", "null"), (3, "v", "nan")}


def test_clean_data_has_no_findings(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    t = pa.table({"a": rng.standard_normal(1000), "i": np.arange(1000) * 1000, "s": ["x"] * 1000})
    for fmt in TABULAR_FORMATS:
        write_table(t, tmp_path / f"c{EXT[fmt]}", fmt)
    report = datacheck.scan(tmp_path, out=tmp_path / "o")
    assert report.ok and report.summary["sites"] == {}
    assert sorted(f["format"] for f in report.data["files"]) == sorted(TABULAR_FORMATS)


# --- corrupt files -------------------------------------------------------------------------


def _good_parquet(path: Path, **kw) -> Path:
    pq.write_table(pa.table({"x": np.arange(2000, dtype=np.float64)}), path, **kw)
    return path


def _corrupt_page(path: Path) -> None:
    """Flip bytes inside the first data page (page checksums were written)."""
    data = bytearray(path.read_bytes())
    meta = pq.read_metadata(path)
    start = meta.row_group(0).column(0).data_page_offset
    for i in range(start + 400, start + 420):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _make_corrupt(kind: str, d: Path) -> Path:
    if kind == "zero_bytes":
        p = d / "zero.parquet"
        p.write_bytes(b"")
    elif kind == "wrong_magic":
        p = d / "magic.parquet"
        p.write_bytes(b"this is not parquet at all" * 10)
    elif kind == "truncated":
        p = _good_parquet(d / "trunc.parquet")
        p.write_bytes(p.read_bytes()[:-100])
    elif kind == "page_checksum":
        p = _good_parquet(d / "page.parquet", write_page_checksum=True, compression="none")
        _corrupt_page(p)
    elif kind == "csv_undecodable":
        p = d / "undecodable.csv"
        p.write_bytes(b"a\n1.5\n\xff\xfe\x00abc\n")
    elif kind == "arrow_truncated":
        p = d / "t.arrow"
        write_table(pa.table({"x": np.arange(1000.0)}), p, "arrow")
        p.write_bytes(p.read_bytes()[:300])
    elif kind == "unknown_format":
        p = d / "mystery.bin"
        p.write_bytes(b"\x00\x01\x02")
    return p


CORRUPT_KINDS = [
    "zero_bytes",
    "wrong_magic",
    "truncated",
    "page_checksum",
    "csv_undecodable",
    "arrow_truncated",
    "unknown_format",
]


@pytest.mark.parametrize("kind", CORRUPT_KINDS)
def test_corrupt_file_is_one_finding_and_the_scan_goes_on(tmp_path: Path, kind: str) -> None:
    d = tmp_path / "in"
    d.mkdir()
    bad = _make_corrupt(kind, d)
    good = _good_parquet(d / "good.parquet")
    report = datacheck.scan([str(bad), str(good)], out=tmp_path / "o")
    files = {f["path"]: f for f in report.data["files"]}
    assert set(files) == {str(bad), str(good)}  # every file exactly once
    assert files[str(bad)]["status"] == "corrupt"
    assert files[str(good)]["status"] == "ok"
    f = report.findings
    corrupt = f[f.check == "corrupt"]
    assert len(corrupt) == 1
    assert corrupt.iloc[0]["path"] == str(bad)
    assert corrupt.iloc[0]["row"] is pd_na()
    assert corrupt.iloc[0]["value"]  # says why
    assert report.exit_code() == 1


def pd_na():
    import pandas as pd

    return pd.NA


def test_page_checksum_damage_is_caught_only_by_verification(tmp_path: Path) -> None:
    """Guard against the checksum test passing vacuously."""
    p = _good_parquet(tmp_path / "p.parquet", write_page_checksum=True, compression="none")
    _corrupt_page(p)
    pq.ParquetFile(p).read()  # without verification the damage goes unnoticed
    with pytest.raises(OSError):
        pq.ParquetFile(p, page_checksum_verification=True).read()


def test_report_json_lists_every_file_once(tmp_path: Path, demo_dir: Path) -> None:
    report = datacheck.scan(demo_dir, out=tmp_path / "o")
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    paths = [f["path"] for f in doc["files"]]
    assert len(paths) == len(set(paths)) == 5
    assert doc["summary"]["files"] == 5
    assert all(f["status"] in ("ok", "flagged", "corrupt") for f in doc["files"])
    assert report.summary == doc["summary"]


def test_csv_integer_column_with_floats_in_a_later_block_is_data_not_damage(tmp_path: Path) -> None:
    p = tmp_path / "late.csv"
    p.write_text("n\n" + "1\n" * 3000 + "nan\n2.5\n")
    (unit,) = plan_units([(str(p), str(tmp_path))])
    res = scan_unit(unit, None, None, options={"block_bytes": 1024})
    assert res.corrupt is None
    assert res.rows == 3002
    assert res.table["row"].to_pylist() == [3000]


# --- regressions found in review -----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_integer_column_with_nan_in_a_later_block(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / f"late{EXT[fmt]}"
    if fmt == "csv":
        p.write_text("a\n" + "3\n" * 3000 + "nan\n")
    else:
        p.write_text('{"a": 3}\n' * 3000 + '{"a": NaN}\n')
    (unit,) = plan_units([(str(p), str(tmp_path))])
    res = scan_unit(unit, None, None, options={"block_bytes": 1024})
    assert res.corrupt is None and res.rows == 3001
    assert res.table["row"].to_pylist() == [3000] and res.counts == {"nan": 1}
    assert res.columns == {"a": "int64"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_schema_int_column_holding_nan_is_checked_not_corrupt(tmp_path: Path, fmt: str) -> None:
    import pandera.pandas as pa_

    schema = pa_.DataFrameSchema({"label": pa_.Column("int64", checks=pa_.Check.in_range(0, 9))})
    rows = [1, 2, None, 42, 3]
    p = tmp_path / f"s{EXT[fmt]}"
    if fmt == "csv":
        p.write_text("label\n" + "\n".join("nan" if r is None else str(r) for r in rows) + "\n")
    else:
        p.write_text(
            "".join(
                json.dumps({"label": r if r is not None else float("nan")}) + "\n" for r in rows
            )
        )
    report = datacheck.scan(p, schema=schema, out=tmp_path / "o")
    want = {(2, "label", "nan"), (3, "label", "out_of_range")}
    if fmt == "csv":  # a CSV's integers are cast as pandera casts: NaN is no int64 (pandera too)
        want.add((2, "label", "schema"))
    assert site_set(report.findings) == want
    assert report.data["files"][0]["status"] == "flagged"


def test_list_null_slot_with_elements_behind_it(tmp_path: Path) -> None:
    """Valid Arrow: a null list slot whose offsets still cover elements (IPC keeps them)."""
    arr = pa.ListArray.from_arrays(
        pa.array([0, 2, 4, 6], pa.int32()),
        pa.array([1.0, 2.0, float("nan"), 4.0, 5.0, float("inf")]),
        mask=pa.array([False, True, False]),
    )
    path = write_table(pa.table({"e": arr}), tmp_path / "l.arrow", "arrow")
    report = datacheck.scan(path, out=tmp_path / "o")
    assert site_set(report.findings) == {(1, "e", "null"), (2, "e", "inf")}


def test_dangling_symlink_in_a_directory_is_a_corrupt_file(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    _good_parquet(d / "good.parquet")
    (d / "broken.parquet").symlink_to(tmp_path / "nowhere.parquet")
    report = datacheck.scan(d, out=tmp_path / "o")
    status = {Path(f["path"]).name: f["status"] for f in report.data["files"]}
    assert status == {"good.parquet": "ok", "broken.parquet": "corrupt"}


def test_tab_separation_is_decided_by_the_file_name_only(tmp_path: Path) -> None:
    d = tmp_path / "x.tsv.d"
    d.mkdir()
    (d / "data.csv").write_text("a,b\n1,nan\n")
    (d / "data.tsv.gz").write_bytes(__import__("gzip").compress(b"a\tb\n1\tinf\n"))
    report = datacheck.scan(d, out=tmp_path / "o")
    assert {(Path(r.path).name, r.column, r.check) for r in report.findings.itertuples()} == {
        ("data.csv", "b", "nan"),
        ("data.tsv.gz", "b", "inf"),
    }


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "jsonl"])
def test_struct_and_list_of_struct_fields_are_checked(tmp_path: Path, fmt: str) -> None:
    t = pa.table(
        {
            "s": pa.array([{"a": 1.0}, {"a": float("inf")}, {"a": float("nan")}]),
            "ls": pa.array([[{"a": 1.0}], [{"a": 2.0}, {"a": float("nan")}], [{"a": 1e6}]]),
        }
    )
    path = write_table(t, tmp_path / f"st{EXT[fmt]}", fmt)
    report = datacheck.scan(path, out=tmp_path / "o")
    assert site_set(report.findings) == {
        (1, "s.a", "inf"),
        (2, "s.a", "nan"),
        (1, "ls.a", "nan"),
        (2, "ls.a", "extreme"),
    }


def test_invalid_utf8_inside_a_json_lines_string_is_corrupt_at_its_row(tmp_path: Path) -> None:
    """Arrow's JSON reader keeps such bytes in a string column: the reader validates them."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        b'{"a": 1.0, "s": "caf\xc3\xa9"}\n{"a": 2.0, "s": "bad \xff\xfe"}\n{"a": 3.0, "s": "x"}\n'
    )
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False)
    (entry,) = report.data["files"]
    assert entry["status"] == "corrupt"
    assert entry["error"] == (
        "ValueError: row 1, column 's': a string holds bytes that are not valid UTF-8"
    )
    nested = tmp_path / "n.jsonl"
    nested.write_bytes(b'{"a": 1.0, "s": {"t": ["ok"]}}\n{"a": 1.0, "s": {"t": ["\xff"]}}\n')
    report = datacheck.scan(str(nested), out=tmp_path / "out2", isolate=False)
    assert "rows 0..1, column 's'" in report.data["files"][0]["error"]
    fine = tmp_path / "fine.jsonl"
    fine.write_bytes(b'{"a": NaN, "s": "caf\xc3\xa9 \xe2\x82\xac"}\n')
    report = datacheck.scan(str(fine), out=tmp_path / "out3", isolate=False)
    assert report.data["files"][0]["status"] == "flagged"
