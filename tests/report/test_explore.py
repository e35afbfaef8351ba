"""Report.flagged_rows / exclusion_list / clean_copy on real scanned files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import EXT, TABULAR_FORMATS, planted_table, write_table

import datacheck as dc
from datacheck._demo import PLANTED
from datacheck.errors import InputError, UsageError


@pytest.fixture(scope="module")
def demo_report(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dc.Report:
    out = tmp_path_factory.mktemp("demo-report")
    return dc.scan(demo_dir, demo_dir / "schema.yaml", out=out, executor="inprocess")


def _planted_rows(rel: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for path, row, column, check in PLANTED:
        if path == rel and row is not None:
            out.setdefault(row, set()).add(f"{column}: {check}")
    return out


@pytest.mark.parametrize("rel", sorted({p for p, r, _, _ in PLANTED if r is not None}))
def test_flagged_rows_are_the_planted_rows(
    demo_report: dc.Report, demo_dir: Path, rel: str
) -> None:
    rows = demo_report.flagged_rows(rel)
    planted = _planted_rows(rel)
    assert rows.index.name == "row"
    assert list(rows.index) == sorted(planted)
    assert rows["_flagged"].all()
    for row, expected in planted.items():
        assert set(rows.loc[row, "_checks"].split("; ")) == expected
    # The row's data is the file's row: the demo's id column is seed * 1000 + row.
    seed = int(rel.split("-")[-1].split(".")[0])
    assert list(rows["id"]) == [seed * 1000 + r for r in sorted(planted)]


def test_flagged_rows_context_adds_neighbours_clipped_to_the_file(
    demo_report: dc.Report, demo_dir: Path
) -> None:
    rows = demo_report.flagged_rows("shard-001.parquet", context=2)
    expected = sorted({r + d for r in (17, 250, 503) for d in range(-2, 3)})
    assert list(rows.index) == expected
    assert list(rows.index[rows["_flagged"]]) == [17, 250, 503]
    assert (rows.loc[~rows["_flagged"], "_checks"] == "").all()
    whole = pq.read_table(demo_dir / "train/shard-001.parquet").to_pandas()
    np.testing.assert_array_equal(rows["x2"].to_numpy(), whole["x2"].to_numpy()[expected])
    # Context near the start of the file is clipped at row 0.
    head = demo_report.flagged_rows("shard-002.parquet", context=10)
    assert head.index.min() == 0 and 7 in head.index


def test_flagged_rows_csv_values_match_the_file(demo_report: dc.Report) -> None:
    rows = demo_report.flagged_rows("shard-003.csv", context=1)
    assert list(rows.index[rows["_flagged"]]) == [5, 8, 11, 20]
    assert np.isinf(rows.loc[8, "x0"]) and np.isnan(rows.loc[11, "x1"])
    assert rows.loc[20, "label"] == 12
    assert list(rows["id"]) == [3000 + r for r in rows.index]


def test_flagged_rows_of_a_corrupt_file_without_row_findings_is_empty(
    demo_report: dc.Report,
) -> None:
    rows = demo_report.flagged_rows("shard-004.parquet")
    assert rows.empty


@pytest.mark.parametrize(
    "query", ["train/shard-002.parquet", "shard-002.parquet", "./train/shard-002.parquet"]
)
def test_path_as_suffix(demo_report: dc.Report, query: str) -> None:
    assert list(demo_report.flagged_rows(query).index) == [7, 42, 99, 600]


def test_path_as_existing_relative_path(
    demo_report: dc.Report, demo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(demo_dir.parent)
    rel = os.path.join(demo_dir.name, "train", "shard-001.parquet")
    assert list(demo_report.flagged_rows(rel).index) == [17, 250, 503]


def test_unknown_path_says_did_you_mean(demo_report: dc.Report) -> None:
    with pytest.raises(
        InputError,
        match=r"no scanned file matches 'shard-02\.parquet' \(did you mean 'shard-002\.parquet'\?\)",
    ):
        demo_report.flagged_rows("shard-02.parquet")


def test_ambiguous_suffix_lists_the_candidates(tmp_path: Path) -> None:
    table, _ = planted_table()
    for part in ("a", "b"):
        (tmp_path / "data" / part).mkdir(parents=True)
        write_table(table, tmp_path / "data" / part / "x.parquet", "parquet")
    report = dc.scan(tmp_path / "data", out=tmp_path / "out", executor="inprocess")
    with pytest.raises(
        InputError, match=r"matches 2 files .*a/x\.parquet.*b/x\.parquet.*more of the path"
    ):
        report.flagged_rows("x.parquet")
    assert 3 in report.flagged_rows("a/x.parquet").index


def test_negative_context_is_a_usage_error(demo_report: dc.Report) -> None:
    with pytest.raises(UsageError, match="context=-1"):
        demo_report.flagged_rows("shard-001.parquet", context=-1)


def _zero_row_group(path: Path, group: int) -> None:
    """Overwrite one row group's column chunks with zeros (its pages no longer decode)."""
    meta = pq.read_metadata(path)
    data = bytearray(path.read_bytes())
    rg = meta.row_group(group)
    for c in range(rg.num_columns):
        col = rg.column(c)
        start = col.dictionary_page_offset or col.data_page_offset
        data[start : start + col.total_compressed_size] = bytes(col.total_compressed_size)
    path.write_bytes(bytes(data))


