"""Resume: an interrupted scan restarts, skips the finished units, and ends as a clean run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _clusterkit import comparable, manifest

import datacheck
from datacheck import findings as fnd
from datacheck.checks._registry import Severity
from datacheck.engine import _journal
from datacheck.engine._journal import JOURNAL, Journal
from datacheck.engine._result import UnitResult
from datacheck.errors import UsageError
from datacheck.findings import Finding, findings_table


class Interrupt(KeyboardInterrupt):
    """Raised by a progress callback: the scan stops as on Ctrl-C."""


def _stop_after(n: int):
    def progress(result: UnitResult, done: int, total: int) -> None:
        if done >= n:
            raise Interrupt

    return progress


def _counting():
    seen: list[str] = []

    def progress(result: UnitResult, done: int, total: int) -> None:
        seen.append(result.key)

    progress.seen = seen  # type: ignore[attr-defined]
    return progress


@pytest.fixture
def data(demo_dir: Path, tmp_path: Path) -> Path:
    """The demo plus a few more Parquet shards with NaNs (enough units to stop midway)."""
    root = tmp_path / "data"
    shutil.copytree(demo_dir, root)
    rng = np.random.default_rng(7)
    for i in range(6):
        x = rng.standard_normal(500).astype(np.float32)
        x[i * 11] = np.nan
        pq.write_table(pa.table({"x": x}), root / f"extra-{i}.parquet")
    return root


def _units(out: Path) -> list[dict]:
    lines = (out / JOURNAL).read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def test_interrupted_then_resumed_equals_uninterrupted(data: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    datacheck.scan(data, out=clean, executor="inprocess")
    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        datacheck.scan(data, out=out, executor="inprocess", progress=_stop_after(4))
    assert not (out / "report.json").exists()
    assert len(_units(out)) == 4  # journaled as they finished, including the 4th
    assert list((out / "parts").iterdir())
    counter = _counting()
    finished_before = {u["key"] for u in _units(out)}
    datacheck.scan(data, out=out, executor="inprocess", resume=True, progress=counter)
    total = len(comparable(clean)["files"])
    assert len(counter.seen) == total - 4  # only the units not done before were scanned
    assert not finished_before & set(counter.seen)
    assert comparable(out) == comparable(clean)
    assert manifest(out) == manifest(clean)
    assert not (out / JOURNAL).exists() and not (out / "parts").exists()


def test_resume_rescans_only_files_that_changed(data: Path, tmp_path: Path) -> None:
    total = len(datacheck.scan(data, out=tmp_path / "clean", executor="inprocess").files)
    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        datacheck.scan(data, out=out, executor="inprocess", progress=_stop_after(total - 1))
    done = {u["path"] for u in _units(out)}
    changed = sorted(p for p in done if p.endswith("extra-0.parquet"))
    assert changed
    (left,) = {str(p) for p in data.rglob("*") if p.suffix in (".parquet", ".csv")} - done
    x = np.zeros(500, dtype=np.float32)
    x[[1, 2]] = np.inf
    pq.write_table(pa.table({"x": x}), changed[0])  # same name, new content and mtime
    counter = _counting()
    report = datacheck.scan(data, out=out, executor="inprocess", resume=True, progress=counter)
    assert sorted(k.split("|")[0] for k in counter.seen) == sorted([changed[0], left])
    rows = report.findings
    assert sorted(rows[rows["path"] == changed[0]]["row"].tolist()) == [1, 2]


@pytest.mark.parametrize("damage", ["lost", "truncated"])
def test_a_torn_last_line_and_a_lost_part_mean_rescanning_those_units(
    data: Path, tmp_path: Path, damage: str
) -> None:
    clean = tmp_path / "clean"
    datacheck.scan(data, out=clean, executor="inprocess")
    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        datacheck.scan(data, out=out, executor="inprocess", progress=_stop_after(5))
    entries = _units(out)
    with_part = next(e for e in entries if e["part_file"])
    part = out / "parts" / with_part["part_file"]
    if damage == "lost":
        os.remove(part)
    else:  # a machine crash before the part reached the disk
        part.write_bytes(part.read_bytes()[:20])
    with open(out / JOURNAL, "a") as fh:
        fh.write('{"key": "torn')  # the write a kill -9 interrupted
    counter = _counting()
    datacheck.scan(data, out=out, executor="inprocess", resume=True, progress=counter)
    assert with_part["key"] in counter.seen
    assert comparable(out) == comparable(clean)
    assert manifest(out) == manifest(clean)


def test_resume_with_other_settings_is_a_usage_error(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        datacheck.scan(data, out=out, executor="inprocess", progress=_stop_after(2))
    with pytest.raises(UsageError, match="other settings"):
        datacheck.scan(data, data / "schema.yaml", out=out, executor="inprocess", resume=True)


def test_without_resume_an_old_journal_is_discarded(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        datacheck.scan(data, out=out, executor="inprocess", progress=_stop_after(2))
    counter = _counting()
    datacheck.scan(data, out=out, executor="inprocess", progress=counter)
    assert len(counter.seen) == len(comparable(out)["files"])


def test_resume_without_a_journal_is_a_full_scan(data: Path, tmp_path: Path) -> None:
    counter = _counting()
    datacheck.scan(data, out=tmp_path / "o", executor="inprocess", resume=True, progress=counter)
    assert len(counter.seen) == len(comparable(tmp_path / "o")["files"])


def _result(i: int, **kw) -> UnitResult:
    return UnitResult(f"f{i}|1|0.0|0/1", f"f{i}", "image", 0, 1, **kw)


def test_lines_are_written_in_batches_and_every_one_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quick units' lines are held; a corrupt unit (it may have cost a crash or a time-out),
    20 ms of held work and close() write them; every line written names a part on disk."""
    monkeypatch.setattr(_journal, "_FLUSH_EVERY_S", 3600.0)  # a slow machine writes no sooner
    journal = Journal(tmp_path, tmp_path / "parts", {"k": 1}, resume=False)
    journal.record(_result(0, seconds=0.001))
    journal.record(_result(1, seconds=0.001))
    assert _units(tmp_path) == []  # held: a SIGKILL now means rescanning two quick units
    bad = _result(2, corrupt="boom", counts={"corrupt": 1}, sites={"corrupt": {"error": 1}})
    bad.table = findings_table([Finding("f2", "corrupt", Severity.ERROR, "boom")])
    journal.record(bad)
    lines = _units(tmp_path)
    assert [u["key"].split("|")[0] for u in lines] == ["f0", "f1", "f2"]
    assert (tmp_path / "parts" / lines[-1]["part_file"]).is_file()
    journal.record(_result(3, seconds=0.012))
    journal.record(_result(4, seconds=0.012))  # 24 ms of worker time held: written
    assert len(_units(tmp_path)) == 5
    journal.record(_result(5, seconds=0.001))
    journal.close()
    assert len(_units(tmp_path)) == 6


