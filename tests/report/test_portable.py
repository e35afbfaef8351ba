"""Reports are portable: absolute paths in report.json, readable from any working directory
and after the project folder (data + report) is moved; clear errors when the data is gone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import datacheck as dc
from datacheck.errors import InputError

pytest.importorskip("matplotlib")


@pytest.fixture
def project(demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with the demo data and a report scanned with relative paths."""
    root = tmp_path / "project"
    shutil.copytree(demo_dir, root / "demo-data")
    monkeypatch.chdir(root)
    dc.scan("demo-data", "demo-data/schema.yaml", out="dc-report", executor="inprocess")
    return root


def _use(report: dc.Report, tmp_path: Path) -> None:
    rows = report.flagged_rows("shard-002.parquet")
    assert list(rows.index) == [7, 42, 99, 600]
    report.plot.column("x0")
    result = report.clean_copy(tmp_path / "clean")
    assert result["status"].tolist() == ["copied", "cleaned", "cleaned", "cleaned", "skipped"]


def test_report_json_records_absolute_paths_and_roots(project: Path) -> None:
    doc = json.loads((project / "dc-report" / "report.json").read_text())
    data = str(project / "demo-data")
    assert doc["settings"]["inputs"] == [data]
    assert doc["settings"]["schema"] == str(project / "demo-data" / "schema.yaml")
    assert doc["settings"]["out"] == str(project / "dc-report")
    for f in doc["files"]:
        assert os.path.isabs(f["path"]) and f["path"].startswith(data + os.sep)
        assert f["root"] == data
    findings = dc.load_report(project / "dc-report").findings
    assert findings["path"].str.startswith(data + os.sep).all()


def test_load_report_from_another_working_directory(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebooks = project / "notebooks"
    notebooks.mkdir()
    monkeypatch.chdir(notebooks)
    _use(dc.load_report("../dc-report"), tmp_path)


def test_load_report_after_the_project_folder_moved(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved = tmp_path / "elsewhere" / "project"
    moved.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    shutil.move(project, moved)
    report = dc.load_report(moved / "dc-report")
    _use(report, tmp_path)
    entry = report.data["files"][1]
    assert report.local_path(entry) == str(moved / "demo-data" / "train" / "shard-001.parquet")


def test_data_gone_says_what_and_where_it_looked(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.move(project / "dc-report", tmp_path / "dc-report")
    shutil.rmtree(project / "demo-data")
    report = dc.load_report(tmp_path / "dc-report")
    missing = str(project / "demo-data" / "train" / "shard-002.parquet")
    with pytest.raises(InputError) as err:
        report.flagged_rows("shard-002.parquet")
    msg = str(err.value)
    assert f"scanned file {missing!r} is gone: looked at {missing!r} and " in msg
    assert str(tmp_path / "demo-data" / "train" / "shard-002.parquet") in msg
    with pytest.raises(InputError, match="is gone: looked at"):
        report.plot.column("x0")
    with pytest.raises(InputError, match="is gone: looked at"):
        report.clean_copy(tmp_path / "clean")


@pytest.mark.parametrize("progress", [False, True, None])
def test_scan_progress_flag(
    demo_dir: Path, tmp_path: Path, progress: bool | None, capsys: pytest.CaptureFixture[str]
) -> None:
    report = dc.scan(demo_dir, out=tmp_path / "out", executor="inprocess", progress=progress)
    assert report.summary["files"] == 5
    err = capsys.readouterr().err
    assert ("scanning" in err) == bool(progress)


def test_scan_progress_must_be_a_flag_or_a_callable(demo_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(dc.UsageError, match="progress='yes'"):
        dc.scan(demo_dir, out=tmp_path / "out", executor="inprocess", progress="yes")


def test_missing_report_names_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        dc.load_report("dc-report")
    assert f"looked for {str(tmp_path / 'dc-report' / 'report.json')!r}" in str(err.value)


def test_a_data_folder_is_one_clear_error_not_a_chained_traceback(demo_dir: Path) -> None:
    with pytest.raises(InputError) as err:
        dc.load_report(demo_dir)
    text = str(err.value)
    assert "no report.json in it" in text and "so it is no scan's --out folder" in text, text
    assert f"scan it first (datacheck scan {str(demo_dir)!r} --out dc-report)" in text
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained traceback


def test_a_folder_holding_a_report_names_it(tmp_path: Path, demo_dir: Path) -> None:
    dc.scan(demo_dir, out=tmp_path / "dc-report", progress=False)
    with pytest.raises(InputError, match="but '.*dc-report' is a report; load that"):
        dc.load_report(tmp_path)