def test_flagged_rows_read_only_the_row_groups_that_hold_them(tmp_path: Path) -> None:
    n = 400
    x = np.arange(n, dtype=np.float64)
    x[150] = np.nan
    path = tmp_path / "data" / "groups.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"x": x}), path, row_group_size=100, compression="zstd")
    _zero_row_group(path, 3)  # rows 300..399 cannot be read any more
    with pytest.raises(Exception):  # noqa: B017, PT011 - any reader error proves the damage
        pq.ParquetFile(path).read_row_group(3)
    report = dc.scan(path, out=tmp_path / "out", executor="inprocess")
    assert report.files.loc[0, "status"] == "corrupt"  # the scan saw the damaged group ...
    rows = report.flagged_rows("groups.parquet", context=60)
    # ... but the NaN's neighbourhood lives in groups 0-2 and reads back fine.
    assert list(rows.index) == list(range(90, 211))
    assert np.isnan(rows.loc[150, "x"]) and rows.loc[210, "x"] == 210.0


@pytest.mark.parametrize("fmt", TABULAR_FORMATS)
def test_flagged_rows_every_tabular_format(tmp_path: Path, fmt: str) -> None:
    table, expected = planted_table()
    (tmp_path / "data").mkdir()
    write_table(table, tmp_path / "data" / f"t{EXT[fmt]}", fmt)
    report = dc.scan(tmp_path / "data", out=tmp_path / "out", executor="inprocess")
    rows = report.flagged_rows(f"t{EXT[fmt]}", context=1)
    flagged = sorted({r for r, _, _ in expected})
    assert list(rows.index[rows["_flagged"]]) == flagged
    assert list(rows["id"]) == list(rows.index)


# -- exclusion list --------------------------------------------------------------------------


def test_exclusion_list_pairs_and_dataset_indices(demo_report: dc.Report, demo_dir: Path) -> None:
    excl = demo_report.exclusion_list()
    planted = {(str(demo_dir / p), r) for p, r, _, _ in PLANTED if r is not None}
    rows = excl[excl["row"].notna()]
    assert set(zip(rows["path"], rows["row"], strict=True)) == planted
    # The corrupt shard, whose rows are unknown: one row naming the file, no row, no index.
    (corrupt,) = excl[excl["row"].isna()].itertuples()
    assert corrupt.path == str(demo_dir / "train/shard-004.parquet")
    assert pd.isna(corrupt.index) and corrupt.checks.startswith("corrupt: ArrowInvalid")
    excl = rows
    # Shards concatenated in the report's order (corrupt one left out): 1000 rows each.
    offset = {
        str(demo_dir / f"train/shard-00{i}{'.csv' if i == 3 else '.parquet'}"): i * 1000
        for i in range(4)
    }
    for path, row, index in zip(excl["path"], excl["row"], excl["index"], strict=True):
        assert index == offset[path] + row
    assert excl.loc[excl["row"] == 20, "checks"].item() == "label: out_of_range"


def test_exclusion_list_keeps_warning_only_rows_unless_asked(tmp_path: Path) -> None:
    table, expected = planted_table()
    (tmp_path / "data").mkdir()
    write_table(table, tmp_path / "data" / "t.parquet", "parquet")
    report = dc.scan(tmp_path / "data", out=tmp_path / "out", executor="inprocess")
    errors = {r for r, _, check in expected if check in ("nan", "inf", "null")}
    assert set(report.exclusion_list()["row"]) == errors
    assert set(report.exclusion_list(severity="warning")["row"]) == {r for r, _, _ in expected}
    with pytest.raises(UsageError, match="severity='fatal' is not one of: error, warning"):
        report.exclusion_list(severity="fatal")


def test_exclusion_list_follows_a_given_order(demo_report: dc.Report) -> None:
    order = ["shard-003.csv", "shard-001.parquet"]
    excl = demo_report.exclusion_list(order=order)
    by = dict(
        zip(
            zip(excl["path"].str.rsplit("/", n=1).str[-1], excl["row"], strict=True),
            excl["index"],
            strict=True,
        )
    )
    assert by[("shard-003.csv", 5)] == 5
    assert by[("shard-001.parquet", 17)] == 1000 + 17
    assert excl.loc[excl["path"].str.endswith("shard-002.parquet"), "index"].isna().all()