def test_findings_sent_back_in_a_result_are_spilled_to_a_part(tmp_path: Path) -> None:
    """A remote worker without OUT/parts returns its findings; the journal writes them out."""
    parts = tmp_path / "parts"
    res = UnitResult(
        "f|1|0.0|0/1",
        "f",
        "parquet",
        0,
        1,
        counts={"corrupt": 1},
        sites={"corrupt": {"error": 1}},
        corrupt="boom",
    )
    res.table = findings_table([Finding("f", "corrupt", Severity.ERROR, "boom")])
    journal = Journal(tmp_path, parts, {"k": 1}, resume=False)
    journal.record(res)
    journal.close()
    assert res.table is None and res.part_file is not None
    reopened = Journal(tmp_path, parts, {"k": 1}, resume=True)
    reopened.close()
    (stored,) = reopened._done.values()
    assert stored.corrupt == "boom" and stored.counts == {"corrupt": 1}
    assert fnd.read_part(stored.part_file).column("value").to_pylist() == ["boom"]


def test_a_worker_that_cannot_see_the_parts_folder_returns_its_findings(
    data: Path, tmp_path: Path
) -> None:
    """No shared filesystem: the findings come back in the result, not as a missing file."""
    from datacheck.engine._discover import discover, plan_units
    from datacheck.engine._unit import scan_unit

    unit = next(
        u for u in plan_units(discover([str(data)])[0]) if u.path.endswith("extra-3.parquet")
    )
    res = scan_unit(unit, None, str(tmp_path / "not-on-this-worker" / "parts"))
    assert res.part_file is None
    assert res.table is not None and res.table.column("row").to_pylist() == [33]