def test_exclusion_list_feeds_the_loader_helper(demo_report: dc.Report) -> None:
    torch_quarantine = pytest.importorskip("datacheck.torch")
    excl = demo_report.exclusion_list()
    got = torch_quarantine.indices_from_scan(excl, excl)
    assert got == set(excl["index"].dropna().astype(int))
    assert {1017, 2600, 3020} <= got


# -- clean copy ------------------------------------------------------------------------------


def test_clean_copy_drops_flagged_rows_and_rescans_clean(
    demo_report: dc.Report, demo_dir: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "clean"
    result = demo_report.clean_copy(dest)
    status = dict(zip(result["path"].str.rsplit("/", n=1).str[-1], result["status"], strict=True))
    assert status == {
        "shard-000.parquet": "copied",
        "shard-001.parquet": "cleaned",
        "shard-002.parquet": "cleaned",
        "shard-003.csv": "cleaned",
        "shard-004.parquet": "skipped",
    }
    assert list(result["rows_out"]) == [1000, 997, 996, 996, 0]
    assert (dest / "train" / "shard-000.parquet").read_bytes() == (
        demo_dir / "train" / "shard-000.parquet"
    ).read_bytes()
    assert not (dest / "train" / "shard-004.parquet").exists()
    assert not list(dest.rglob("*.tmp"))
    # Same format and layout: the Parquet shard keeps its schema and row groups.
    src = pq.ParquetFile(demo_dir / "train" / "shard-001.parquet")
    out = pq.ParquetFile(dest / "train" / "shard-001.parquet")
    assert out.schema_arrow.equals(src.schema_arrow, check_metadata=False)
    assert out.metadata.num_row_groups == src.metadata.num_row_groups
    ids = out.read(columns=["id"])["id"].to_pylist()
    assert ids == [1000 + r for r in range(1000) if r not in (17, 250, 503)]
    header = (dest / "train" / "shard-003.csv").read_text().splitlines()[0]
    assert (
        header.replace('"', "")
        == (demo_dir / "train" / "shard-003.csv").read_text().splitlines()[0]
    )
    rescan = dc.scan(dest, demo_dir / "schema.yaml", out=tmp_path / "rescan", executor="inprocess")
    assert rescan.summary["status"] == {"ok": 4, "flagged": 0, "corrupt": 0}
    assert rescan.summary["rows"] == 1000 + 997 + 996 + 996


@pytest.mark.parametrize("fmt", TABULAR_FORMATS)
def test_clean_copy_every_tabular_format(tmp_path: Path, fmt: str) -> None:
    table, expected = planted_table()
    (tmp_path / "data").mkdir()
    write_table(table, tmp_path / "data" / f"t{EXT[fmt]}", fmt)
    report = dc.scan(tmp_path / "data", out=tmp_path / "out", executor="inprocess")
    # Default: errors only (the gate's meaning); rows with only warnings stay, and are counted.
    result = report.clean_copy(tmp_path / "errors-only")
    errors = {r for r, _, check in expected if check in ("nan", "inf", "null")}
    assert result["rows_out"].item() == table.num_rows - len(errors)
    assert result["rows_dropped"].item() == len(errors)
    assert result["rows_kept_flagged"].item() == len(expected) - len(errors)  # extreme
    assert result["dropped"].item() == "a: inf 1, a: nan 2, b: inf 1, b: null 1"
    result = report.clean_copy(tmp_path / "clean", severity="warning")
    assert result["status"].tolist() == ["cleaned"]
    bad = {r for r, _, _ in expected}
    assert result["rows_out"].item() == table.num_rows - len(bad)
    assert result["rows_kept_flagged"].item() == 0
    rescan = dc.scan(tmp_path / "clean", out=tmp_path / "rescan", executor="inprocess")
    assert rescan.summary["status"]["ok"] == 1, rescan.findings
    ids = dc.load_report(tmp_path / "rescan").summary["rows"]
    assert ids == table.num_rows - len(bad)


def test_clean_copy_refuses_the_source_and_a_non_empty_dest(
    demo_report: dc.Report, demo_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="scanned folder itself"):
        demo_report.clean_copy(demo_dir)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        demo_report.clean_copy(busy)
    demo_report.clean_copy(busy, overwrite=True)
    assert (busy / "keep.txt").read_text() == "mine"
    assert (busy / "train" / "shard-001.parquet").exists()
    shutil.rmtree(busy)


def test_tensor_files_rows_and_clean_copy(tmp_path: Path) -> None:
    from datacheck.formats import formats

    if not {"npy", "npz"} <= set(formats()):
        pytest.skip("npy/npz readers not registered")
    data = tmp_path / "data"
    data.mkdir()
    x = np.arange(150, dtype=np.float32).reshape(50, 3)
    x[7, 1] = np.nan
    x[30, 0] = np.inf
    np.save(data / "a.npy", x)
    np.savez(data / "b.npz", x=x, y=np.arange(50))
    report = dc.scan(data, out=tmp_path / "out", executor="inprocess")
    rows = report.flagged_rows("a.npy", context=1)
    assert list(rows.index) == [6, 7, 8, 29, 30, 31]
    assert list(rows.index[rows["_flagged"]]) == [7, 30]
    assert list(report.flagged_rows("b.npz")["y"]) == [7, 30]
    result = report.clean_copy(tmp_path / "clean")
    assert result["status"].tolist() == ["cleaned", "cleaned"]
    assert result["rows_out"].tolist() == [48, 48]
    np.testing.assert_array_equal(
        np.load(tmp_path / "clean" / "a.npy"), np.delete(x, [7, 30], axis=0)
    )
    with np.load(tmp_path / "clean" / "b.npz") as z:
        assert z["y"].tolist() == [i for i in range(50) if i not in (7, 30)]
    rescan = dc.scan(tmp_path / "clean", out=tmp_path / "rescan", executor="inprocess")
    assert rescan.summary["status"] == {"ok": 2, "flagged": 0, "corrupt": 0}


def test_flagged_rows_of_a_file_changed_since_the_scan(tmp_path: Path) -> None:
    table, _ = planted_table()
    (tmp_path / "d").mkdir()
    write_table(table, tmp_path / "d" / "t.csv", "csv")
    report = dc.scan(tmp_path / "d", out=tmp_path / "out", executor="inprocess")
    write_table(table.slice(0, 100), tmp_path / "d" / "t.csv", "csv")  # row 150 is gone
    with pytest.raises(InputError, match="changed since the scan"):
        report.flagged_rows("t.csv")


def test_clean_copy_and_flagged_rows_keep_text_integers_exact(tmp_path: Path) -> None:
    """Text readers check integer columns as float64; copies and views must not round them."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text(
        "id,x\n1152921504606846977,0.0\n1152921504606846979,1.0\n1152921504606846981,nan\n"
    )
    (data / "b.jsonl").write_text('{"tok": 0, "v": 1.0}\n{"tok": 1, "v": NaN}\n')
    (data / "c.csv").write_text("n,v\n1,1.0\nnan,2.0\n4,4.0\n")  # needs the float64 read
    report = dc.scan(data, out=tmp_path / "rep")
    report.clean_copy(tmp_path / "out")
    assert (tmp_path / "out" / "a.csv").read_text().splitlines()[1:] == [
        "1152921504606846977,0",
        "1152921504606846979,1",
    ]
    assert (tmp_path / "out" / "b.jsonl").read_text() == '{"tok": 0, "v": 1.0}\n'
    assert (tmp_path / "out" / "c.csv").read_text().splitlines()[1:] == ["1,1", "4,4"]
    rows = report.flagged_rows("a.csv")
    assert rows["id"].tolist() == [1152921504606846981]


def test_clean_copy_keeps_the_delimiter_of_the_file_not_of_its_folder(tmp_path: Path) -> None:
    data = tmp_path / "x.tsv.d"
    data.mkdir()
    (data / "data.csv").write_text("a,b\n1,nan\n2,3\n")
    (data / "t.tsv").write_text("a\tb\n1\tinf\n2\t3\n")
    report = dc.scan(data, out=tmp_path / "rep")
    report.clean_copy(tmp_path / "out")
    assert (tmp_path / "out" / "data.csv").read_text().splitlines() == ['"a","b"', "2,3"]
    assert (tmp_path / "out" / "t.tsv").read_text().splitlines() == ['"a"\t"b"', "2\t3"]


def test_samples_per_check_and_per_file(demo_report: dc.Report) -> None:
    per_check = demo_report.samples(k=2)
    assert per_check.groupby("check").size().to_dict() == {
        "corrupt": 1,
        "extreme": 2,
        "inf": 2,
        "nan": 2,
        "null": 1,
        "out_of_range": 1,
    }
    oor = per_check[per_check["check"] == "out_of_range"].iloc[0]
    assert (oor["row"], oor["column"], oor["value"]) == (20, "label", "12")
    per_file = demo_report.samples(per="path", k=1)
    assert len(per_file) == 4  # the 4 files with findings
    with pytest.raises(UsageError, match="per is 'check' or 'path'"):
        demo_report.samples(per="column")
